"""Agents the A2A gateway's integration tests call (importable by Ray workers through
PYTHONPATH)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from pydantic import BaseModel

import reach
from reach.errors import Severity


@reach.schema("gw.order@1.0")
class GwOrder(BaseModel):
    order_id: int
    sleep_s: float = 0.0
    fail: str = ""  # a severity to fail with


@reach.schema("gw.status@1.0")
class GwStatus(BaseModel):
    order_id: int
    status: str
    by: str = ""


class GwOrders(reach.Agent):
    capabilities = ("gw.order.query",)
    description = "Looks up orders by ID (and answers questions about them in words)."

    @reach.handler(GwOrder, returns=GwStatus)
    async def query(self, ctx: reach.Context, m: GwOrder) -> GwStatus:
        await asyncio.sleep(m.sleep_s)
        if m.fail:
            raise reach.ReachError(f"order {m.order_id} failed", severity=Severity(m.fail),
                                   suggestion="try another order",
                                   partial={"order_id": m.order_id, "status": "unknown"})
        return GwStatus(order_id=m.order_id, status="shipped", by=self.id)

    @reach.handler(reach.Text, returns=reach.Text)
    async def chat(self, ctx: reach.Context, m: reach.Text) -> reach.Text:
        return reach.Text(text=f"{self.id} heard: {m.text}")


class GwTeller(reach.Agent):
    capabilities = ("gw.story.tell",)
    description = "Tells a story word by word, as a stream."

    @reach.handler(reach.Text, returns=reach.Text)
    async def tell(self, ctx: reach.Context, m: reach.Text) -> AsyncIterator[reach.Text]:
        for word in m.text.split():
            if word == "pause":
                await asyncio.sleep(2.0)
            yield reach.Text(text=word)
