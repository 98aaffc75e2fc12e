"""A reply reads as the model registered for its schema (any minor of its major), or as the model
the caller names, or as a dict; a reply that does not fit is a typed error, never a crash."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

import reach
from reach.errors import InvalidPayload, SchemaIncompatible
from reach.protocol import Envelope
from reach.replies import Reply, read_reply


@reach.schema("replies.status@1.0")
class StatusV10(BaseModel):
    order_id: str


@reach.schema("replies.status@1.2")
class StatusV12(BaseModel):
    order_id: str
    carrier: str = "unknown"


@reach.schema("replies.other@1.0")
class Other(BaseModel):
    n: int


def _reply(payload: dict[str, object], schema: str) -> Envelope:
    request = Envelope.request("driver:x", "agent-1", {"q": 1}, "replies.q@1.0")
    return request.reply(payload, schema, sender="agent-1")


def test_a_registered_schema_reads_as_its_model_with_the_envelope_kept() -> None:
    env = _reply({"order_id": "A-1", "carrier": "SF"}, "replies.status@1.2")
    reply = read_reply(env)
    assert isinstance(reply, Reply)
    assert reply.value == StatusV12(order_id="A-1", carrier="SF")
    assert reply.envelope is env


def test_an_unregistered_minor_reads_as_the_newest_registered_minor_of_its_major() -> None:
    reply = read_reply(_reply({"order_id": "A-1", "extra": 5}, "replies.status@1.7"))
    assert reply.value == StatusV12(order_id="A-1")


def test_an_older_minor_named_by_the_caller_ignores_fields_it_does_not_know() -> None:
    reply = read_reply(_reply({"order_id": "A-1", "carrier": "SF"}, "replies.status@1.2"),
                       StatusV10)
    assert reply.value == StatusV10(order_id="A-1")


def test_an_unknown_schema_reads_as_a_dict() -> None:
    reply = read_reply(_reply({"k": "v"}, "replies.nobody@3.0"))
    assert reply.value == {"k": "v"}


def test_a_payload_that_does_not_fit_its_model_is_invalid_payload() -> None:
    with pytest.raises(InvalidPayload, match="order_id"):
        read_reply(_reply({"carrier": "SF"}, "replies.status@1.2"))


def test_a_model_of_another_schema_is_schema_incompatible() -> None:
    with pytest.raises(SchemaIncompatible):
        read_reply(_reply({"order_id": "A-1"}, "replies.status@1.0"), Other)


def test_a_major_the_caller_cannot_read_is_schema_incompatible() -> None:
    with pytest.raises(SchemaIncompatible, match="major"):
        read_reply(_reply({"order_id": "A-1"}, "replies.status@2.0"), StatusV12)
