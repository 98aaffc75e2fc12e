"""The envelope's rules (one ProtocolError per rule, named in details["rule"]) and its builders."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

import reach
from reach import (
    AgentNotFound,
    Envelope,
    ErrorInfo,
    MsgType,
    ProtocolError,
    Severity,
    UnknownSchema,
    protocol,
)
from reach.protocol import ERROR_SCHEMA

SCHEMA = "order.query@1.0"
TRACE, SPAN = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"  # W3C's own example
INFO = {"code": "agent_not_found", "reason": "no agent 'refund-9'", "severity": "fatal"}


def fields(**overrides: Any) -> dict[str, Any]:
    """A valid notification's fields, with ``overrides`` applied (None values are dropped)."""
    base: dict[str, Any] = {
        "msg_type": "notification",
        "sender": "router",
        "receiver": "order-agent",
        "payload": {"order_id": "A-1024"},
        "payload_schema": SCHEMA,
    }
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not None}


# (fields, rule, words the message must contain)
RULE_CASES = [
    pytest.param(fields(sender=""), "empty_sender", ["sender"], id="empty_sender"),
    pytest.param(fields(receiver=""), "empty_receiver", ["receiver"], id="empty_receiver"),
    pytest.param(fields(payload_schema=""), "schema_missing", ["schema"], id="schema_missing"),
    pytest.param(
        fields(payload_schema="order"), "schema_ref_format", ["'order'", "name@MAJOR.MINOR"],
        id="schema_ref_format-no_version",
    ),
    pytest.param(
        fields(payload_schema="Order.Query@1"), "schema_ref_format", ["'Order.Query@1'"],
        id="schema_ref_format-no_minor",
    ),
    pytest.param(
        fields(payload_schema="order.query@1.0\n"), "schema_ref_format", ["'order.query@1.0\\n'"],
        id="schema_ref_format-trailing_newline",
    ),
    pytest.param(
        fields(msg_type="response"), "needs_request_id", ["response", "request_id"],
        id="needs_request_id-response",
    ),
    pytest.param(
        fields(msg_type="response", request_id=""), "needs_request_id", ["response", "request_id"],
        id="needs_request_id-response_empty",
    ),
    pytest.param(
        fields(msg_type="error", payload_schema=ERROR_SCHEMA, error_info=INFO),
        "needs_request_id", ["error", "request_id"], id="needs_request_id-error",
    ),
    pytest.param(
        fields(msg_type="request"), "request_timeout", ["timeout_ms", "None"],
        id="request_timeout-missing",
    ),
    pytest.param(
        fields(msg_type="request", timeout_ms=0), "request_timeout", ["positive", "0"],
        id="request_timeout-zero",
    ),
    pytest.param(
        fields(msg_type="request", timeout_ms=-5), "request_timeout", ["positive", "-5"],
        id="request_timeout-negative",
    ),
    pytest.param(
        fields(msg_type="error", request_id="r-1"), "error_needs_info", ["error_info"],
        id="error_needs_info",
    ),
    pytest.param(
        fields(msg_type="error", request_id="r-1", error_info={**INFO, "severity": "doomed"}),
        "unknown_severity", ["severity", "'doomed'"], id="unknown_severity",
    ),
    pytest.param(
        fields(msg_type="error", request_id="r-1", error_info={**INFO, "severity": 3}),
        "unknown_severity", ["severity", "3"], id="unknown_severity-not_a_string",
    ),
    pytest.param(fields(sender=42), "field_type", ["sender"], id="field_type-sender_int"),
    pytest.param(fields(msg_type="gossip"), "field_type", ["msg_type"], id="field_type-msg_type"),
    pytest.param(
        fields(msg_type="request", timeout_ms="500"), "field_type", ["timeout_ms"],
        id="field_type-timeout_as_string",
    ),
    pytest.param(fields(hops=["router", 7]), "field_type", ["hops.1"], id="field_type-hop"),
    pytest.param(fields(payload=["not", "a", "map"]), "field_type", ["payload"],
                 id="field_type-payload_list"),
    pytest.param(fields(payload={1: "x"}), "field_type", ["payload"], id="field_type-payload_key"),
    pytest.param(fields(colour="red"), "field_type", ["colour"], id="field_type-unknown_field"),
    pytest.param(fields(msg_type=None), "field_type", ["msg_type"], id="field_type-missing"),
    pytest.param(fields(trace_id=TRACE, span_id="00f067aa0ba902b"), "trace_context",
                 ["span_id", "16 lowercase hex", "'00f067aa0ba902b'"],
                 id="trace_context-short_span_id"),
    pytest.param(fields(trace_id=TRACE, span_id="00F067AA0BA902B7"), "trace_context",
                 ["span_id", "'00F067AA0BA902B7'"], id="trace_context-upper_case"),
    pytest.param(fields(trace_id=TRACE, span_id="0" * 16), "trace_context",
                 ["not all zeros"], id="trace_context-zero_span_id"),
    pytest.param(fields(trace_id=TRACE, span_id="00f067aa0ba902b7\n"), "trace_context",
                 ["span_id"], id="trace_context-trailing_newline"),
    pytest.param(fields(trace_id="t-1", span_id=SPAN), "trace_context",
                 ["trace_id", "32 lowercase hex", "'t-1'"], id="trace_context-not_w3c_trace"),
    pytest.param(fields(trace_id="0" * 32, span_id=SPAN), "trace_context",
                 ["trace_id"], id="trace_context-zero_trace_id"),
    pytest.param(fields(trace_flags=256), "field_type", ["trace_flags"],
                 id="field_type-flags_too_big"),
    pytest.param(fields(trace_flags="01"), "field_type", ["trace_flags"],
                 id="field_type-flags_as_text"),
]


@pytest.mark.parametrize(("data", "rule", "words"), RULE_CASES)
def test_building_an_envelope_that_breaks_a_rule_raises_protocol_error_with_rule_name(
    data: dict[str, Any], rule: str, words: list[str]
) -> None:
    with pytest.raises(ProtocolError) as caught:
        Envelope(**data)
    assert type(caught.value) is ProtocolError
    assert caught.value.details["rule"] == rule
    for word in words:
        assert word in caught.value.message


@pytest.mark.parametrize(("data", "rule", "words"), RULE_CASES)
def test_parsing_a_mapping_that_breaks_a_rule_raises_the_same_protocol_error(
    data: dict[str, Any], rule: str, words: list[str]
) -> None:
    with pytest.raises(ProtocolError) as caught:
        Envelope.parse(data)
    assert caught.value.details["rule"] == rule
    for word in words:
        assert word in caught.value.message


@pytest.mark.parametrize(
    ("data", "field"),
    [
        pytest.param(fields(sender=42), "sender", id="sender"),
        pytest.param(fields(hops=["router", 7]), "hops.1", id="hops"),
        pytest.param(fields(colour="red"), "colour", id="extra"),
    ],
)
def test_a_field_type_error_names_the_field_in_details(data: dict[str, Any], field: str) -> None:
    with pytest.raises(ProtocolError) as caught:
        Envelope(**data)
    assert caught.value.details == {"rule": "field_type", "field": field}


def test_every_rule_of_the_module_docstring_table_has_a_case() -> None:
    doc = reach.protocol.__doc__ or ""
    table_rules = {line.split("``")[1] for line in doc.splitlines() if line.startswith("``")}
    tested = {case.values[1] for case in RULE_CASES}
    assert table_rules == tested


def test_valid_envelopes_of_every_kind_are_accepted() -> None:
    built = [
        Envelope(**fields()),
        Envelope(**fields(msg_type="event")),
        Envelope(**fields(msg_type="request", timeout_ms=1)),
        Envelope(**fields(msg_type="response", request_id="r-1")),
        Envelope(**fields(msg_type="error", request_id="r-1", error_info=INFO)),
    ]
    assert [e.msg_type for e in built] == [
        MsgType.NOTIFICATION, MsgType.EVENT, MsgType.REQUEST, MsgType.RESPONSE, MsgType.ERROR,
    ]
    assert len({e.msg_id for e in built}) == 5


def test_an_envelope_is_frozen() -> None:
    envelope = Envelope(**fields())
    with pytest.raises(ValidationError, match="frozen"):
        envelope.sender = "someone-else"  # type: ignore[misc]
    assert envelope.sender == "router"


# -- builders ----------------------------------------------------------------------------------


def test_request_sets_the_deadline_to_timestamp_plus_timeout() -> None:
    request = Envelope.request(
        "router", "order-agent", {"order_id": "A-1"}, SCHEMA, timeout_ms=2500, timestamp=1000.0
    )
    assert request.msg_type is MsgType.REQUEST
    assert request.timestamp == 1000.0
    assert request.timeout_ms == 2500
    assert request.deadline == 1002.5
    assert request.remaining_ms(now=1001.0) == 1500.0


def test_request_keeps_an_explicit_deadline() -> None:
    request = Envelope.request(
        "router", "order-agent", {}, SCHEMA, timeout_ms=2500, timestamp=1000.0, deadline=1001.0
    )
    assert request.deadline == 1001.0


@pytest.mark.parametrize("timeout_ms", [0, -1], ids=["zero", "negative"])
def test_request_builder_refuses_a_non_positive_timeout(timeout_ms: int) -> None:
    with pytest.raises(ProtocolError) as caught:
        Envelope.request("router", "order-agent", {}, SCHEMA, timeout_ms=timeout_ms)
    assert caught.value.details["rule"] == "request_timeout"


def test_notification_with_a_plain_dict_and_no_schema_is_refused_as_schema_missing() -> None:
    with pytest.raises(ProtocolError) as caught:
        Envelope.notification("router", "order-agent", {"order_id": "A-1"})
    assert caught.value.details["rule"] == "schema_missing"


def _request() -> Envelope:
    return Envelope.request(
        "router", "order-agent", {"order_id": "A-1"}, SCHEMA, timeout_ms=1000,
        session_id="s-7", hops=("driver", "router"),
    )


def test_reply_answers_the_request_and_keeps_its_trace_session_and_hops() -> None:
    request = _request()
    reply = request.reply({"status": "shipped"}, "order.status@1.0")
    assert reply.msg_type is MsgType.RESPONSE
    assert reply.request_id == request.msg_id
    assert reply.msg_id != request.msg_id
    assert (reply.trace_id, reply.session_id, reply.hops) == (
        request.trace_id, "s-7", ("driver", "router"),
    )
    assert (reply.sender, reply.receiver) == ("order-agent", "router")
    assert reply.payload == {"status": "shipped"}
    assert reply.payload_schema == "order.status@1.0"


def test_reply_can_name_another_sender() -> None:
    reply = _request().reply({}, "order.status@1.0", sender="order-agent-2")
    assert reply.sender == "order-agent-2"


def test_fail_builds_an_error_envelope_that_keeps_trace_session_and_hops() -> None:
    request = _request()
    failure = request.fail(AgentNotFound("no agent 'refund-9'", suggestion="discover it"))
    assert failure.msg_type is MsgType.ERROR
    assert failure.request_id == request.msg_id
    assert (failure.trace_id, failure.session_id, failure.hops) == (
        request.trace_id, "s-7", ("driver", "router"),
    )
    assert (failure.sender, failure.receiver) == ("order-agent", "router")
    assert failure.payload_schema == ERROR_SCHEMA
    assert failure.error_info == ErrorInfo(
        code="agent_not_found", reason="no agent 'refund-9'", severity=Severity.FATAL,
        suggestion="discover it",
    )
    assert failure.to_error() == AgentNotFound("no agent 'refund-9'", suggestion="discover it")


def test_fail_accepts_an_error_info_directly() -> None:
    info = ErrorInfo(code="request_timeout", reason="too slow", severity=Severity.RETRYABLE)
    failure = _request().fail(info)
    assert failure.error_info == info
    assert type(failure.to_error()) is reach.RequestTimeout


@pytest.mark.parametrize("kind", ["request", "response", "notification"])
def test_to_error_on_an_envelope_that_is_not_an_error_raises_protocol_error(kind: str) -> None:
    request = _request()
    envelope = {
        "request": request,
        "response": request.reply({}, "order.status@1.0"),
        "notification": Envelope.notification("a", "b", {}, SCHEMA),
    }[kind]
    with pytest.raises(ProtocolError) as caught:
        envelope.to_error()
    assert caught.value.details["rule"] == "error_needs_info"
    assert kind in caught.value.message


def test_remaining_ms_is_none_without_a_deadline() -> None:
    assert Envelope.notification("a", "b", {}, SCHEMA).remaining_ms(now=0.0) is None


# -- payloads given as models ------------------------------------------------------------------


@reach.schema("test_envelope.order_line@1.0")
class OrderLine(BaseModel):
    """A payload model registered in the process-wide registry under a name only this file uses."""

    sku: str
    quantity: int = 1


class Unregistered(BaseModel):
    """A payload model that no registry knows."""

    sku: str


def test_a_model_payload_infers_its_schema_from_the_registry() -> None:
    request = Envelope.request("router", "order-agent", OrderLine(sku="茶-01", quantity=3))
    assert request.payload_schema == "test_envelope.order_line@1.0"
    assert request.payload == {"sku": "茶-01", "quantity": 3}
    reply = request.reply(OrderLine(sku="茶-02"))
    assert reply.payload_schema == "test_envelope.order_line@1.0"
    event = Envelope.event("stock", "inventory", OrderLine(sku="x"))
    assert event.payload_schema == "test_envelope.order_line@1.0"


def test_an_explicit_schema_wins_over_the_registered_one() -> None:
    note = Envelope.notification("a", "b", OrderLine(sku="x"), "test_envelope.order_line@1.4")
    assert note.payload_schema == "test_envelope.order_line@1.4"


def test_an_unregistered_model_payload_without_a_schema_raises_unknown_schema() -> None:
    with pytest.raises(UnknownSchema, match="Unregistered"):
        Envelope.notification("a", "b", Unregistered(sku="x"))


def test_an_unregistered_model_payload_with_an_explicit_schema_is_accepted() -> None:
    note = Envelope.notification("a", "b", Unregistered(sku="x"), "stock.item@2.0")
    assert (note.payload, note.payload_schema) == ({"sku": "x"}, "stock.item@2.0")


def test_message_ids_are_unique_and_their_short_forms_still_differ() -> None:
    from reach.protocol import new_id

    ids = [new_id() for _ in range(5000)]
    assert len(set(ids)) == 5000
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids)
    assert len({i[:12] for i in ids}) == 5000  # logs print shortened IDs


def test_an_envelope_carries_w3c_trace_context_when_given_one() -> None:
    env = Envelope(**fields(trace_id=TRACE, span_id=SPAN, trace_flags=1))
    assert (env.trace_id, env.span_id, env.trace_flags) == (TRACE, SPAN, 1)


@pytest.mark.parametrize("trace_id", [
    TRACE, TRACE.upper(), "0" * 32, "0" * 31 + "1", TRACE[:-1], TRACE + "0", TRACE[:-1] + "g",
    " " + TRACE[1:], TRACE[:30] + " 1", "", "4bf92f35-77b3-4da6-a3ce-929d0e0e4736", "٠" * 32])
@pytest.mark.parametrize("span_id", [
    SPAN, SPAN.upper(), "0" * 16, "0" * 15 + "1", SPAN[:-1], SPAN + "0", SPAN[:-1] + "x", "",
    SPAN[:14] + " 7", "٠" * 16])
def test_a_trace_context_is_w3c_s_when_both_its_ids_are(trace_id: str, span_id: str) -> None:
    assert protocol.w3c_context(trace_id, span_id) is (
        protocol.match_trace_id(trace_id) and protocol.match_span_id(span_id))


def test_parsing_an_envelope_validates_it_once(monkeypatch: pytest.MonkeyPatch) -> None:
    checked: list[str] = []
    match = protocol.w3c_context
    monkeypatch.setattr(protocol, "w3c_context",
                        lambda trace_id, span_id: checked.append(span_id) or match(trace_id,
                                                                                   span_id))
    env = Envelope.parse(fields(trace_id=TRACE, span_id=SPAN, trace_flags=1))
    assert checked == [SPAN]  # (pydantic called the model's own __init__ too: twice)
    assert Envelope(**env.model_dump()) == env
    assert checked == [SPAN, SPAN]
    with pytest.raises(ProtocolError) as caught:
        Envelope.parse(fields(trace_id=TRACE, span_id="0" * 16))
    assert caught.value.details["rule"] == "trace_context"


def test_an_envelope_from_a_peer_that_sends_no_span_id_has_no_parent_span() -> None:
    env = Envelope.parse(fields(trace_id="any-trace-of-an-old-peer"))
    assert (env.span_id, env.trace_flags) == (None, 0)
    assert env.trace_id == "any-trace-of-an-old-peer"


def test_an_envelope_with_another_trace_context_is_the_envelope_validation_gives() -> None:
    env = Envelope.request("a", "b", {"x": 1}, SCHEMA)
    made = env.with_trace_context(TRACE, SPAN, 1)
    assert made == Envelope.parse({**env.model_dump(), "trace_id": TRACE, "span_id": SPAN,
                                   "trace_flags": 1})
    assert made.model_dump() == env.model_copy(update={"trace_id": TRACE, "span_id": SPAN,
                                                       "trace_flags": 1}).model_dump()
    assert (env.span_id, env.trace_flags) == (None, 0)  # the original is untouched


def test_an_envelope_nothing_else_holds_takes_a_trace_context_in_place_as_a_copy_would(
) -> None:
    env = Envelope.request("a", "b", {"x": 1}, SCHEMA)
    copy = env.with_trace_context(TRACE, SPAN, 1)
    env.take_trace_context(TRACE, SPAN, 1)
    assert (env.trace_id, env.span_id, env.trace_flags) == (TRACE, SPAN, 1)
    assert env == copy
    assert env.model_dump(exclude_unset=True) == copy.model_dump(exclude_unset=True)
    assert Envelope.parse(env.model_dump()) == env


def test_a_reply_does_not_claim_the_request_s_span_as_its_parent() -> None:
    request = Envelope.request("a", "b", {"x": 1}, SCHEMA, trace_id=TRACE, span_id=SPAN,
                               trace_flags=1)
    reply = request.reply({"y": 2}, SCHEMA)
    assert reply.trace_id == TRACE
    assert reply.span_id is None
