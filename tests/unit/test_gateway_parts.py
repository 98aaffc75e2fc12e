"""How A2A message parts become reach requests, replies become parts, and reach errors become
A2A errors: pure mappings, no cluster."""

from __future__ import annotations

from typing import Any

import pytest
from a2a.types.a2a_pb2 import Message, Part, Role
from a2a.utils.errors import (
    ContentTypeNotSupportedError,
    InternalError,
    InvalidParamsError,
    TaskNotFoundError,
)
from google.protobuf.json_format import MessageToDict, ParseDict
from google.protobuf.struct_pb2 import Value

import reach
from reach.a2a.server.catalog import HandlerInfo
from reach.a2a.server.errors import error_data, error_message, to_a2a
from reach.a2a.server.parts import named_schema, read_message, reply_parts
from reach.agent import reads_text
from reach.errors import (
    AgentNotFound,
    AgentUnavailable,
    CodecError,
    InvalidPayload,
    NoCapableAgent,
    SchemaIncompatible,
    Severity,
    TaskNotFound,
)

ORDER_SCHEMA = {"type": "object", "properties": {"order_id": {"type": "integer"},
                                                  "note": {"type": "string"}},
                "required": ["order_id"]}
ORDER = HandlerInfo("shop.order@1.2", "shop.status@1.0", json_schema=ORDER_SCHEMA)
REFUND = HandlerInfo("shop.refund@1.0", json_schema={"type": "object"})
CHAT = HandlerInfo("reach.text@1.0", "reach.text@1.0", reads_text=True)
LOOSE = HandlerInfo("shop.loose@1.0")  # reads plain dicts: no JSON schema


def data(value: Any, **metadata: Any) -> Part:
    part = Part(data=ParseDict(value, Value()))
    if metadata:
        part.metadata.update(metadata)
    return part


def message(*parts: Part, **metadata: Any) -> Message:
    msg = Message(message_id="m-1", role=Role.ROLE_USER, parts=list(parts))
    if metadata:
        msg.metadata.update(metadata)
    return msg


def test_a_data_part_is_the_payload_of_the_agents_one_data_handler() -> None:
    call = read_message(message(data({"order_id": 7, "note": "ok"})), [ORDER, CHAT], "orders-1")
    assert call.handler is ORDER
    assert call.schema == "shop.order@1.2"
    assert call.payload == {"order_id": 7, "note": "ok"}
    assert isinstance(call.payload["order_id"], int)  # not the double protobuf keeps


def test_a_named_schema_picks_the_handler_and_is_declared_as_named() -> None:
    in_part = read_message(message(data({}, schema="shop.refund@1.0")), [ORDER, REFUND], "a")
    assert in_part.handler is REFUND
    in_message = read_message(message(data({"order_id": 1}), schema="shop.order@1.0"),
                              [ORDER, REFUND], "a")
    assert (in_message.handler, in_message.schema) == (ORDER, "shop.order@1.0")
    assert named_schema(message(data({}, schema="x.y@1.0"), schema="z.w@1.0")) == "x.y@1.0"


def test_an_agent_with_several_data_handlers_needs_the_schema_named() -> None:
    with pytest.raises(InvalidParamsError, match="several schemas") as caught:
        read_message(message(data({"order_id": 1})), [ORDER, REFUND], "orders-1")
    assert caught.value.data is not None
    assert caught.value.data["reach_code"] == "schema_error"


def test_a_schema_the_agent_does_not_read_is_invalid_params_with_reachs_code() -> None:
    with pytest.raises(InvalidParamsError, match=r"no handler for shop\.order@2\.0") as caught:
        read_message(message(data({}, schema="shop.order@2.0")), [ORDER], "orders-1")
    assert caught.value.data is not None
    assert caught.value.data["reach_code"] == "schema_incompatible"
    assert caught.value.data["severity"] == "fatal"
    with pytest.raises(InvalidParamsError, match=r"dotted\.name@MAJOR\.MINOR"):
        read_message(message(data({}, schema="nonsense")), [ORDER], "orders-1")


def test_a_payload_that_does_not_validate_is_invalid_params_naming_the_field() -> None:
    with pytest.raises(InvalidParamsError, match="order_id") as caught:
        read_message(message(data({"order_id": "seven"})), [ORDER], "orders-1")
    assert caught.value.data is not None
    assert caught.value.data["reach_code"] == "invalid_payload"
    assert caught.value.data["suggestion"]
    with pytest.raises(InvalidParamsError, match="required"):
        read_message(message(data({"note": "no id"})), [ORDER], "orders-1")


def test_a_handler_of_plain_dicts_takes_any_object() -> None:
    call = read_message(message(data({"anything": [1, 2.5, {"x": None}]})), [LOOSE], "a")
    assert call.payload == {"anything": [1, 2.5, {"x": None}]}


@pytest.mark.parametrize("value", [[1, 2], "text", 3])
def test_a_data_part_must_hold_an_object(value: Any) -> None:
    with pytest.raises(InvalidParamsError, match="JSON object"):
        read_message(message(data(value)), [LOOSE], "a")


def test_one_data_part_per_message() -> None:
    with pytest.raises(InvalidParamsError, match="one data part"):
        read_message(message(data({}), data({})), [LOOSE], "a")


def test_text_parts_go_joined_to_the_handler_that_reads_text() -> None:
    call = read_message(message(Part(text="hello"), Part(text="world")), [ORDER, CHAT], "a")
    assert call.handler is CHAT
    assert call.payload == {"text": "hello\nworld"}
    assert call.schema == "reach.text@1.0"


def test_a_data_part_wins_over_text_parts_beside_it() -> None:
    call = read_message(message(Part(text="see data"), data({"order_id": 2})), [ORDER, CHAT],
                        "a")
    assert call.handler is ORDER


def test_text_for_an_agent_that_reads_no_text_is_content_type_not_supported() -> None:
    with pytest.raises(ContentTypeNotSupportedError, match=r"reads no text.*shop\.order@1\.2"):
        read_message(message(Part(text="hi")), [ORDER], "orders-1")


@pytest.mark.parametrize("part", [Part(raw=b"\x89PNG", media_type="image/png"),
                                  Part(url="https://example.com/a.pdf")])
def test_file_parts_are_content_type_not_supported(part: Part) -> None:
    with pytest.raises(ContentTypeNotSupportedError, match="not files"):
        read_message(message(part, Part(text="look")), [CHAT], "a")


def test_a_message_without_parts_is_invalid_params() -> None:
    with pytest.raises(InvalidParamsError, match="no data or text part"):
        read_message(message(), [CHAT], "a")


def test_an_agent_whose_handlers_are_unknown_cannot_take_data() -> None:
    with pytest.raises(InvalidParamsError, match="no handler the gateway knows"):
        read_message(message(data({})), [], "a")


def test_a_reply_is_a_data_part_with_its_schema_and_text_is_also_a_text_part() -> None:
    (part,) = reply_parts({"order_id": 7, "status": "shipped"}, "shop.status@1.0")
    assert MessageToDict(part.data) == {"order_id": 7.0, "status": "shipped"}
    assert part.media_type == "application/json"
    assert MessageToDict(part.metadata) == {"schema": "shop.status@1.0"}
    text, data_part = reply_parts({"text": "你好"}, "reach.text@1.1")
    assert (text.text, text.media_type) == ("你好", "text/plain")
    assert data_part.HasField("data")
    (only,) = reply_parts({"text": "x"}, None)  # schema unknown: no text part
    assert not only.HasField("metadata")


@pytest.mark.parametrize(("error", "kind"), [
    (InvalidPayload("bad"), InvalidParamsError),
    (SchemaIncompatible("other major"), InvalidParamsError),
    (AgentNotFound("who?"), InvalidParamsError),
    (NoCapableAgent("nobody"), InvalidParamsError),
    (TaskNotFound("gone"), TaskNotFoundError),
    (CodecError("not JSON"), InvalidParamsError),
])
def test_reach_errors_before_a_task_become_a2a_errors_with_reachs_facts(error: Any,
                                                                       kind: Any) -> None:
    mapped = to_a2a(error)
    assert type(mapped) is kind
    assert mapped.message == error.message
    assert mapped.data == error_data(error)


def test_any_other_reach_error_is_an_internal_error_with_an_error_id_and_no_internals(
        caplog: pytest.LogCaptureFixture) -> None:
    error = AgentUnavailable("host 10.0.0.7 died: RayActorError", suggestion="retry")
    with caplog.at_level("ERROR", logger="reach.a2a.server.errors"):
        mapped = to_a2a(error)
    assert type(mapped) is InternalError
    assert mapped.data is not None
    error_id = mapped.data["error_id"]
    assert error_id in mapped.message
    assert "10.0.0.7" not in mapped.message
    assert {k: mapped.data[k] for k in ("reach_code", "severity", "suggestion")} == {
        "reach_code": "agent_unavailable", "severity": "retryable", "suggestion": "retry"}
    assert any(error_id in r.getMessage() and "10.0.0.7" in r.getMessage()
               for r in caplog.records)


def test_a_reply_that_is_not_json_makes_no_parts_but_a_codec_error() -> None:
    for bad, rule in (({"v": float("nan")}, "json_number"), ({"v": [float("-inf")]},
                                                            "json_number"),
                      ({"v": b"bytes"}, "json_type"), ({"v": 10 ** 400}, "json_number"),
                      ({"v": 10 ** 5000}, "json_number")):
        with pytest.raises(CodecError, match="not JSON") as caught:
            reply_parts(bad, "shop.status@1.0")
        assert caught.value.details["rule"] == rule
        assert str(caught.value.details["path"]).startswith("$.v")


def test_error_data_is_a_map_of_strings() -> None:
    error = AgentUnavailable("down", severity=Severity.RETRYABLE, suggestion="retry",
                             details={"agent_id": "a", "attempt": 2, "none": None})
    assert error_data(error) == {"reach_code": "agent_unavailable", "severity": "retryable",
                                 "suggestion": "retry", "details.agent_id": "a",
                                 "details.attempt": "2", "details.none": ""}


def test_the_status_message_of_a_failed_task_says_what_and_carries_the_error() -> None:
    info = AgentUnavailable("the host died", suggestion="retry later").to_info()
    msg = error_message(info, "t-1", "c-1", lead="Partly:")
    assert (msg.task_id, msg.context_id, msg.role) == ("t-1", "c-1", Role.ROLE_AGENT)
    assert msg.parts[0].text == "Partly: the host died retry later"
    assert MessageToDict(msg.parts[1].data)["code"] == "agent_unavailable"


@pytest.mark.parametrize(("ref", "expected"), [
    ("reach.text@1.0", True), ("reach.text@1.7", True), ("reach.text@2.0", False),
    ("shop.text@1.0", False),
])
def test_a_handler_reads_text_when_it_reads_any_minor_of_reach_text_1(ref: str,
                                                                      expected: bool) -> None:
    assert reads_text(ref) is expected
    assert reach.Text(text="x").model_dump() == {"text": "x"}
