"""W3C trace context on the wires: the msgpack codec (plain and sealed) and the remote agents'
JSON, with the new fields, and without them as peers that know no trace context send them."""

from __future__ import annotations

import json

import jsonschema
import msgpack
import pytest

from reach import Envelope, ProtocolError
from reach.codec import BASE_FIELDS, FIELDS, WIRE_VERSION, Codec
from reach.remote.wire import envelope_json, envelope_schema, read_envelope
from reach.security.guard import Guard, SecurityConfig
from reach.security.keys import Keyring

TRACE, SPAN = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"


def traced(**extra: object) -> Envelope:
    return Envelope.request("tr-router", "tr-orders", {"q": "A-1"}, "tr.order@1.0",
                            trace_id=TRACE, span_id=SPAN, trace_flags=1, **extra)


def untraced() -> Envelope:
    return Envelope.request("tr-router", "tr-orders", {"q": "A-1"}, "tr.order@1.0")


def sealed_codec() -> Codec:
    return Codec(guard=Guard(SecurityConfig(keyring="unused"), Keyring.generate()))


def test_trace_context_survives_the_codec_both_plain_and_sealed() -> None:
    env = traced()
    for codec in (Codec(), sealed_codec()):
        back = codec.decode(codec.encode(env))
        assert (back.trace_id, back.span_id, back.trace_flags) == (TRACE, SPAN, 1)
        assert codec.decode_batch(codec.encode_batch([env, untraced()]))[0] == env


def test_an_envelope_without_a_span_id_travels_as_the_old_fourteen_fields() -> None:
    frame = msgpack.unpackb(Codec().encode(untraced()), raw=False)
    assert len(frame[2]) == BASE_FIELDS == 14
    assert len(msgpack.unpackb(Codec().encode(traced()), raw=False)[2]) == len(FIELDS)


def test_a_frame_from_a_peer_that_knows_no_trace_context_is_read() -> None:
    old = ["m-1", "request", "tr-router", "tr-orders", {"q": "A-1"}, "tr.order@1.0", None,
           5000, None, "trace-of-an-old-peer", None, [], None, 1.0]
    env = Codec().decode(msgpack.packb([WIRE_VERSION, 0, old], use_bin_type=True))
    assert (env.trace_id, env.span_id, env.trace_flags) == ("trace-of-an-old-peer", None, 0)


def test_a_frame_with_a_bad_span_id_is_refused_saying_what_was_wrong() -> None:
    item = ["m-1", "request", "tr-router", "tr-orders", {}, "tr.order@1.0", None, 5000, None,
            TRACE, None, [], None, 1.0, "not-hex-at-all!!", 1]
    with pytest.raises(ProtocolError) as caught:
        Codec().decode(msgpack.packb([WIRE_VERSION, 0, item], use_bin_type=True))
    assert caught.value.details["rule"] == "trace_context"
    assert "16 lowercase hex digits" in caught.value.message


def test_an_array_of_fifteen_fields_is_neither_form_and_is_refused() -> None:
    item = ["m-1", "request", "s", "r", {}, "x@1.0", None, 5000, None, TRACE, None, [], None,
            1.0, SPAN]
    with pytest.raises(ProtocolError) as caught:
        Codec().decode(msgpack.packb([WIRE_VERSION, 0, item], use_bin_type=True))
    assert caught.value.details["rule"] == "envelope_shape"


def test_the_json_wire_carries_trace_context_only_for_a_traced_envelope() -> None:
    item = envelope_json(traced())
    assert (item["span_id"], item["trace_flags"]) == (SPAN, 1)
    assert read_envelope(json.loads(json.dumps(item))) == traced(msg_id=item["msg_id"],
                                                                 timestamp=item["timestamp"],
                                                                 deadline=item["deadline"])
    assert "span_id" not in envelope_json(untraced())


def test_the_envelope_schema_accepts_trace_context_and_refuses_a_bad_span_id() -> None:
    schema = envelope_schema()
    jsonschema.validate(envelope_json(traced()), schema)
    jsonschema.validate(envelope_json(untraced()), schema)
    for bad in ({"span_id": "XYZ"}, {"trace_flags": 256}, {"trace_flags": "1"}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({**envelope_json(traced()), **bad}, schema)


def test_a_json_envelope_with_a_span_id_but_no_w3c_trace_id_is_refused() -> None:
    item = {**envelope_json(traced()), "trace_id": "t-1"}
    with pytest.raises(ProtocolError) as caught:
        read_envelope(item)
    assert caught.value.details["rule"] == "trace_context"
    assert "trace_id" in caught.value.message
