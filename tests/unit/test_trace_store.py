"""The cluster's trace store through its port, on the fake cluster: spans sent by any process and
never awaited are held, found and graphed; the bound is the cluster's setting; a restart
empties it."""

from __future__ import annotations

import asyncio

import pytest

from reach import clock
from reach._runtime.names import TRACES_NAME
from reach.errors import AgentUnavailable
from reach.ports.endpoint import Endpoint
from reach.spans import Attr, SpanKind, SpanRecord, SpanStatus, TraceEdge
from reach.testing import FakeCluster, eventually, run


def handled(trace: str, sid: str, sender: str, agent: str, *, parent: str | None = None,
            start_s: float, status: SpanStatus = SpanStatus.OK) -> SpanRecord:
    """A handler run's server span, started at ``start_s`` and lasting 10 ms."""
    start = int(start_s * 1e9)
    return SpanRecord(trace, sid, parent, "handle ts.ask@1.0", SpanKind.SERVER, start,
                      start + 10_000_000, status=status, process="reach.host.x",
                      attributes={str(Attr.SENDER): sender, str(Attr.AGENT_ID): agent,
                                  str(Attr.CAPABILITY): "ts.ask"})


def test_spans_sent_and_not_awaited_are_found_and_read_back() -> None:
    async def scenario(fake: FakeCluster) -> None:
        store = fake.trace_store()
        now = clock.now()
        sent = [handled("ts-t1", "a", "driver:ts-d", "ts-router", start_s=now),
                handled("ts-t1", "b", "ts-router", "ts-logistics", parent="a",
                        start_s=now + 0.001, status=SpanStatus.ERROR)]
        store.add_spans(sent)  # fire and forget, as every process sends them

        async def found() -> list[str]:
            return [t.trace_id for t in await store.find_traces(agent="ts-logistics")]

        assert await eventually(found) == ["ts-t1"]
        assert await store.trace("ts-t1") == sent  # copies across the process boundary
        [summary] = await store.find_traces(status=SpanStatus.ERROR, capability="ts.ask")
        assert (summary.spans, summary.errors) == (2, 1)
        assert summary.agents == ("ts-logistics", "ts-router")
        assert await store.find_traces(task_id="ts-task") == []
        stats = await store.trace_stats()
        assert (stats.spans, stats.traces, stats.received, stats.dropped) == (2, 1, 2, 0)

    run(scenario)


def test_the_message_graph_is_counted_over_the_period_on_the_stores_clock() -> None:
    async def scenario(fake: FakeCluster) -> None:
        store = fake.trace_store()
        start = clock.now()
        await store.add_spans([handled(f"ts-e{i}", "a", "ts-router", "ts-billing", start_s=start)
                               for i in range(3)])
        await asyncio.sleep(2.0)  # virtual time: the period is two seconds long
        since = int(start * 1e9)
        assert await store.edges(since) == [TraceEdge("ts-router", "ts-billing", 3, 0, 1.5)]

    run(scenario)


def test_the_store_keeps_to_the_clusters_bound() -> None:
    async def scenario(fake: FakeCluster) -> None:
        store = fake.trace_store()
        for i in range(50):
            await store.add_spans([handled(f"ts-b{i:02d}", "a", "ts-a", "ts-b", start_s=i)])
        stats = await store.trace_stats()
        assert stats.max_bytes == 20_000
        assert 0 < stats.bytes <= 20_000
        assert stats.received == 50
        assert stats.dropped == 50 - stats.spans > 0
        assert [t.trace_id for t in await store.find_traces(limit=1)] == ["ts-b49"]
        assert await store.trace("ts-b00") == []

    run(scenario, trace_store_bytes=20_000)


def test_a_restarted_store_is_empty_and_takes_spans_again() -> None:
    async def scenario(fake: FakeCluster) -> None:
        store = fake.trace_store()
        await store.add_spans([handled("ts-r1", "a", "ts-a", "ts-b", start_s=clock.now())])
        fake.crash(TRACES_NAME)
        await store.add_spans([handled("ts-r2", "a", "ts-a", "ts-b", start_s=clock.now())])
        assert await store.trace("ts-r1") == []  # what it held went with its process
        assert len(await store.trace("ts-r2")) == 1  # sent while it restarted: waited for it

    run(scenario)


def test_a_cluster_with_no_trace_store_says_so() -> None:
    async def scenario(fake: FakeCluster) -> None:
        port: Endpoint = fake.endpoint(TRACES_NAME)
        fake.kill(port)
        with pytest.raises(AgentUnavailable) as caught:
            fake.trace_store()
        assert caught.value.details["endpoint"] == TRACES_NAME

    run(scenario)
