"""One trace on a real Ray: a request from a driver through two packed agents on their hosts,
every process tracing as the driver's settings say. The trace is read back from the cluster's
trace store, and from a real OTLP/HTTP receive (a tiny collector in the test, decoding the
exporters' protobuf posts), with the parent links right in both.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from otlp_tools import Collected, Collector
from ray_helpers import traced, wait_until
from tracing_agents import Ask, Echo, Relay, Said

import reach
from reach.spans import Attr

pytestmark = pytest.mark.integration

RELAY, ECHO = "tr-relay-1", "tr-echo-1"


async def test_a_request_through_two_agents_is_one_trace_in_the_store_and_at_the_collector(
    rt: Any, collector: Collector,
) -> None:
    async with traced(rt, "tr-driver", otlp_endpoint=collector.url) as driver:
        cluster = driver.cluster
        records: list[reach.AgentRecord] = []
        try:
            placement = reach.Packed(pool="tr-pool", size=2)
            records = [*await driver.spawn_many(Relay, [RELAY], placement=placement),
                       *await driver.spawn_many(Echo, [ECHO], placement=placement)]
            reply = await driver.client.request(RELAY, Ask(text="追踪"), returns=Said)
            assert reply.value == Said(text="追踪", by=ECHO)
            trace_id = reply.envelope.trace_id
            names = {f"send {RELAY}", "handle tr.ask@1.0", "send tr.echo"}

            async def stored() -> list[reach.SpanRecord] | None:
                spans = await cluster.trace_store().trace(trace_id)
                return spans if len(spans) >= 4 else None
            spans = await wait_until(stored, timeout_s=60)
            assert spans is not None
            assert {s.name for s in spans} == names
            by_agent = {(s.name, s.attributes.get(Attr.AGENT_ID)): s for s in spans}
            send_relay = by_agent[f"send {RELAY}", RELAY]
            handle_relay = by_agent["handle tr.ask@1.0", RELAY]
            send_echo = by_agent["send tr.echo", ECHO]
            handle_echo = by_agent["handle tr.ask@1.0", ECHO]
            assert send_relay.parent_span_id is None
            assert handle_relay.parent_span_id == send_relay.span_id
            assert send_echo.parent_span_id == handle_relay.span_id
            assert handle_echo.parent_span_id == send_echo.span_id
            hosts = {r.agent_id: r.host for r in records}
            assert (handle_relay.process, handle_echo.process) == (hosts[RELAY], hosts[ECHO])
            assert send_echo.process == hosts[RELAY]
            assert send_relay.process == "tr-driver"

            async def at_collector() -> list[Collected] | None:
                got = collector.trace(trace_id)
                return got if len(got) >= 4 else None
            otlp = await wait_until(at_collector, timeout_s=60)
            assert otlp is not None
            assert sorted((s.span_id, s.parent or None, s.name) for s in otlp) == sorted(
                (s.span_id, s.parent_span_id, s.name) for s in spans)
        finally:
            for agent_id in (RELAY, ECHO):
                with contextlib.suppress(reach.ReachError):
                    await driver.stop(agent_id)
            for host in {r.host for r in records}:
                with contextlib.suppress(reach.ReachError):
                    driver.cluster.kill(driver.cluster.host(host))
