"""Agents whose process dies on a marked payload (importable by Ray workers through
PYTHONPATH), for the poison-message tests."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from pydantic import BaseModel

import reach


@reach.schema("test.dose@1.0")
class Dose(BaseModel):
    text: str


class Brittle(reach.Agent):
    """Writes down every dose it is handed, in the file it is given, then answers it, or, for
    one whose text starts with "poison", ends its process at once (as a crash in native code
    would: no exception, no reply)."""

    capabilities = ("test.brittle",)

    def __init__(self, handed: str) -> None:
        self.handed = Path(handed)

    @reach.handler(Dose, returns=Dose)
    async def take(self, ctx: reach.Context, m: Dose) -> Dose:
        with self.handed.open("a", encoding="utf-8") as out:
            out.write(f"{self.id} {m.text}\n")
        if m.text.startswith("poison"):
            os._exit(1)
        return Dose(text=f"{self.id} took {m.text}")


@reach.schema("test.probe@1.0")
class Probe(BaseModel):
    """A health probe: always the same (empty) content."""


@reach.schema("test.probed@1.0")
class Probed(BaseModel):
    pid: int


class Watched(Brittle):
    """A Brittle agent that also answers probes, slowly (a probe is in its hands at any
    moment while a caller probes it often), with the process's ID."""

    capabilities = ("test.watched",)

    @reach.handler(Probe, returns=Probed)
    async def probe(self, ctx: reach.Context, m: Probe) -> Probed:
        await asyncio.sleep(0.2)
        return Probed(pid=os.getpid())
