"""Agents the remote-agent tests run outside the cluster (through the channel)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from pydantic import BaseModel

import reach


@reach.schema("unit.add@1.0")
class Add(BaseModel):
    a: int
    b: int
    sleep_s: float = 0.0
    fail: str = ""


@reach.schema("unit.sum@1.0")
class Sum(BaseModel):
    total: int
    by: str


@reach.schema("unit.count@1.0")
class Count(BaseModel):
    upto: int


@reach.schema("unit.tick@1.0")
class Tick(BaseModel):
    n: int


@reach.schema("unit.relay@1.0")
class Relay(BaseModel):
    capability: str
    a: int
    b: int


class Calculator(reach.Agent):
    """A remote agent: adds, counts (a stream), and relays sums to others by capability."""

    capabilities = ("math.add", "math.count")
    description = "Adds two whole numbers and counts up to a number. Knows no other arithmetic."

    def __init__(self) -> None:
        self.runs = 0

    @reach.handler(Add, returns=Sum)
    async def add(self, ctx: reach.Context, m: Add) -> Sum:
        self.runs += 1
        if m.sleep_s:
            await asyncio.sleep(m.sleep_s)
        if m.fail:
            raise reach.ReachError(f"asked to fail {m.fail}", severity=reach.Severity(m.fail))
        return Sum(total=m.a + m.b, by=self.id)

    @reach.handler(Count, returns=Tick)
    async def count(self, ctx: reach.Context, m: Count) -> AsyncIterator[Tick]:
        for n in range(1, m.upto + 1):
            yield Tick(n=n)

    @reach.handler(Relay, returns=Sum)
    async def relay(self, ctx: reach.Context, m: Relay) -> Sum:
        reply = await ctx.request_capability(m.capability, Add(a=m.a, b=m.b), returns=Sum)
        return reply.value


class Adder(reach.Agent):
    """An agent inside the cluster that a remote agent calls."""

    capabilities = ("inner.add",)
    description = "Adds inside the cluster."

    @reach.handler(Add, returns=Sum)
    async def add(self, ctx: reach.Context, m: Add) -> Sum:
        return Sum(total=m.a + m.b, by=self.id)
