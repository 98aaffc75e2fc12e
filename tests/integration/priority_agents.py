"""Agents of the priority failover test (importable by Ray workers through PYTHONPATH)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from pydantic import BaseModel

import reach

#: How often a held start looks at its gate file again.
GATE_POLL_S = 0.02


@reach.schema("prio_ray.ask@1.0")
class Ask(BaseModel):
    text: str = ""


@reach.schema("prio_ray.answered@1.0")
class Answered(BaseModel):
    agent_id: str
    pid: int


class Refunds(reach.Agent):
    """Issues refunds; the primary of ``refund.issue`` by its class (a spawn or child spec may
    make it a backup). Its start waits while its ``gate`` file exists: a test holds a restart
    open with it, for as long as it needs to watch the traffic meanwhile."""

    capabilities = {"refund.issue": 0, "refund.status": 1}  # noqa: RUF012 - read once, as defined
    description = "Issues refunds and tells their status."

    def __init__(self, gate: str = "") -> None:
        self.gate = Path(gate) if gate else None

    async def on_start(self) -> None:
        while self.gate is not None and self.gate.exists():
            await asyncio.sleep(GATE_POLL_S)

    @reach.handler(Ask, returns=Answered)
    async def issue(self, ctx: reach.Context, m: Ask) -> Answered:
        return Answered(agent_id=self.id, pid=os.getpid())
