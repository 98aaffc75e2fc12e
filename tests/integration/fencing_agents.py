"""Agents of the fencing integration tests (importable by Ray workers through PYTHONPATH)."""

from __future__ import annotations

import asyncio

from pydantic import BaseModel

import reach


@reach.schema("fencing.job@1.0")
class Job(BaseModel):
    text: str


@reach.schema("fencing.done@1.0")
class Done(BaseModel):
    text: str
    by: str


@reach.schema("fencing.poke@1.0")
class Poke(BaseModel):
    release: bool = False


@reach.schema("fencing.progress@1.0")
class Progress(BaseModel):
    started: list[str]
    finished: list[str]


class Holder(reach.Agent):
    """Does a job at most once per request ID. A gated holder holds each job until poked with
    ``release``, so that a test decides which of two holders finishes first."""

    capabilities = ("fencing.work",)
    description = "Does jobs; a gated one waits to be released."

    def __init__(self, gated: bool = False) -> None:
        self.gate = asyncio.Event()
        if not gated:
            self.gate.set()
        self.started: list[str] = []
        self.finished: list[str] = []

    @reach.handler(Job, returns=Done, once=True)
    async def work(self, ctx: reach.Context, job: Job) -> Done:
        self.started.append(ctx.request_envelope.msg_id)
        await self.gate.wait()
        self.finished.append(ctx.request_envelope.msg_id)
        return Done(text=job.text, by=self.id)

    @reach.handler(Poke, returns=Progress)
    async def poke(self, ctx: reach.Context, poke: Poke) -> Progress:
        if poke.release:
            self.gate.set()
        return Progress(started=self.started, finished=self.finished)
