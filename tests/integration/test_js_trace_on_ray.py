"""One trace from the official A2A JavaScript client to a remote A2A agent, on real Ray.

The Node client (interop/js/call_gateway.mjs, on @a2a-js/sdk) starts the trace: its SendMessage
to reach's gateway carries a W3C ``traceparent`` it made itself. The gateway runs the message as
a task that sends it to a router (packed), which asks a refund desk (packed) by capability,
which calls the Node refund agent (interop/js/refund_agent.mjs, on the same SDK) through its
outbound proxy. Every process of the path traces as the test's runtime says (the gateway's
replica, the hosts, the driver); the trace is read back from the cluster's trace store and from
a real OTLP/HTTP receive, every span's parent the one it should be, and the Node agent shows the
``traceparent`` it received: the client's trace, the proxy's client span as the parent.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from itertools import pairwise
from typing import Any

import pytest
from interop_tools import NodeRemote, install_packages, node_client
from node_tools import needs_node
from otlp_tools import Collected, Collector
from ray_helpers import start_gateway, traced, wait_until
from tracing_agents import RefundDesk, RefundRouter

import reach
from reach.a2a.client.proxy import connect
from reach.spans import Attr, SpanKind, SpanRecord
from reach.web.auth import token_for

pytestmark = [pytest.mark.integration, needs_node]

ROUTER, DESK, REMOTE = "jst-router-1", "jst-desk-1", "jst-node-refunds"
GATEWAY = "reach-gateway-jst"
#: The path of the trace, each span the parent of the next: (name, kind, the agent it is of).
PATH = (
    ("a2a SendMessage", SpanKind.SERVER, None),  # the gateway's, under the JS client's span
    ("attempt tr.refund@1.0", SpanKind.INTERNAL, ROUTER),  # the gateway's task
    (f"send {ROUTER}", SpanKind.CLIENT, ROUTER),
    ("handle tr.refund@1.0", SpanKind.SERVER, ROUTER),
    ("send tr.refund.desk", SpanKind.CLIENT, DESK),  # by capability: the holder chosen
    ("handle tr.refund@1.0", SpanKind.SERVER, DESK),
    (f"send {REMOTE}", SpanKind.CLIENT, REMOTE),
    ("handle a2a.message@1.0", SpanKind.SERVER, REMOTE),  # the proxy's handler
    ("a2a SendMessage", SpanKind.CLIENT, REMOTE),  # the proxy's call of the Node agent
)


@pytest.fixture
async def node_remote() -> AsyncIterator[NodeRemote]:
    install_packages()
    server = NodeRemote()
    await server.start()
    try:
        yield server
    finally:
        await server.kill()


def in_path_order(spans: list[SpanRecord]) -> list[SpanRecord]:
    """The spans of :data:`PATH`, in its order (a span missing or found twice fails)."""
    found = []
    for name, kind, agent in PATH:
        matching = [s for s in spans if s.name == name and s.kind is kind
                    and (agent is None or s.attributes.get(Attr.AGENT_ID) == agent)]
        assert len(matching) == 1, (name, kind, agent, [(s.name, s.kind) for s in spans])
        found.append(matching[0])
    return found


async def test_the_js_client_s_trace_is_one_trace_through_the_gateway_and_agents_to_a_node_agent(
        rt: Any, collector: Collector, node_remote: NodeRemote) -> None:
    async with traced(rt, "jst-driver", otlp_endpoint=collector.url) as driver:
        records: list[reach.AgentRecord] = []
        pool = reach.Packed(pool="jst-pool", size=2)
        try:
            records = [*await driver.spawn_many(RefundRouter, [ROUTER], placement=pool),
                       *await driver.spawn_many(RefundDesk, [DESK], placement=pool,
                                                kwargs={"remote": REMOTE}),
                       await connect(driver, node_remote.url, agent_id=REMOTE, placement=pool)]
            url = await asyncio.to_thread(start_gateway, driver, name=GATEWAY)
            token = token_for(driver.cluster.guard().keyring, "jst-client")
            out = await node_client("--url", f"{url}/agents/{ROUTER}", "--token", token,
                                    "--data", json.dumps({"order_id": "J-7", "amount": 12.5}),
                                    "--trace")
            assert "error" not in out, out
            task = out["result"]["json"]
            assert task["status"]["state"] == "TASK_STATE_COMPLETED", task
            data = [p["data"] for a in task["artifacts"] for p in a["parts"] if "data" in p]
            assert data == [{"text": "Refund of 12.5 for order J-7 issued.",
                             "refund_id": "R-J-7", "by": DESK}]
            _, trace_id, client_span, flags = out["traceparent"].split("-")
            assert flags == "01"
            assert task["metadata"]["reach"]["trace_id"] == trace_id

            async def stored() -> list[SpanRecord] | None:
                spans = await driver.cluster.trace_store().trace(trace_id)
                return spans if len(spans) >= len(PATH) else None
            spans = await wait_until(stored, timeout_s=60)
            path = in_path_order(spans)
            assert len(spans) == len(PATH)
            assert path[0].parent_span_id == client_span
            for parent, child in pairwise(path):
                assert child.parent_span_id == parent.span_id, (parent.name, child.name)
            served = path[0]
            assert "jst-client" in str(served.attributes[Attr.PRINCIPAL])
            hosts = {r.agent_id: r.host for r in records}
            gateway = served.process
            assert gateway not in {*hosts.values(), "jst-driver"}
            assert [s.process for s in path] == [
                gateway, gateway, gateway, hosts[ROUTER], hosts[ROUTER], hosts[DESK],
                hosts[DESK], hosts[REMOTE], hosts[REMOTE]]

            async def at_collector() -> list[Collected] | None:
                got = collector.trace(trace_id)
                return got if len(got) >= len(PATH) else None
            otlp = await wait_until(at_collector, timeout_s=60)
            assert sorted((s.span_id, s.parent, s.name) for s in otlp) == sorted(
                (s.span_id, s.parent_span_id, s.name) for s in spans)

            proxy_call = path[-1]
            sent = f"00-{trace_id}-{proxy_call.span_id}-{flags}"  # the client's flags kept

            async def received() -> bool:
                return sent in node_remote.received
            await wait_until(received)
            (seen,) = [s for s in node_remote.seen if s["trace_id"] == trace_id]
            assert seen["sender"] == DESK
        finally:
            await asyncio.to_thread(driver.stop_gateway, GATEWAY)
            for agent_id in (ROUTER, DESK, REMOTE):
                with contextlib.suppress(reach.ReachError):
                    await driver.stop(agent_id)
            for host in {r.host for r in records}:
                with contextlib.suppress(reach.ReachError):
                    driver.cluster.kill(driver.cluster.host(host))
