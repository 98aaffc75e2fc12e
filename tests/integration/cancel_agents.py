"""Agents of the cancel-rights tests on Ray (imported by Ray's workers by module name)."""

from __future__ import annotations

import asyncio

from pydantic import BaseModel

import reach
from reach.sessions import CANCEL_SCHEMA


@reach.schema("cancelrights.hold@1.0")
class Hold(BaseModel):
    seconds: float


@reach.schema("cancelrights.held@1.0")
class Held(BaseModel):
    request_ids: list[str]


@reach.schema("cancelrights.strike@1.0")
class Strike(BaseModel):
    target: str
    request_id: str


class Holder(reach.Agent):
    """Holds requests for a while; tells which it holds."""

    capabilities = ("cancelrights.hold",)

    def __init__(self) -> None:
        self.holding: list[str] = []

    @reach.handler(Hold, returns=Held)
    async def hold(self, ctx: reach.Context, m: Hold) -> Held:
        request_id = ctx.request_envelope.msg_id
        self.holding.append(request_id)
        try:
            await asyncio.sleep(m.seconds)
        finally:
            self.holding.remove(request_id)
        return Held(request_ids=[request_id])

    @reach.handler(Held, returns=Held)
    async def held(self, ctx: reach.Context, m: Held) -> Held:
        return Held(request_ids=list(self.holding))


class Striker(reach.Agent):
    """Sends a cancel naming a request it did not send (the attacker)."""

    capabilities = ("cancelrights.strike",)

    @reach.handler(Strike, returns=Held)
    async def strike(self, ctx: reach.Context, m: Strike) -> Held:
        await ctx.notify(m.target, {"request_id": m.request_id, "reason": "mine now"},
                         CANCEL_SCHEMA)
        return Held(request_ids=[m.request_id])
