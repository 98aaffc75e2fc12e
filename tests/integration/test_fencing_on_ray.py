"""Fenced replies on a real cluster: two holders of one request, on two nodes, both run it (the
first was slow, not dead); one result is committed, the other discarded and audited, and every
caller ends with the committed reply.

The holders are called directly by two drivers under the same request ID, as a failover would
send it (a task's every attempt carries the task's ID).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from fencing_agents import Done, Holder, Job, Poke, Progress
from ray_helpers import wait_until

import reach
from reach._runtime.runner import DISCARDED
from reach.errors import AgentUnavailable

pytestmark = pytest.mark.integration

ON_A = reach.Dedicated(resources={"node_a": 1})
ON_B = reach.Dedicated(resources={"node_b": 1})


@pytest.fixture
async def failover(rt: Any) -> AsyncIterator[Any]:
    """A second driver: the one that sends the request again, to another holder."""
    second = reach.Runtime(rt.cluster, rt.limits)
    yield second
    await second.close()


async def progress(rt: Any, agent_id: str, *, release: bool = False) -> Progress:
    reply = await rt.client.request(agent_id, Poke(release=release), returns=Progress)
    return reply.value


async def started(rt: Any, agent_id: str, request_id: str) -> None:
    async def seen() -> bool:
        return request_id in (await progress(rt, agent_id)).started

    await wait_until(seen)


async def discards(rt: Any, agent_id: str) -> list[dict[str, Any]]:
    async def found() -> list[dict[str, Any]]:
        records = await rt.cluster.audit_log().audit_records(None, agent_id, 1000)
        return [r for r in records if r["outcome"] == DISCARDED]

    hits: list[dict[str, Any]] = await wait_until(found)
    return hits


async def test_a_slow_holders_result_is_discarded_and_its_caller_gets_the_winners_reply(
    rt: Any, failover: Any,
) -> None:
    slow, fast, request_id = "fence-slow-1", "fence-fast-1", f"fence-{uuid.uuid4().hex}"
    await rt.spawn(Holder, slow, placement=ON_A, args=(True,))
    await rt.spawn(Holder, fast, placement=ON_B)
    try:
        to_slow = asyncio.ensure_future(rt.client.request(
            slow, Job(text="x"), msg_id=request_id, timeout_ms=60_000))
        await started(rt, slow, request_id)  # it holds a claim, and its job is under way
        won = await failover.client.request(fast, Job(text="x"), msg_id=request_id,
                                            timeout_ms=60_000)
        assert won.value == Done(text="x", by=fast)

        await progress(rt, slow, release=True)
        assert (await to_slow).value == Done(text="x", by=fast)
        assert (await progress(rt, slow)).finished == [request_id]  # it ran to the end...
        recorded = await rt.cluster.sessions().reply_for(request_id)
        assert recorded == {"agent_id": fast, "payload": {"text": "x", "by": fast},
                            "schema": "fencing.done@1.0"}  # ...and only the winner's counts
        (record,) = await discards(rt, slow)
        assert record["callee"] == slow

        late = await rt.client.request(slow, Job(text="x"), msg_id=request_id)
        assert late.value == Done(text="x", by=fast)
        assert (await progress(rt, slow)).finished == [request_id]  # not run again
    finally:
        await rt.stop(slow)
        await rt.stop(fast)


async def test_a_fenced_holder_that_finishes_first_answers_retryable_and_the_other_commits(
    rt: Any, failover: Any,
) -> None:
    first, second, request_id = "fence-first-2", "fence-second-2", f"fence-{uuid.uuid4().hex}"
    await rt.spawn(Holder, first, placement=ON_A, args=(True,))
    await rt.spawn(Holder, second, placement=ON_B, args=(True,))
    try:
        to_first = asyncio.ensure_future(rt.client.request(
            first, Job(text="y"), msg_id=request_id, timeout_ms=60_000))
        await started(rt, first, request_id)
        to_second = asyncio.ensure_future(failover.client.request(
            second, Job(text="y"), msg_id=request_id, timeout_ms=60_000))
        await started(failover, second, request_id)  # its claim fenced the first one off

        await progress(rt, first, release=True)
        with pytest.raises(AgentUnavailable, match="being answered by another holder") as err:
            await to_first
        assert err.value.details["reason"] == "fenced"
        assert await rt.cluster.sessions().reply_for(request_id) is None

        await progress(failover, second, release=True)
        assert (await to_second).value == Done(text="y", by=second)
        retry = await rt.client.request(first, Job(text="y"), msg_id=request_id)
        assert retry.value == Done(text="y", by=second)
        assert len(await discards(rt, first)) == 1
    finally:
        await rt.stop(first)
        await rt.stop(second)
