"""reach and the official A2A JavaScript SDK (@a2a-js/sdk, from the npm registry), on real Ray.

- The Node refund agent (interop/js/refund_agent.mjs, an A2A 1.0 server on the SDK) is a reach
  agent through an outbound proxy: found by capability, called by ID and capability, streamed,
  cut off at a deadline, offline while killed and online again once restarted, and it sees the
  reach trace ID of each call.
- The Node client (interop/js/call_gateway.mjs, the SDK's client) calls reach agents through
  reach's inbound gateway: card resolution, a send, a stream and a task read back.

The npm packages are installed by the tests into interop/js/node_modules (``npm ci`` from the
committed lock file) when missing; the module skips only where ``node`` or ``npm`` is missing.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from interop_tools import NodeRemote, install_packages, node_client
from node_tools import needs_node
from pydantic import BaseModel
from ray_helpers import start_gateway, wait_until

import reach
from reach.a2a.client.models import A2AEventKind, A2AMessage, A2AState, A2AStreamRequest
from reach.a2a.client.proxy import connect
from reach.errors import AgentUnavailable, HandlerError, RequestTimeout, Severity
from reach.records import AgentStatus

pytestmark = [
    pytest.mark.integration,
    needs_node,
]



@pytest.fixture(scope="module")
def node_modules() -> Path:
    """interop/js/node_modules, installed from the lock file when missing."""
    return install_packages()


@pytest.fixture(scope="module")
async def node_remote(node_modules: Path) -> AsyncIterator[NodeRemote]:
    server = NodeRemote()
    await server.start()
    yield server
    await server.kill()


@pytest.fixture(scope="module")
async def refunds(rt: Any, node_remote: NodeRemote) -> AsyncIterator[Any]:
    record = await connect(rt, f"{node_remote.url}/.well-known/agent-card.json",
                           probe_interval_s=0.2, probe_misses=2)
    yield record
    await rt.stop(record.agent_id)


async def test_the_node_agent_is_a_reach_agent_found_by_its_skills(rt: Any, refunds: Any) -> None:
    assert refunds.agent_id == "refund-agent"
    assert refunds.capabilities == ("refunds.issue", "refunds", "payments")
    assert refunds.description.startswith("Issues refunds for orders (Node, @a2a-js/sdk).")
    holders = await rt.client.discover("refunds")
    assert [h.agent_id for h in holders] == ["refund-agent"]


async def test_reach_calls_the_node_agent_by_id_and_by_capability_with_its_trace_id(
        rt: Any, node_remote: NodeRemote, refunds: Any) -> None:
    by_id = await rt.client.request("refund-agent", A2AMessage(
        data={"order_id": "A-1024", "amount": 30}))
    assert by_id.value.state is A2AState.COMPLETED
    assert by_id.value.text == "Refund of 30 for order A-1024 issued."
    assert by_id.value.data == {"refund_id": "R-A-1024", "order_id": "A-1024", "amount": 30,
                                "status": "issued", "trace_id": by_id.envelope.trace_id,
                                "agent": "node"}
    by_cap = await rt.client.request_capability("refunds.issue",
                                                A2AMessage(text="please refund B-2048"))
    assert by_cap.envelope.sender == "refund-agent"
    assert by_cap.value.data["order_id"] == "B-2048"
    words = await rt.client.request_capability("refunds", reach.Text(text="refund E-1"))
    assert words.value == reach.Text(text="Refund of 0 for order E-1 issued.")
    seen = {s["trace_id"]: s for s in node_remote.seen}
    for reply in (by_id, by_cap):
        assert seen[reply.envelope.trace_id]["sender"] == rt.client.sender


async def test_the_node_agent_streams_through_the_proxy(rt: Any, refunds: Any) -> None:
    events = [r.value async for r in rt.client.stream("refund-agent",
                                                      A2AStreamRequest(text="refund C-7"))]
    assert [e.kind for e in events] == [A2AEventKind.TASK, A2AEventKind.STATUS,
                                        A2AEventKind.ARTIFACT, A2AEventKind.ARTIFACT,
                                        A2AEventKind.STATUS]
    assert events[1].text == "checking the order"
    assert events[2].text == "Refund of 0 for order C-7 issued."
    assert (events[3].data or {})["refund_id"] == "R-C-7"
    assert events[-1].state is A2AState.COMPLETED


async def test_a_slow_node_agent_is_cut_off_at_the_deadline_and_its_failures_are_typed(
        rt: Any, refunds: Any) -> None:
    with pytest.raises(RequestTimeout):
        await rt.client.request("refund-agent", A2AMessage(text="slow"), timeout_ms=400)
    with pytest.raises(HandlerError) as failed:
        await rt.client.request("refund-agent", A2AMessage(text="fail"))
    assert failed.value.severity is Severity.RETRYABLE
    with pytest.raises(HandlerError) as rejected:
        await rt.client.request("refund-agent", A2AMessage(text="reject"))
    assert rejected.value.severity is Severity.FATAL
    assert rejected.value.details["a2a_state"] == "rejected"


async def test_a_killed_node_agent_is_offline_until_it_is_restarted(
        rt: Any, node_remote: NodeRemote, refunds: Any) -> None:
    registry = rt.cluster.registry()

    async def status_is(status: AgentStatus) -> bool:
        return (await registry.lookup("refund-agent")).status is status

    await node_remote.kill()
    try:
        await wait_until(lambda: status_is(AgentStatus.OFFLINE))
        assert await registry.discover("refunds", None, None) == ([], [])
        with pytest.raises(AgentUnavailable):
            await rt.client.request("refund-agent", A2AMessage(text="refund D-1"))
    finally:
        await node_remote.start()
    await wait_until(lambda: status_is(AgentStatus.ONLINE))
    reply = await rt.client.request_capability("refunds", A2AMessage(text="refund D-2"))
    assert reply.value.data["order_id"] == "D-2"


# -- the Node client against reach's gateway ---------------------------------------------------


@reach.schema("jsi.order@1.0")
class JsOrder(BaseModel):
    order_id: int


@reach.schema("jsi.status@1.0")
class JsStatus(BaseModel):
    order_id: int
    status: str
    by: str


class JsOrders(reach.Agent):
    """What the Node client calls through the gateway."""

    capabilities = ("jsi.order.query",)
    description = "Looks up orders by ID for the JavaScript interop test; streams stories."

    @reach.handler(JsOrder, returns=JsStatus)
    async def query(self, ctx: reach.Context, m: JsOrder) -> JsStatus:
        return JsStatus(order_id=m.order_id, status="shipped", by=self.id)

    @reach.handler(reach.Text, returns=reach.Text)
    async def tell(self, ctx: reach.Context, m: reach.Text) -> AsyncIterator[reach.Text]:
        for word in m.text.split():
            yield reach.Text(text=word)


@pytest.fixture(scope="module")
async def gateway(rt: Any, node_modules: Path) -> AsyncIterator[tuple[str, str]]:
    from reach.web.auth import token_for
    guard = rt.cluster.guard()
    assert guard is not None
    await rt.spawn(JsOrders, "jsi-orders-1", placement=reach.Packed(pool="jsi"))
    name = "reach-gateway-jsi"
    try:
        url = await asyncio.to_thread(start_gateway, rt, name=name)
        yield url, token_for(guard.keyring, "node-client")
    finally:
        await asyncio.to_thread(rt.stop_gateway, name)
        await rt.stop("jsi-orders-1")


async def test_the_node_client_resolves_an_agent_card_and_sends_through_the_gateway(
        gateway: tuple[str, str]) -> None:
    url, token = gateway
    out = await node_client("--url", f"{url}/agents/jsi-orders-1", "--token", token,
                            "--data", json.dumps({"order_id": 7}), "--get")
    assert "error" not in out, out
    assert out["card"]["name"]
    assert out["card"]["skills"] == ["jsi.order.query"]
    assert out["card"]["streaming"] is True
    task = out["result"]["json"]
    assert out["result"]["kind"] == "task"
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    data = [p["data"] for a in task["artifacts"] for p in a["parts"] if "data" in p]
    assert data == [{"order_id": 7, "status": "shipped", "by": "jsi-orders-1"}]
    assert out["task"]["id"] == task["id"]
    assert out["task"]["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_the_node_client_streams_from_a_reach_agent_through_the_gateway(
        gateway: tuple[str, str]) -> None:
    url, token = gateway
    out = await node_client("--url", f"{url}/agents/jsi-orders-1", "--token", token,
                            "--text", "once upon a time", "--stream")
    assert "error" not in out, out
    words = [p["text"] for e in out["events"] if "artifactUpdate" in e
             for p in e["artifactUpdate"]["artifact"]["parts"] if "text" in p]
    assert words == ["once", "upon", "a", "time"]
    assert out["events"][-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_a_reach_proxy_calls_a_reach_agent_through_the_gateway_with_its_token(
        rt: Any, gateway: tuple[str, str]) -> None:
    url, token = gateway
    record = await connect(rt, f"{url}/agents/jsi-orders-1", token=token,
                           agent_id="jsi-via-gateway", capabilities=["jsi.via.gateway"])
    try:
        reply = await rt.client.request("jsi-via-gateway", A2AMessage(data={"order_id": 9}))
        assert reply.value.state is A2AState.COMPLETED
        assert reply.value.data == {"order_id": 9, "status": "shipped", "by": "jsi-orders-1"}
        assert reply.value.metadata["reach"]["trace_id"]  # the gateway's own trace
    finally:
        await rt.stop(record.agent_id)
    # Cards are public: connecting needs no token, calling does.
    record = await connect(rt, f"{url}/agents/jsi-orders-1", agent_id="jsi-no-token",
                           capabilities=["jsi.via.gateway"])
    try:
        with pytest.raises(reach.AuthError) as refused:
            await rt.client.request("jsi-no-token", A2AMessage(data={"order_id": 10}))
        assert refused.value.details["http_status"] == 401
    finally:
        await rt.stop(record.agent_id)


async def test_the_node_client_without_a_token_is_refused(gateway: tuple[str, str]) -> None:
    url, _ = gateway
    out = await node_client("--url", f"{url}/agents/jsi-orders-1", "--data",
                            json.dumps({"order_id": 8}))
    assert "401" in out["error"]["message"] or "nauthori" in out["error"]["message"], out
