"""A2A calls in reach's traces: the gateway continues a caller's ``traceparent`` (on the fake
cluster, its application driven in-process), and the outbound proxy's HTTP client sends one (on
the fake cluster too, to a remote agent on the A2A SDK's own server parts, called in-process)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
from a2a.helpers import new_text_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore
from a2a.types.a2a_pb2 import AgentCapabilities, AgentCard, AgentInterface, AgentSkill
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.types import ASGIApp, Receive, Scope, Send

import reach
from reach._runtime.span_export import SeededIds
from reach._runtime.tracer import TRACING, use
from reach.a2a.client.models import A2AMessage, A2AReply
from reach.a2a.client.proxy import A2AProxy, proxy_spec
from reach.a2a.tracing import a2a_span, send_traceparent
from reach.gateway.deploy import start_gateway
from reach.gateway.server import GatewayServer
from reach.spans import Attr
from reach.testing import FakeCluster, run
from reach.web.auth import ANONYMOUS
from reach.web.options import GatewayOptions

CALLER_TRACE, CALLER_SPAN = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"


@reach.schema("tra.order@1.0")
class Order(BaseModel):
    order_id: int


@reach.schema("tra.status@1.0")
class Status(BaseModel):
    order_id: int
    status: str


class Orders(reach.Agent):
    capabilities = ("tra.order",)
    description = "Looks up orders."

    @reach.handler(Order, returns=Status)
    async def query(self, ctx: reach.Context, m: Order) -> Status:
        return Status(order_id=m.order_id, status="shipped")


class Teller(reach.Agent):
    capabilities = ("tra.tell",)
    description = "Tells an order's story, a step at a time."

    @reach.handler(Order, returns=Status)
    async def tell(self, ctx: reach.Context, m: Order) -> AsyncIterator[Status]:
        for step in ("packed", "shipped", "delivered"):
            await asyncio.sleep(0.01)
            yield Status(order_id=m.order_id, status=step)


def provider() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    made = TracerProvider(id_generator=SeededIds())
    made.add_span_processor(SimpleSpanProcessor(exporter))
    return made, exporter


def test_the_gateway_continues_the_caller_s_traceparent_down_to_the_agent_s_handler() -> None:
    async def scenario(fake: FakeCluster) -> dict[str, object]:
        rt = fake.runtime()
        await rt.spawn(Orders, "tra-orders-1", placement=reach.Packed(pool="tra-p", size=1))
        start_gateway(fake, GatewayOptions(auth=False))
        server: GatewayServer = fake.services["reach-gateway"]
        body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
            "messageId": "m-1", "role": "ROLE_USER", "parts": [{"data": {"order_id": 7}}]}}}
        headers = {"A2A-Version": "1.0",
                   "traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"}
        async with httpx.AsyncClient(transport=httpx.ASGITransport(server.app),
                                     base_url="http://gw", headers=headers) as client:
            reply = (await client.post("/agents/tra-orders-1", json=body)).json()
        await server.close()
        task: dict[str, object] = reply["result"]["task"]
        return task

    made, caught = provider()
    use(made)
    try:
        task = run(scenario)
    finally:
        use(None)
    assert task["metadata"]["reach"]["trace_id"] == CALLER_TRACE  # type: ignore[index]
    spans = caught.get_finished_spans()
    assert {f"{s.get_span_context().trace_id:032x}" for s in spans} == {CALLER_TRACE}
    by_id = {f"{s.get_span_context().span_id:016x}": s for s in spans}
    (served,) = [s for s in spans if s.name == "a2a SendMessage"]
    assert served.kind is SpanKind.SERVER
    assert served.parent is not None
    assert f"{served.parent.span_id:016x}" == CALLER_SPAN
    assert served.attributes[Attr.PRINCIPAL] == ANONYMOUS
    (handled,) = [s for s in spans if s.name == "handle tra.order@1.0"]
    chain = []
    span = handled
    while span.parent is not None and f"{span.parent.span_id:016x}" in by_id:
        span = by_id[f"{span.parent.span_id:016x}"]
        chain.append(span.name)
    assert chain == ["send tra-orders-1", "attempt tra.order@1.0", "a2a SendMessage"]


def test_a_streamed_answer_s_span_lasts_until_the_stream_s_last_event() -> None:
    async def scenario(fake: FakeCluster) -> list[str]:
        rt = fake.runtime()
        await rt.spawn(Teller, "tra-teller-1", placement=reach.Packed(pool="tra-p", size=1))
        start_gateway(fake, GatewayOptions(auth=False))
        server: GatewayServer = fake.services["reach-gateway"]
        body = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": {
            "message": {"messageId": "m-2", "role": "ROLE_USER",
                        "parts": [{"data": {"order_id": 9}}]}}}
        headers = {"A2A-Version": "1.0",
                   "traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"}
        events = []
        async with httpx.AsyncClient(transport=httpx.ASGITransport(server.app),
                                     base_url="http://gw", headers=headers) as client, \
                client.stream("POST", "/agents/tra-teller-1", json=body) as reply:
            async for line in reply.aiter_lines():
                if line.startswith("data:"):
                    events.append(line)
        await server.close()
        return events

    made, caught = provider()
    use(made)
    try:
        events = run(scenario)
    finally:
        use(None)
    assert any("delivered" in e for e in events)
    spans = caught.get_finished_spans()
    (served,) = [s for s in spans if s.name == "a2a SendStreamingMessage"]
    (handled,) = [s for s in spans if s.name == "handle tra.order@1.0"]
    assert served.end_time is not None
    assert handled.end_time is not None
    # The handler ran while the stream was sent, inside the call's span.
    assert served.start_time <= handled.start_time
    assert handled.end_time <= served.end_time


def test_the_outbound_proxy_s_requests_carry_the_current_span_as_traceparent() -> None:
    made, _ = provider()
    use(made)
    try:
        tracer = TRACING.tracer
        assert tracer is not None
        with a2a_span("SendMessage", SpanKind.CLIENT) as span:
            assert span is not None
            request = httpx.Request("POST", "http://remote/")
            run_hook(request)
            ctx = span.get_span_context()
        assert request.headers["traceparent"] == \
            f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"
        assert int(ctx.trace_flags) & 1  # sampled
        outside = httpx.Request("GET", "http://remote/")  # a probe, in no span
        run_hook(outside)
        assert "traceparent" not in outside.headers
    finally:
        use(None)
    untraced = httpx.Request("POST", "http://remote/")
    run_hook(untraced)
    assert "traceparent" not in untraced.headers


class Answers(AgentExecutor):
    """A remote agent that answers every message with a message of its own."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        await event_queue.enqueue_event(new_text_message("refunded", context_id=context.context_id))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        return


class Headers:
    """An ASGI middleware keeping the ``traceparent`` of every POST (None for one without)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.traceparents: list[str | None] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            value = dict(scope["headers"]).get(b"traceparent")
            self.traceparents.append(None if value is None else value.decode())
        await self.app(scope, receive, send)


REFUNDS = AgentCard(
    name="Refunds", description="Issues refunds.", version="1.0.0",
    supported_interfaces=[AgentInterface(url="http://refunds.test/a2a", protocol_binding="JSONRPC",
                                         protocol_version="1.0")],
    capabilities=AgentCapabilities(streaming=False),
    default_input_modes=["text/plain"], default_output_modes=["text/plain"],
    skills=[AgentSkill(id="tra.refunds", name="Refunds", description="Issues refunds",
                       tags=["refunds"])])
#: The remote agent, on the A2A SDK's own request handler and routes, in this process.
REMOTE = Headers(Starlette(routes=[
    *create_agent_card_routes(REFUNDS),
    *create_jsonrpc_routes(DefaultRequestHandler(agent_executor=Answers(),
                                                 task_store=InMemoryTaskStore(),
                                                 agent_card=REFUNDS), "/a2a")]))


class InProcessProxy(A2AProxy):
    """The proxy, its HTTP client calling :data:`REMOTE` in this process (on virtual time)."""

    http_transport = httpx.ASGITransport(REMOTE)


def test_the_proxy_s_call_is_a_client_span_under_its_handler_and_the_remote_s_parent() -> None:
    async def scenario(fake: FakeCluster) -> A2AReply:
        rt = fake.runtime()
        spec = await proxy_spec(REFUNDS, agent_id="tra-refunds")
        await rt.spawn(InProcessProxy, spec.agent_id, kwargs=spec.kwargs,
                       placement=reach.Packed(pool="tra-a2a", size=1))
        reply = await rt.client.request(spec.agent_id, A2AMessage(text="refund A-1"),
                                        returns=A2AReply)
        await rt.stop(spec.agent_id)
        return reply.value

    REMOTE.traceparents.clear()
    made, caught = provider()
    use(made)
    try:
        reply = run(scenario)
    finally:
        use(None)
    assert reply.text == "refunded"
    spans = caught.get_finished_spans()
    (sent,) = [s for s in spans if s.name == "send tra-refunds"]
    (handled,) = [s for s in spans if s.name == "handle a2a.message@1.0"]
    (called,) = [s for s in spans if s.name == "a2a SendMessage"]
    assert (sent.kind, handled.kind, called.kind) == (
        SpanKind.CLIENT, SpanKind.SERVER, SpanKind.CLIENT)
    trace_id = sent.get_span_context().trace_id
    assert {s.get_span_context().trace_id for s in (handled, called)} == {trace_id}
    assert handled.parent is not None
    assert called.parent is not None
    assert handled.parent.span_id == sent.get_span_context().span_id
    assert called.parent.span_id == handled.get_span_context().span_id
    assert called.attributes[Attr.AGENT_ID] == "tra-refunds"
    ctx = called.get_span_context()
    assert int(ctx.trace_flags) & 1  # sampled
    assert REMOTE.traceparents == [
        f"00-{trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"]


def run_hook(request: httpx.Request) -> None:
    async def hook() -> None:
        await send_traceparent(request)

    coro = hook()
    try:
        coro.send(None)
    except StopIteration:
        return
    raise AssertionError("the hook should not wait")
