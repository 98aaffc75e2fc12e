"""The cluster's trace store on real Ray: spans sent, and not waited for, by a process of its own
(through the cluster handle it was started with) are read back through the port by the driver:
the trace, a listing by agent, the message graph and the store's figures."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import pytest
from ray_helpers import wait_until
from trace_store_senders import SpanSender

from reach import RuntimeConfig
from reach.spans import Attr, SpanKind, SpanRecord, SpanStatus, TraceEdge

pytestmark = [pytest.mark.integration]

ROUTER, LOGISTICS = "ts-router-1", "ts-logistics-1"


def handler_run(trace_id: str, span_id: str, parent: str | None, *, sender: str, agent: str,
                start_ns: int, status: SpanStatus = SpanStatus.OK) -> SpanRecord:
    return SpanRecord(trace_id, span_id, parent, "handle ts.order@1.0", SpanKind.SERVER,
                      start_ns, start_ns + 2_000_000, status=status, process="ts-span-sender",
                      attributes={str(Attr.SENDER): sender, str(Attr.AGENT_ID): agent,
                                  str(Attr.CAPABILITY): "ts.order"})


async def test_spans_sent_from_another_process_are_read_back_through_the_port(rt: Any) -> None:
    cluster = rt.cluster
    trace_id, root, child = os.urandom(16).hex(), os.urandom(8).hex(), os.urandom(8).hex()
    now = time.time_ns()
    spans = [handler_run(trace_id, child, root, sender=ROUTER, agent=LOGISTICS,
                         start_ns=now + 1_000_000, status=SpanStatus.ERROR),
             handler_run(trace_id, root, None, sender="driver:ts", agent=ROUTER, start_ns=now)]
    sender = cluster.start_process("ts-span-sender", SpanSender, (cluster,))
    try:
        assert await asyncio.wait_for(sender.call("send", spans), 60) == 2
        store = cluster.trace_store()
        held = await wait_until(lambda: store.trace(trace_id), timeout_s=30, poll_s=0.05)
        assert held == [spans[1], spans[0]]  # by start time
        [summary] = await store.find_traces(agent=LOGISTICS)
        assert (summary.trace_id, summary.spans, summary.errors) == (trace_id, 2, 1)
        assert summary.agents == (LOGISTICS, ROUTER)
        edges = [e for e in await store.edges(now) if e.target in (ROUTER, LOGISTICS)]
        assert [(e.source, e.target, e.count, e.errors) for e in edges] == [
            ("driver:ts", ROUTER, 1, 0), (ROUTER, LOGISTICS, 1, 1)]
        assert all(isinstance(e, TraceEdge) and e.per_s > 0 for e in edges)
        stats = await store.trace_stats()
        assert stats.received >= 2
        assert stats.max_bytes == RuntimeConfig().trace_store_bytes  # the session's default
    finally:
        cluster.kill(cluster.endpoint("ts-span-sender"))
