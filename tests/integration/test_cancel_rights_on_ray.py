"""Cancel rights on a real cluster (signed, audited): an agent naming another caller's request
in a cancel changes nothing but the audit log; the request's own sender cancels it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from cancel_agents import Held, Hold, Holder, Strike, Striker
from ray_helpers import wait_until

import reach
from reach.errors import TaskCancelled
from reach.sessions import CANCEL_SCHEMA

pytestmark = pytest.mark.integration


async def _holding(rt: Any) -> str:
    async def held() -> list[str]:
        reply = await rt.client.request("cr-holder", Held(request_ids=[]), returns=Held)
        return list(reply.value.request_ids)

    return str((await wait_until(held))[0])


async def test_a_cancel_from_an_agent_that_did_not_send_the_request_is_refused(rt: Any) -> None:
    await rt.spawn_many(Holder, ["cr-holder"], placement=reach.Packed(pool="cancelrights"))
    await rt.spawn(Striker, "cr-striker")
    call = asyncio.ensure_future(rt.client.request("cr-holder", Hold(seconds=3),
                                                   timeout_ms=60_000, returns=Held))
    request_id = await _holding(rt)
    await rt.client.request("cr-striker", Strike(target="cr-holder", request_id=request_id))
    reply = await call
    assert reply.value.request_ids == [request_id]  # it ran to its end

    async def refused() -> list[dict[str, Any]]:
        records = await rt.cluster.audit_log().audit_records(None, "cr-striker", 1000)
        return [r for r in records if r["outcome"] == "refused: not_your_request"]

    [record] = await wait_until(refused)
    assert (record["caller"], record["callee"]) == ("cr-striker", "cr-holder")

    call = asyncio.ensure_future(rt.client.request("cr-holder", Hold(seconds=30),
                                                   timeout_ms=60_000))
    request_id = await _holding(rt)
    await rt.client.notify("cr-holder", {"request_id": request_id, "reason": "mine"},
                           CANCEL_SCHEMA)
    with pytest.raises(TaskCancelled):
        await call
