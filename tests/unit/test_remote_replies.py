"""A remote agent's replies are checked against the handler its hello declared, as a local
handler's return is: one that does not match is refused to the agent (an error frame) and its
caller gets the fatal typed error instead, never the malformed reply."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from remote_sockets import AsgiSocket
from remote_unit_agents import Add, Count, Relay, Sum, Tick
from test_remote_host import Gateway, on_channel

from reach import clock
from reach.errors import (
    InvalidPayload,
    ProtocolError,
    ReachError,
    SchemaError,
    SchemaIncompatible,
    Severity,
)
from reach.protocol import Envelope, MsgType
from reach.remote.replies import check_reply, handler_doc
from reach.remote.wire import Declaration, HandlerDoc, make_hello
from reach.testing import FakeCluster

T = TypeVar("T")


async def within(step: Awaitable[T], seconds: float = 30.0) -> T:
    """``step``, or a TimeoutError after ``seconds`` (virtual: no wall time), never a hang."""
    return await asyncio.wait_for(step, seconds)

DECLARED = Declaration(capabilities=("math.add",), handlers=(
    HandlerDoc(schema_ref="unit.add@1.0", returns="unit.sum@1.0"),
    HandlerDoc(schema_ref="unit.count@1.0", returns="unit.tick@1.0", streaming=True),
    HandlerDoc(schema_ref="unit.relay@1.0"),  # declares no reply schema
))
ADD = Envelope.request("driver:x", "raw-1", Add(a=1, b=2))
COUNT = Envelope.request("driver:x", "raw-1", Count(upto=2))
RELAY = Envelope.request("driver:x", "raw-1", Relay(capability="c", a=1, b=2))
UNDECLARED = Envelope.request("driver:x", "raw-1", {"q": 1}, "unit.other@1.0")


def answer(request: Envelope, payload: dict[str, Any], schema: str,
           kind: MsgType = MsgType.RESPONSE) -> Envelope:
    return Envelope(msg_type=kind, sender="raw-1", receiver=request.sender, payload=payload,
                    payload_schema=schema, request_id=request.msg_id)


GOOD = {
    "declared": (ADD, answer(ADD, {"total": 3, "by": "raw-1"}, "unit.sum@1.0")),
    "newer_minor": (ADD, answer(ADD, {"total": 3, "by": "raw-1", "extra": 1}, "unit.sum@1.4")),
    "ack": (ADD, answer(ADD, {}, "reach.ack@1.0")),
    "error": (ADD, ADD.fail(InvalidPayload("no"), sender="raw-1")),
    "chunk": (COUNT, answer(COUNT, {"n": 1}, "unit.tick@1.0", MsgType.EVENT)),
    "stream_end": (COUNT, answer(COUNT, {"chunks": 2}, "reach.stream.end@1.0")),
    "undeclared_returns": (RELAY, answer(RELAY, {"anything": 1}, "unit.whatever@1.0")),
    "undeclared_handler": (UNDECLARED, answer(UNDECLARED, {"x": 1}, "unit.whatever@1.0")),
}
BAD: dict[str, tuple[Envelope, Envelope, type[ReachError]]] = {
    "other_schema": (ADD, answer(ADD, {"n": 1}, "unit.tick@1.0"), SchemaIncompatible),
    "other_major": (ADD, answer(ADD, {"total": 3, "by": "x"}, "unit.sum@2.0"), SchemaIncompatible),
    "invalid_fields": (ADD, answer(ADD, {"total": "many"}, "unit.sum@1.0"), InvalidPayload),
    "chunk_of_a_plain_handler": (ADD, answer(ADD, {"total": 3, "by": "x"}, "unit.sum@1.0",
                                             MsgType.EVENT), ProtocolError),
    "chunk_of_another_schema": (COUNT, answer(COUNT, {"total": 3, "by": "x"}, "unit.sum@1.0",
                                              MsgType.EVENT), SchemaIncompatible),
    "invalid_chunk": (COUNT, answer(COUNT, {"n": "one"}, "unit.tick@1.0", MsgType.EVENT),
                      InvalidPayload),
    "stream_answered_once": (COUNT, answer(COUNT, {"n": 1}, "unit.tick@1.0"), SchemaIncompatible),
    "notification": (ADD, answer(ADD, {"total": 3, "by": "x"}, "unit.sum@1.0",
                                 MsgType.NOTIFICATION), ProtocolError),
    "invalid_fields_no_returns": (RELAY, answer(RELAY, {"n": "one"}, "unit.tick@1.0"),
                                  InvalidPayload),
}


@pytest.mark.parametrize("case", GOOD)
def test_a_reply_its_handler_could_give_passes(case: str) -> None:
    request, reply = GOOD[case]
    check_reply(DECLARED, request, reply)


@pytest.mark.parametrize("case", BAD)
def test_a_reply_its_handler_could_not_give_is_refused_fatal(case: str) -> None:
    request, reply, error = BAD[case]
    with pytest.raises(error) as refused:
        check_reply(DECLARED, request, reply)
    assert type(refused.value) is error
    assert refused.value.severity is Severity.FATAL


def test_a_declared_reply_schema_that_is_no_schema_refuses_every_reply_but_errors() -> None:
    broken = Declaration(handlers=(HandlerDoc(schema_ref="unit.add@1.0", returns="sum"),))
    with pytest.raises(SchemaError):
        check_reply(broken, ADD, answer(ADD, {"total": 3, "by": "x"}, "unit.sum@1.0"))
    check_reply(broken, ADD, ADD.fail(InvalidPayload("no"), sender="raw-1"))


def test_the_handler_of_a_request_is_found_by_name_and_major() -> None:
    assert handler_doc(DECLARED, "unit.add@1.7") is DECLARED.handlers[0]
    assert handler_doc(DECLARED, "unit.add@2.0") is None
    odd = Declaration(handlers=(HandlerDoc(schema_ref="not a ref"), *DECLARED.handlers))
    assert handler_doc(odd, "unit.count@1.0") is DECLARED.handlers[1]


# -- through the channel, on the fake cluster -----------------------------------------------------


async def raw_agent(gw: Gateway, agent_id: str = "raw-1") -> AsgiSocket:
    """An agent speaking the wire by hand (so that it can answer anything), welcomed."""
    sock = gw.socket()
    secret = gw.secret(agent_id) or b"k" * 32
    await sock.send(json.dumps(make_hello(agent_id, DECLARED, secret,
                                          now_ms=round(clock.now() * 1000),
                                          nonce=os.urandom(16).hex())))
    assert (await within(sock.recv_json()))["type"] == "welcome"
    return sock


async def next_request(sock: AsgiSocket) -> dict[str, Any]:
    frame = await within(sock.recv_json())
    envelope: dict[str, Any] = (frame["envelope"] if frame["type"] == "envelope"
                                else frame["envelopes"][0])
    return envelope


async def send(sock: AsgiSocket, request: dict[str, Any], payload: dict[str, Any], schema: str, *,
               kind: str = "response", msg_id: str | None = None) -> None:
    env = {"msg_type": kind, "sender": request["receiver"], "receiver": request["sender"],
           "request_id": request["msg_id"], "payload": payload, "payload_schema": schema}
    if msg_id is not None:
        env["msg_id"] = msg_id
    await sock.send(json.dumps({"type": "envelope", "envelope": env}))


def test_a_reply_of_another_schema_is_refused_to_the_agent_and_the_caller_gets_the_error(
        tmp_path: Path) -> None:
    async def scenario(fake: FakeCluster, gw: Gateway) -> None:
        rt = fake.runtime()
        sock = await raw_agent(gw)
        call = asyncio.ensure_future(rt.client.request("raw-1", Add(a=1, b=1)))
        request = await next_request(sock)
        await send(sock, request, {"n": 2}, "unit.tick@1.0", msg_id="bad-1")
        error = await within(sock.recv_json())
        assert (error["type"], error["msg_id"], error["code"]) == (
            "error", "bad-1", "schema_incompatible")
        with pytest.raises(SchemaIncompatible) as refused:
            await call
        assert refused.value.severity is Severity.FATAL
        assert "unit.sum@1.0" in refused.value.message
        await send(sock, request, {"total": 2, "by": "raw-1"}, "unit.sum@1.0", msg_id="late-1")
        late = await within(sock.recv_json())  # the request was answered (with the error) for good
        assert (late["msg_id"], late["code"]) == ("late-1", "unknown_request")
        outcomes = [r["outcome"] for r in await gw.audit("raw-1") if r["msg_type"] == "request"]
        assert outcomes == ["error: schema_incompatible"]
        again = asyncio.ensure_future(rt.client.request("raw-1", Add(a=2, b=2)))
        await send(sock, await next_request(sock), {"total": 4, "by": "raw-1"}, "unit.sum@1.0")
        assert (await again).value == Sum(total=4, by="raw-1")  # the connection stays

    on_channel(scenario, signed=tmp_path)


def test_a_reply_whose_fields_do_not_validate_is_refused_to_the_agent_too() -> None:
    async def scenario(fake: FakeCluster, gw: Gateway) -> None:
        rt = fake.runtime()
        sock = await raw_agent(gw)
        call = asyncio.ensure_future(rt.client.request("raw-1", Add(a=1, b=1)))
        await send(sock, await next_request(sock), {"total": "many"}, "unit.sum@1.0",
                   msg_id="bad-2")
        error = await within(sock.recv_json())
        assert (error["msg_id"], error["code"]) == ("bad-2", "invalid_payload")
        with pytest.raises(InvalidPayload) as refused:
            await call
        assert refused.value.severity is Severity.FATAL

    on_channel(scenario)


def test_a_bad_chunk_ends_the_stream_with_the_error_and_later_chunks_are_refused() -> None:
    async def scenario(fake: FakeCluster, gw: Gateway) -> None:
        rt = fake.runtime()
        sock = await raw_agent(gw)
        got: list[int] = []

        async def consume() -> None:
            async for reply in rt.client.stream("raw-1", Count(upto=3)):
                got.append(reply.value.n)

        stream = asyncio.ensure_future(consume())
        request = await next_request(sock)
        await send(sock, request, {"n": 1}, "unit.tick@1.0", kind="event")
        await send(sock, request, {"total": 1, "by": "x"}, "unit.sum@1.0", kind="event",
                   msg_id="bad-3")
        error = await within(sock.recv_json())
        assert (error["msg_id"], error["code"]) == ("bad-3", "schema_incompatible")
        with pytest.raises(SchemaIncompatible):
            await stream
        assert got == [1]
        await send(sock, request, {"n": 2}, "unit.tick@1.0", kind="event", msg_id="late-2")
        late = await within(sock.recv_json())
        assert (late["msg_id"], late["code"]) == ("late-2", "unknown_request")
        assert [Tick(n=1)] == [Tick(n=n) for n in got]

    on_channel(scenario)
