"""The demo's first part: envelopes built, validated, encoded, decoded, and malformed ones
refused (``reach demo`` then runs the customer-service scenario of
:mod:`reach.tools.customer_service` on Ray).
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel

from reach.codec import Codec
from reach.errors import AgentNotFound, CodecError, ProtocolError, SchemaIncompatible
from reach.protocol import Envelope
from reach.schemas import SchemaRegistry


class OrderQuery(BaseModel):
    """What a customer asks about an order (version 1.0)."""

    order_id: str
    question: str


class OrderQueryV11(OrderQuery):
    """Version 1.1 adds an optional language; 1.0 readers ignore it."""

    language: str = "en"


def run(out: list[str] | None = None) -> list[str]:
    """Runs the demo, printing each step; returns the printed lines (for tests)."""
    lines: list[str] = [] if out is None else out

    def say(text: str) -> None:
        lines.append(text)
        print(text)

    schemas = SchemaRegistry()
    schemas.register("order.query@1.0", OrderQuery)
    schemas.register("order.query@1.1", OrderQueryV11)
    codec = Codec(max_frame_bytes=64 * 1024)

    question = OrderQueryV11(order_id="A-1024", question="我的订单什么时候到？📦", language="zh")
    request = Envelope.request(
        "router", "order-agent", question, "order.query@1.1", timeout_ms=2000
    )
    say(f"built     {request.msg_type.value} {request.sender} -> {request.receiver} "
        f"[{request.payload_schema}] trace={request.trace_id[:8]}")
    wire = codec.encode(request)
    say(f"encoded   {len(wire)} bytes of msgpack")
    received = codec.decode(wire)
    say(f"decoded   equal to the original: {received == request}")
    old_reader = schemas.read(received.payload, received.payload_schema, "order.query@1.0")
    say(f"read      by a 1.0 reader: {old_reader!r}")

    reply = received.reply({"status": "shipped", "eta_days": 2}, "order.status@1.0")
    say(f"replied   {reply.msg_type.value} answering {str(reply.request_id)[:8]}"
        f" trace={reply.trace_id[:8]}")

    missing = AgentNotFound("no agent 'refund-9'", suggestion="discover by capability")
    failure = received.fail(missing)
    back = codec.decode(codec.encode(failure)).to_error()
    say(f"error     arrives typed: {type(back).__name__} ({back.severity.value}): {back}")

    batch = codec.encode_batch([request, reply, failure])
    say(f"batch     3 envelopes in one frame of {len(batch)} bytes")

    attempts: list[tuple[str, Callable[[], object]]] = [
        ("malformed", lambda: codec.decode(b"\x93\x01\x00\xc1")),
        ("bad utf-8", lambda: codec.decode(b"\x93\x01\x00\x91\xa2\xff\xfe")),
        ("oversize ", lambda: codec.decode(b"\x00" * (64 * 1024 + 1))),
        ("no reqid ", lambda: Envelope(msg_type="response", sender="order-agent",
                                       receiver="router", payload_schema="order.status@1.0")),
        ("major    ", lambda: schemas.read(received.payload, "order.query@2.0", "order.query@1.0")),
    ]
    for label, attempt in attempts:
        try:
            attempt()
        except (CodecError, SchemaIncompatible, ProtocolError) as exc:
            say(f"refused   {label}: {type(exc).__name__}: {exc}")
    return lines
