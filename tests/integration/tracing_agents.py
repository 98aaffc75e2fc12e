"""Agents of the tracing test (importable by Ray workers through PYTHONPATH)."""

from __future__ import annotations

from pydantic import BaseModel

import reach


@reach.schema("tr.ask@1.0")
class Ask(BaseModel):
    text: str


@reach.schema("tr.said@1.0")
class Said(BaseModel):
    text: str
    by: str


class Echo(reach.Agent):
    """Says back what it heard."""

    capabilities = ("tr.echo",)
    description = "Repeats what it hears."

    @reach.handler(Ask, returns=Said)
    async def say(self, ctx: reach.Context, m: Ask) -> Said:
        return Said(text=m.text, by=self.id)


class Relay(reach.Agent):
    """Asks a holder of tr.echo, by capability, and answers with its answer."""

    capabilities = ("tr.relay",)
    description = "Passes a question on to an echo."

    @reach.handler(Ask, returns=Said)
    async def say(self, ctx: reach.Context, m: Ask) -> Said:
        return (await ctx.request_capability("tr.echo", m, returns=Said)).value
