"""One trace on a real Ray: a request from a driver through two packed agents on their hosts,
every process tracing as the driver's settings say. The trace is read back from the cluster's
trace store, and from a real OTLP/HTTP receive (a tiny collector in the test, decoding the
exporters' protobuf posts), with the parent links right in both; and, with no collector (each
process recording its spans itself, for the store only), from the store alone.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest
from otlp_tools import Collected, Collector
from ray_helpers import traced, wait_until
from tracing_agents import Ask, Echo, Relay, Said

import reach
from reach._ray import RayCluster
from reach._runtime.trace_setup import install
from reach._runtime.tracer import use
from reach.spans import Attr

pytestmark = pytest.mark.integration

RELAY, ECHO = "tr-relay-1", "tr-echo-1"
RELAY2, ECHO2 = "tr-relay-2", "tr-echo-2"


async def one_trace_in_the_store(cluster: RayCluster, trace_id: str,
                                 records: list[reach.AgentRecord], *, relay: str = RELAY,
                                 echo: str = ECHO) -> list[reach.SpanRecord]:
    """The trace's four spans, read back from the store: a send to the relay from the driver,
    its handler run, the relay's send by capability and the echo's handler run, each the child
    of the one before, each recorded by the process that made it."""
    names = {f"send {relay}", "handle tr.ask@1.0", "send tr.echo"}

    async def stored() -> list[reach.SpanRecord] | None:
        spans = await cluster.trace_store().trace(trace_id)
        return spans if len(spans) >= 4 else None
    spans = await wait_until(stored, timeout_s=60)
    assert spans is not None
    assert {s.name for s in spans} == names
    by_agent = {(s.name, s.attributes.get(Attr.AGENT_ID)): s for s in spans}
    send_relay = by_agent[f"send {relay}", relay]
    handle_relay = by_agent["handle tr.ask@1.0", relay]
    send_echo = by_agent["send tr.echo", echo]
    handle_echo = by_agent["handle tr.ask@1.0", echo]
    assert send_relay.parent_span_id is None
    assert handle_relay.parent_span_id == send_relay.span_id
    assert send_echo.parent_span_id == handle_relay.span_id
    assert handle_echo.parent_span_id == send_echo.span_id
    hosts = {r.agent_id: r.host for r in records}
    assert (handle_relay.process, handle_echo.process) == (hosts[relay], hosts[echo])
    assert send_echo.process == hosts[relay]
    assert send_relay.process == "tr-driver"
    return spans


async def relay_and_echo(driver: reach.Runtime, relay: str, echo: str,
                         pool: str) -> list[reach.AgentRecord]:
    """A relay and the echo it asks, packed in a pool of 2 hosts; their records."""
    placement = reach.Packed(pool=pool, size=2)
    return [*await driver.spawn_many(Relay, [relay], placement=placement),
            *await driver.spawn_many(Echo, [echo], placement=placement)]


async def ended(driver: reach.Runtime, agent_ids: tuple[str, ...],
                records: list[reach.AgentRecord]) -> None:
    """Stops the agents and ends the pool hosts that held them (what is gone already is)."""
    for agent_id in agent_ids:
        with contextlib.suppress(reach.ReachError):
            await driver.stop(agent_id)
    for host in {r.host for r in records}:
        with contextlib.suppress(reach.ReachError):
            driver.cluster.kill(driver.cluster.host(host))


async def test_a_request_through_two_agents_is_one_trace_in_the_store_and_at_the_collector(
    rt: Any, collector: Collector,
) -> None:
    async with traced(rt, "tr-driver", otlp_endpoint=collector.url) as driver:
        cluster = driver.cluster
        records: list[reach.AgentRecord] = []
        try:
            records = await relay_and_echo(driver, RELAY, ECHO, "tr-pool")
            reply = await driver.client.request(RELAY, Ask(text="追踪"), returns=Said)
            assert reply.value == Said(text="追踪", by=ECHO)
            trace_id = reply.envelope.trace_id
            spans = await one_trace_in_the_store(cluster, trace_id, records)

            async def at_collector() -> list[Collected] | None:
                got = collector.trace(trace_id)
                return got if len(got) >= 4 else None
            otlp = await wait_until(at_collector, timeout_s=60)
            assert otlp is not None
            assert sorted((s.span_id, s.parent or None, s.name) for s in otlp) == sorted(
                (s.span_id, s.parent_span_id, s.name) for s in spans)
        finally:
            await ended(driver, (RELAY, ECHO), records)


async def test_without_a_collector_each_process_records_the_trace_for_the_store(rt: Any) -> None:
    tracing = reach.Tracing(sample_ratio=1.0)
    cluster = RayCluster(rt.cluster.security, rt.cluster.namespace, None, tracing)
    provider = install(tracing, "tr-driver", cluster)  # this process, as init would
    driver = reach.Runtime(cluster, rt.limits)
    records: list[reach.AgentRecord] = []
    try:
        records = await relay_and_echo(driver, RELAY2, ECHO2, "tr-pool-2")
        reply = await driver.client.request(RELAY2, Ask(text="存储"), returns=Said)
        assert reply.value == Said(text="存储", by=ECHO2)
        provider.force_flush()  # the driver's span leaves now, the hosts' within two seconds
        spans = await one_trace_in_the_store(cluster, reply.envelope.trace_id, records,
                                             relay=RELAY2, echo=ECHO2)
        assert all(s.end_ns >= s.start_ns > 0 for s in spans)
    finally:
        await ended(driver, (RELAY2, ECHO2), records)
        await driver.close()
        use(None)
        await asyncio.to_thread(provider.shutdown)
