"""A remote agent's own process traces where it is configured: its handler's span continues
the request's trace context from the JSON wire, and what it sends from the handler carries a
child span of it."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from pydantic import BaseModel

import reach
from reach._runtime.span_export import SeededIds
from reach._runtime.tracer import use
from reach.protocol import Envelope
from reach.remote.client import ConnectionEnded, RemoteAgentRunner
from reach.remote.wire import FrameType, envelope_json

TRACE, SPAN = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"


@reach.schema("trr.ask@1.0")
class Ask(BaseModel):
    text: str


class Asker(reach.Agent):
    """Asks a holder of trr.echo and answers with what it said."""

    capabilities = ("trr.asker",)

    @reach.handler(Ask, returns=Ask)
    async def ask(self, ctx: reach.Context, m: Ask) -> Ask:
        return (await ctx.request_capability("trr.echo", m, returns=Ask)).value


class Socket:
    def __init__(self) -> None:
        self.incoming: asyncio.Queue[str | None] = asyncio.Queue()
        self.sent: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def send(self, text: str) -> None:
        await self.sent.put(json.loads(text))

    async def recv(self) -> str:
        text = await self.incoming.get()
        if text is None:
            raise ConnectionEnded("closed", details={"close": 1000})
        return text

    async def close(self, code: int = 1000, reason: str = "") -> None:
        self.incoming.put_nowait(None)

    def deliver(self, env: Envelope) -> None:
        self.incoming.put_nowait(json.dumps({"type": FrameType.ENVELOPE.value,
                                             "envelope": envelope_json(env)}))

    async def next_envelope(self) -> dict[str, Any]:
        while True:
            frame = await asyncio.wait_for(self.sent.get(), 10)
            if frame["type"] == FrameType.BATCH.value:
                return dict(frame["envelopes"][0])
            if frame["type"] == FrameType.ENVELOPE.value:
                return dict(frame["envelope"])


async def test_a_remote_handler_s_span_continues_the_wire_s_trace_and_parents_its_request() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(id_generator=SeededIds())
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    use(provider)
    sock = Socket()
    serving = asyncio.ensure_future(RemoteAgentRunner(Asker(), "trr-asker-1", None).run(sock))
    try:
        await asyncio.wait_for(sock.sent.get(), 10)  # the hello
        sock.incoming.put_nowait(json.dumps({"type": FrameType.WELCOME.value, "epoch": 3}))
        request = Envelope.request("trr-caller", "trr-asker-1", Ask(text="hi"), trace_id=TRACE,
                                   span_id=SPAN, trace_flags=1, timeout_ms=60_000)
        sock.deliver(request)
        asked = await sock.next_envelope()  # its own request, by capability
        assert asked["receiver"] == "cap:trr.echo"
        assert asked["trace_id"] == TRACE
        sock.deliver(Envelope(msg_type=reach.MsgType.RESPONSE, sender="trr-echo-1",
                              receiver="trr-asker-1", request_id=asked["msg_id"],
                              payload={"text": "hi"}, payload_schema="trr.ask@1.0",
                              trace_id=TRACE))
        answered = await sock.next_envelope()
        assert answered["payload"] == {"text": "hi"}
    finally:
        await sock.close()
        await asyncio.wait_for(serving, 10)
        use(None)
    spans = {s.name: s for s in exporter.get_finished_spans()}
    handle, send = spans["handle trr.ask@1.0"], spans["send trr.echo"]
    assert handle.kind is SpanKind.SERVER
    assert handle.parent is not None
    assert f"{handle.parent.span_id:016x}" == SPAN
    assert f"{handle.get_span_context().trace_id:032x}" == TRACE
    assert send.parent is not None
    assert send.parent.span_id == handle.get_span_context().span_id
    assert asked["span_id"] == f"{send.get_span_context().span_id:016x}"
