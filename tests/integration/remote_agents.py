"""Agents of the remote-agent integration tests and benchmark (importable by Ray workers and by
``reach connect`` processes); their schemas are the JavaScript calculator's
(clients/js/reach-agent.mjs)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from pydantic import BaseModel

import reach


@reach.schema("test.add@1.0")
class Add(BaseModel):
    a: int
    b: int
    sleep_s: float = 0.0
    fail: str = ""


@reach.schema("test.sum@1.0")
class Sum(BaseModel):
    total: int
    by: str


@reach.schema("test.count@1.0")
class Count(BaseModel):
    upto: int


@reach.schema("test.tick@1.0")
class Tick(BaseModel):
    n: int


@reach.schema("test.ask_math@1.0")
class AskMath(BaseModel):
    capability: str
    a: int
    b: int
    text: str = ""


class PyCalculator(reach.Agent):
    """The Python twin of the JavaScript calculator, run remotely with ``reach connect``."""

    capabilities = ("math.add", "math.count")
    description = "A Python calculator: adds two whole numbers and counts up to a number."

    @reach.handler(Add, returns=Sum)
    async def add(self, ctx: reach.Context, m: Add) -> Sum:
        if m.sleep_s:
            await asyncio.sleep(m.sleep_s)
        return Sum(total=m.a + m.b, by=self.id)

    @reach.handler(Count, returns=Tick)
    async def count(self, ctx: reach.Context, m: Count) -> AsyncIterator[Tick]:
        for n in range(1, m.upto + 1):
            yield Tick(n=n)


class Asker(reach.Agent):
    """An agent of the cluster that asks a holder of a capability to add."""

    capabilities = ("math.ask",)
    description = "Asks others to do arithmetic."

    @reach.handler(AskMath, returns=Sum)
    async def ask(self, ctx: reach.Context, m: AskMath) -> Sum:
        reply = await ctx.request_capability(m.capability, Add(a=m.a, b=m.b), returns=Sum,
                                             text=m.text or None)
        return reply.value
