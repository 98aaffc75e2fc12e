"""Remote A2A agents as reach agents, on real Ray, against an A2A 1.0 agent built with the
official Python SDK's own server parts (``DefaultRequestHandler``, the card and JSON-RPC route
factories on Starlette, served by uvicorn in a thread of the test process).

The order agent answers by its message's text: ``slow`` never finishes, ``invalid`` is refused
as invalid params, ``fail`` ends failed, ``plain`` is answered with a message instead of a task,
``ask`` waits for input; anything else gets the order's status as a task's artifact (a text
chunk, then a data chunk) that echoes the reach trace ID the message carried.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any

import pytest
import uvicorn
from a2a.helpers import new_data_part, new_task_from_user_message, new_text_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types.a2a_pb2 import AgentCapabilities, AgentCard, AgentInterface, AgentSkill
from a2a.utils.errors import InvalidParamsError
from google.protobuf.json_format import MessageToDict
from pydantic import BaseModel
from ray_helpers import free_port, wait_until
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

import reach
from reach import ChildSpec, SupervisorSpec, TaskState
from reach.a2a.client.models import (
    A2AEventKind,
    A2AMessage,
    A2AReply,
    A2AState,
    A2AStreamRequest,
)
from reach.a2a.client.proxy import connect, proxy_spec, read_card
from reach.errors import (
    AgentAlreadyExists,
    AgentNotFound,
    AgentUnavailable,
    HandlerError,
    InvalidPayload,
    ProtocolError,
    RequestTimeout,
    Severity,
)
from reach.records import AgentStatus

pytestmark = pytest.mark.integration

ORDER_CAPS = ("orders.lookup", "orders", "order.status")



class OrderExecutor(AgentExecutor):
    """The remote agent's logic; ``seen`` keeps each message's metadata, as the remote saw it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.seen: list[dict[str, Any]] = []

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        message = context.message
        assert message is not None
        meta = MessageToDict(message.metadata)
        self.seen.append(meta)
        text = context.get_user_input()
        if text == "invalid":
            raise InvalidParamsError("an order ID is required")
        if text == "plain":
            await event_queue.enqueue_event(
                new_text_message("just a message", context_id=context.context_id))
            return
        updater = TaskUpdater(event_queue, context.task_id or "", context.context_id or "")
        if context.current_task is None:  # else a follow-up: the task exists
            await event_queue.enqueue_event(new_task_from_user_message(message))
        await updater.start_work(updater.new_agent_message([new_text_part("looking it up")]))
        if text == "slow":
            await asyncio.sleep(600)
        if text == "fail":
            await updater.failed(updater.new_agent_message([new_text_part("no such order")]))
            return
        if text == "ask":
            await updater.requires_input(updater.new_agent_message([new_text_part("which order?")]))
            return
        order = next((MessageToDict(p.data) for p in message.parts if p.HasField("data")), {})
        order_id = order.get("order_id", text)
        await updater.add_artifact([new_text_part(f"order {order_id} has shipped")],
                                   artifact_id="status", append=False, last_chunk=False)
        await updater.add_artifact(
            [new_data_part({"order_id": order_id, "status": "shipped", "count": 3,
                            "trace_id": meta.get("reach", {}).get("trace_id"),
                            "served_by": self.name})],
            artifact_id="status", append=True, last_chunk=True)
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue, context.task_id or "", context.context_id or "").cancel()


class PyRemote:
    """The order agent on a fixed port, stopped and started again at will (a restart keeps the
    port, as a redeployed agent keeps its URL)."""

    def __init__(self, name: str) -> None:
        self.port = free_port()
        self.executor = OrderExecutor(name)
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _app(self) -> Starlette:
        card = AgentCard(
            name="Order Agent", description="Knows every order's status. Needs an order ID.",
            version="1.0.0",
            supported_interfaces=[AgentInterface(url=f"{self.url}/a2a", protocol_binding="JSONRPC",
                                                 protocol_version="1.0")],
            capabilities=AgentCapabilities(streaming=True),
            default_input_modes=["text/plain", "application/json"],
            default_output_modes=["text/plain", "application/json"],
            skills=[AgentSkill(id="orders.lookup", name="Look up an order",
                               description="The status of an order",
                               tags=["orders", "Order Status"])])
        handler = DefaultRequestHandler(agent_executor=self.executor,
                                        task_store=InMemoryTaskStore(), agent_card=card)
        broken = Route("/cards/broken.json", lambda _: JSONResponse({"name": 3, "skills": "?"}))
        return Starlette(routes=[*create_agent_card_routes(card),
                                 *create_jsonrpc_routes(handler, "/a2a"), broken])

    async def start(self) -> None:
        config = uvicorn.Config(self._app(), host="127.0.0.1", port=self.port, log_level="warning",
                                timeout_graceful_shutdown=1)
        server = self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=server.run, daemon=True)
        self._thread.start()

        async def started() -> bool:
            return server.started

        await wait_until(started)

    async def stop(self) -> None:
        """Stops at once, as a killed process would (connections dropped, port closed)."""
        if self._server is None or self._thread is None:
            return
        self._server.should_exit = self._server.force_exit = True
        await asyncio.to_thread(self._thread.join, 10)
        self._server = self._thread = None


@pytest.fixture(scope="module")
async def remote() -> Any:
    server = PyRemote("py-main")
    await server.start()
    yield server
    await server.stop()


@pytest.fixture(scope="module")
async def proxy(rt: Any, remote: PyRemote) -> Any:
    record = await connect(rt, remote.url, probe_interval_s=0.3)
    yield record
    await rt.stop(record.agent_id)


@reach.schema("test.a2a_ask@1.0")
class Ask(BaseModel):
    capability: str
    data: dict[str, Any]


class Caller(reach.Agent):
    """A reach agent that calls a remote A2A agent by capability, as it would any agent."""

    capabilities = ("test.a2a_caller",)

    @reach.handler(Ask, returns=A2AReply)
    async def ask(self, ctx: reach.Context, m: Ask) -> A2AReply:
        reply = await ctx.request_capability(m.capability, A2AMessage(data=m.data),
                                             returns=A2AReply)
        return reply.value


async def test_connect_registers_a_proxy_named_and_tagged_by_the_remote_card(
        rt: Any, proxy: Any) -> None:
    assert proxy.agent_id == "order-agent"
    assert proxy.capabilities == ORDER_CAPS
    assert proxy.description == "Knows every order's status. Needs an order ID."
    record = await rt.cluster.registry().lookup("order-agent")
    assert record.status is AgentStatus.ONLINE
    assert [r.agent_id for r in await rt.client.discover("order.status")] == ["order-agent"]


async def test_a_card_not_served_or_not_a_card_and_a_second_proxy_of_an_id_are_refused(
        rt: Any, remote: PyRemote, proxy: Any) -> None:
    with pytest.raises(AgentNotFound):
        await read_card(f"{remote.url}/cards/none.json")
    with pytest.raises(ProtocolError) as broken:
        await read_card(f"{remote.url}/cards/broken.json")
    assert broken.value.details["rule"] == "a2a_card"
    with pytest.raises(AgentAlreadyExists):
        await connect(rt, remote.url)


async def test_a_driver_calls_the_remote_by_id_and_by_capability(rt: Any, proxy: Any) -> None:
    by_id = await rt.client.request("order-agent", A2AMessage(data={"order_id": "A-1024"}))
    assert isinstance(by_id.value, A2AReply)
    assert by_id.value.state is A2AState.COMPLETED
    assert by_id.value.text == "order A-1024 has shipped"
    assert by_id.value.data["status"] == "shipped"
    assert by_id.value.data["count"] == 3  # a JSON integer, not protobuf's 3.0
    assert by_id.value.task_id
    by_cap = await rt.client.request_capability("orders", A2AMessage(text="B-2048"))
    assert by_cap.envelope.sender == "order-agent"
    assert by_cap.value.data["order_id"] == "B-2048"
    words = await rt.client.request("order-agent", reach.Text(text="K-1"))
    assert words.value == reach.Text(text="order K-1 has shipped")


async def test_a_reach_agent_calls_the_remote_and_its_trace_id_reaches_the_remote(
        rt: Any, remote: PyRemote, proxy: Any) -> None:
    await rt.spawn(Caller, "a2a-caller-1", placement=reach.Packed(pool="a2a-test"))
    try:
        reply = await rt.client.request("a2a-caller-1",
                                        Ask(capability="orders.lookup", data={"order_id": "C-1"}))
        trace_id = reply.envelope.trace_id
        assert trace_id
        assert reply.value.data["trace_id"] == trace_id  # echoed by the remote
        assert remote.executor.seen[-1]["reach"] == {"trace_id": trace_id,
                                                     "sender": "a2a-caller-1"}
    finally:
        await rt.stop("a2a-caller-1")


async def test_a_streaming_remote_streams_its_events_through_the_proxy(
        rt: Any, proxy: Any) -> None:
    events = [r.value async for r in rt.client.stream("order-agent", A2AStreamRequest(text="D-7"))]
    assert [e.kind for e in events] == [A2AEventKind.TASK, A2AEventKind.STATUS,
                                        A2AEventKind.ARTIFACT, A2AEventKind.ARTIFACT,
                                        A2AEventKind.STATUS]
    assert events[1].text == "looking it up"
    assert (events[2].text, events[2].append, events[2].last_chunk) == (
        "order D-7 has shipped", False, False)
    assert (events[3].data or {})["order_id"] == "D-7"
    assert (events[3].append, events[3].last_chunk) == (True, True)
    assert events[-1].state is A2AState.COMPLETED
    assert len({e.task_id for e in events}) == 1


async def test_a_slow_remote_is_cut_off_at_the_reach_deadline(rt: Any, proxy: Any) -> None:
    with pytest.raises(RequestTimeout) as caught:
        await rt.client.request("order-agent", A2AMessage(text="slow"), timeout_ms=400)
    assert caught.value.severity is Severity.RETRYABLE


async def test_remote_errors_arrive_as_typed_reach_errors(rt: Any, proxy: Any) -> None:
    with pytest.raises(InvalidPayload) as invalid:
        await rt.client.request("order-agent", A2AMessage(text="invalid"))
    assert invalid.value.severity is Severity.FATAL
    assert invalid.value.details["a2a_code"] == -32602
    with pytest.raises(HandlerError) as failed:
        await rt.client.request("order-agent", A2AMessage(text="fail"))
    assert failed.value.severity is Severity.RETRYABLE
    assert "no such order" in failed.value.message
    plain = await rt.client.request("order-agent", A2AMessage(text="plain"))
    assert (plain.value.text, plain.value.state, plain.value.task_id) == (
        "just a message", A2AState.COMPLETED, "")
    asked = await rt.client.request("order-agent", A2AMessage(text="ask"))
    assert (asked.value.state, asked.value.text) == (A2AState.INPUT_REQUIRED, "which order?")
    more = await rt.client.request("order-agent", A2AMessage(
        data={"order_id": "E-5"}, task_id=asked.value.task_id,
        context_id=asked.value.context_id))
    assert (more.value.state, more.value.task_id) == (A2AState.COMPLETED, asked.value.task_id)


async def test_calls_to_the_proxy_are_audited_like_any_call(rt: Any, proxy: Any) -> None:
    reply = await rt.client.request("order-agent", A2AMessage(text="F-1"))

    async def audited() -> list[dict[str, Any]]:
        await rt.cluster.host(proxy.host).flush_audit()
        return list(await rt.cluster.audit_log().audit_records(reply.envelope.trace_id, None, 100))

    records = await wait_until(audited)
    assert [(r["caller"], r["callee"], r["capability"], r["outcome"]) for r in records] == [
        (rt.client.sender, "order-agent", "a2a.message@1.0", "ok")]


async def test_a_supervisor_retries_a_failing_remote_and_aborts_on_a_refused_payload(
        rt: Any, remote: PyRemote) -> None:
    child = await proxy_spec(remote.url, agent_id="orders-supervised", probe_interval_s=0.3)
    assert isinstance(child, ChildSpec)
    sup = await rt.supervise(SupervisorSpec("a2a-orders", children=[child]))
    try:
        failing = await (await sup.submit("orders-supervised", A2AMessage(text="fail"),
                                          retry_limit=2)).result()
        assert failing.state is TaskState.FAILED
        assert [a.code for a in failing.attempts] == ["handler_error"] * 3
        refused = await (await sup.submit("orders-supervised", A2AMessage(text="invalid"),
                                          retry_limit=2)).result()
        assert refused.state is TaskState.FAILED
        assert [(a.code, a.decision) for a in refused.attempts] == [("invalid_payload", "abort")]
        done = await (await sup.submit("orders-supervised", A2AMessage(text="G-1"))).result()
        assert done.state is TaskState.COMPLETED
        assert isinstance(done.value, A2AReply)  # the handler's model, as a Reply's value is
        assert done.value.data["order_id"] == "G-1"
    finally:
        await sup.stop()


async def test_a_remote_that_stops_answering_goes_offline_and_comes_back_online(
        rt: Any) -> None:
    flaky = PyRemote("py-flaky")
    await flaky.start()
    registry = rt.cluster.registry()

    async def status_is(status: AgentStatus) -> bool:
        return (await registry.lookup("orders-flaky")).status is status

    try:
        await connect(rt, flaky.url, agent_id="orders-flaky", capabilities=["flaky.orders"],
                      probe_interval_s=0.2, probe_misses=2)
        assert (await rt.client.request("orders-flaky", A2AMessage(text="H-1"))).value.data
        await flaky.stop()
        await wait_until(lambda: status_is(AgentStatus.OFFLINE))
        assert await registry.discover("flaky.orders", None, None) == ([], [])
        with pytest.raises(AgentUnavailable):
            await rt.client.request("orders-flaky", A2AMessage(text="H-2"))
        await flaky.start()
        await wait_until(lambda: status_is(AgentStatus.ONLINE))
        reply = await rt.client.request_capability("flaky.orders", A2AMessage(text="H-3"))
        assert reply.value.data["served_by"] == "py-flaky"
    finally:
        with contextlib.suppress(AgentNotFound):
            await rt.stop("orders-flaky")
        await flaky.stop()


async def test_a_task_by_capability_fails_over_from_a_dead_remote_to_a_live_one(
        rt: Any) -> None:
    dead, live = PyRemote("py-dead"), PyRemote("py-live")
    await dead.start()
    await live.start()
    never_probed = {"capabilities": ["failover.orders"], "probe_interval_s": 600.0,
                    "probe_misses": 1000}
    sup = await rt.supervise(SupervisorSpec("a2a-failover"))
    try:
        await connect(rt, dead.url, agent_id="orders-dead", **never_probed)
        await connect(rt, live.url, agent_id="orders-live", **never_probed)
        await dead.stop()  # still online in the registry: its proxy has not probed since
        results = [await (await sup.submit("failover.orders", A2AMessage(text=f"J-{i}"),
                                           by_capability=True)).result() for i in range(4)]
        assert [r.state for r in results] == [TaskState.COMPLETED] * 4
        assert {r.value.data["served_by"] for r in results} == {"py-live"}
        firsts = [r.attempts[0] for r in results if len(r.attempts) == 2]
        assert firsts, "no task tried the dead remote first"
        assert {(a.agent_id, a.code) for a in firsts} == {("orders-dead", "agent_unavailable")}
    finally:
        await sup.stop()
        for agent_id in ("orders-dead", "orders-live"):
            with contextlib.suppress(AgentNotFound):
                await rt.stop(agent_id)
        await dead.stop()
        await live.stop()
