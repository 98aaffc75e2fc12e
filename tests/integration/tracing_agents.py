"""Agents of the tracing test (importable by Ray workers through PYTHONPATH)."""

from __future__ import annotations

from pydantic import BaseModel

import reach
from reach.a2a.client.models import A2AMessage, A2AReply


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


@reach.schema("tr.refund@1.0")
class Refund(BaseModel):
    order_id: str
    amount: float


@reach.schema("tr.refunded@1.0")
class Refunded(BaseModel):
    text: str
    refund_id: str
    by: str


class RefundRouter(reach.Agent):
    """The front door: hands a refund to a holder of tr.refund.desk, by capability."""

    capabilities = ("tr.route",)
    description = "Routes refunds to the refund desk."

    @reach.handler(Refund, returns=Refunded)
    async def route(self, ctx: reach.Context, m: Refund) -> Refunded:
        return (await ctx.request_capability("tr.refund.desk", m, returns=Refunded)).value


class RefundDesk(reach.Agent):
    """Issues a refund by asking a remote A2A agent (``remote``: its proxy's ID)."""

    capabilities = ("tr.refund.desk",)
    description = "Issues refunds through a remote A2A refund agent."

    def __init__(self, remote: str) -> None:
        self.remote = remote

    @reach.handler(Refund, returns=Refunded)
    async def issue(self, ctx: reach.Context, m: Refund) -> Refunded:
        reply = await ctx.request(self.remote, A2AMessage(data=m.model_dump()),
                                  returns=A2AReply)
        data = reply.value.data or {}
        return Refunded(text=reply.value.text, refund_id=str(data.get("refund_id", "")),
                        by=self.id)
