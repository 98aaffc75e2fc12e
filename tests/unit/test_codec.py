"""The msgpack codec: round trips, strict UTF-8, size limits, and no crash on any input bytes."""

from __future__ import annotations

import itertools
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reach import CodecError, Envelope, ErrorInfo, MsgType, ProtocolError, Severity
from reach.codec import FIELDS, WIRE_VERSION, Codec

REAL_TEXT = [
    "请问我的订单什么时候发货？型号：无线蓝牙耳机（黑色）",
    "🎧📦✅ 已发货",
    "C:\\Users\\张伟\\订单.txt",
    "\\\\server\\共享\\報告 2024.xlsx",
    "Ünïcödé — «quotes» ‘single’ \u200b zero-width",
    "line\nbreak\ttab\x00nul",
    "\ufffd is a real character too",
]
texts = st.one_of(st.text(), st.sampled_from(REAL_TEXT))
names = st.one_of(st.text(min_size=1), st.sampled_from(REAL_TEXT))
ints = st.integers(-(2**63), 2**64 - 1)
leaves = st.none() | st.booleans() | ints | st.floats(allow_nan=False) | texts | st.binary()
values = st.recursive(
    leaves, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=20,
)
payloads = st.dictionaries(texts, values, max_size=6)
schema_refs = st.builds("{}@{}.{}".format, st.sampled_from(["order.query", "x", "a.refund_v2"]),
                        st.integers(0, 999_999), st.integers(0, 999_999))
details = st.dictionaries(texts, st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1)
                          | st.floats(allow_nan=False) | texts, max_size=4)
times = st.floats(min_value=0, max_value=4e9)


@st.composite
def envelopes(draw: st.DrawFn) -> Envelope:
    """Any valid envelope, its strings drawn from all of Unicode."""
    kind = draw(st.sampled_from(MsgType))
    data: dict[str, Any] = {
        "msg_type": kind, "sender": draw(names), "receiver": draw(names),
        "payload": draw(payloads), "payload_schema": draw(schema_refs), "trace_id": draw(texts),
        "session_id": draw(st.none() | texts), "hops": tuple(draw(st.lists(names, max_size=5))),
        "timestamp": draw(times),
    }
    if kind in (MsgType.RESPONSE, MsgType.ERROR):
        data["request_id"] = draw(names)
    if kind is MsgType.REQUEST:
        data["timeout_ms"] = draw(st.integers(1, 2**40))
        data["deadline"] = draw(st.none() | times)
    if draw(st.booleans()):  # W3C trace context (a peer that traces)
        data["trace_id"] = f"{draw(st.integers(1, 2**128 - 1)):032x}"
        data["span_id"] = f"{draw(st.integers(1, 2**64 - 1)):016x}"
        data["trace_flags"] = draw(st.integers(0, 255))
    if kind is MsgType.ERROR:
        data["error_info"] = ErrorInfo(
            code=draw(names), reason=draw(texts), severity=draw(st.sampled_from(Severity)),
            suggestion=draw(texts), details=draw(details),
        )
    return Envelope(**data)


codec = Codec()


@settings(max_examples=300, deadline=None)
@given(envelopes())
def test_any_envelope_survives_encode_then_decode_unchanged(envelope: Envelope) -> None:
    decoded = codec.decode(codec.encode(envelope))
    assert decoded == envelope
    assert decoded.payload == envelope.payload


@settings(max_examples=100, deadline=None)
@given(st.lists(envelopes(), max_size=8))
def test_any_batch_survives_encode_then_decode_unchanged(batch: list[Envelope]) -> None:
    assert codec.decode_batch(codec.encode_batch(batch)) == batch
    assert codec.decode_batch_partial(codec.encode_batch(batch)) == (batch, [])


@pytest.mark.parametrize("text", REAL_TEXT)
def test_real_world_text_survives_in_every_string_field(text: str) -> None:
    envelope = Envelope.request(
        text, text, {text: [text, {text: text}]}, "order.query@1.0", session_id=text,
        hops=(text, "router"), trace_id=text,
    )
    assert codec.decode(codec.encode(envelope)) == envelope


def test_a_single_frame_reads_as_a_batch_of_one_but_a_batch_never_reads_as_one() -> None:
    envelope = Envelope.notification("a", "b", {"k": "订单"}, "x@1.0")
    assert codec.decode_batch(codec.encode(envelope)) == [envelope]
    with pytest.raises(CodecError, match="batch of 2") as caught:
        codec.decode(codec.encode_batch([envelope, envelope]))
    assert caught.value.details["rule"] == "frame_kind"


# -- strict UTF-8 ------------------------------------------------------------------------------

INVALID_UTF8 = {
    "ff": b"\xff", "overlong": b"\xc0\xaf", "encoded_surrogate": b"\xed\xa0\x80",
    "truncated": "中".encode()[:2], "beyond_10ffff": b"\xf4\x90\x80\x80", "stray": b"ok\x80",
}
MARK = "MARKMARK"
PLACES = {
    "sender": {"sender": MARK},
    "payload_value": {"payload": {"items": [{"desc": MARK}]}},
    "payload_key": {"payload": {MARK: 1}},
    "hops": {"hops": ("driver", MARK)},
}


def _frame_with(place: str) -> bytes:
    """A valid frame whose string at ``place`` is MARK, so that tests can corrupt those bytes."""
    data: dict[str, Any] = {"sender": "router", "payload": {"note": "x"}, **PLACES[place]}
    frame = codec.encode(Envelope(msg_type="event", receiver="b", payload_schema="x@1.0", **data))
    assert frame.count(MARK.encode()) == 1
    return frame


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("bad", INVALID_UTF8.values(), ids=INVALID_UTF8.keys())
def test_invalid_utf8_in_a_string_is_a_codec_error_not_a_replacement_character(
    place: str, bad: bytes
) -> None:
    corrupt = bad + b"_" * (len(MARK) - len(bad))
    frame = _frame_with(place).replace(MARK.encode(), corrupt)
    for decode in (codec.decode, codec.decode_batch, codec.decode_batch_partial):
        with pytest.raises(CodecError) as caught:
            decode(frame)
        assert caught.value.details["rule"] == "utf8"
        assert "UTF-8" in caught.value.message


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=1, max_size=len(MARK)))
def test_any_bytes_in_a_string_either_decode_exactly_or_are_refused(raw: bytes) -> None:
    corrupt = raw + b" " * (len(MARK) - len(raw))
    frame = _frame_with("payload_value").replace(MARK.encode(), corrupt)
    try:
        text = corrupt.decode("utf-8", errors="strict")
    except UnicodeDecodeError:
        with pytest.raises(CodecError):
            codec.decode(frame)
    else:
        assert codec.decode(frame).payload == {"items": [{"desc": text}]}


@pytest.mark.parametrize(
    ("sender", "payload"),
    [("a", {"note": "\ud800"}), ("a", {"items": ["ok", {"deep": "a\udfffb"}]}),
     ("a", {"\udc80key": 1}), ("rou\ud83dter", {})],
    ids=["value", "nested", "key", "sender"],
)
def test_a_lone_surrogate_is_a_codec_error_on_encode(sender: str, payload: dict[str, Any]) -> None:
    envelope = Envelope.notification(sender, "b", payload, "x@1.0")
    with pytest.raises(CodecError) as caught:
        codec.encode(envelope)
    assert caught.value.details["rule"] == "utf8"
    with pytest.raises(CodecError):
        codec.encode_batch([Envelope.notification("a", "b", {}, "x@1.0"), envelope])


@pytest.mark.parametrize(
    "value", [object(), {1, 2}, 2**64, -(2**63) - 1], ids=["object", "set", "too_big", "too_small"]
)
def test_a_payload_value_with_no_msgpack_form_is_a_codec_error_on_encode(value: object) -> None:
    envelope = Envelope.notification("a", "b", {"v": value}, "x@1.0")
    with pytest.raises(CodecError) as caught:
        codec.encode(envelope)
    assert caught.value.details["rule"] == "type"


# -- size limits -------------------------------------------------------------------------------


def _big_envelope() -> Envelope:
    return Envelope.notification("a", "b", {"desc": "茶" * 1000}, "x@1.0")


def test_an_oversize_frame_is_refused_on_encode_naming_size_and_limit() -> None:
    envelope = _big_envelope()
    size = len(Codec().encode(envelope))
    with pytest.raises(CodecError) as caught:
        Codec(max_frame_bytes=size - 1).encode(envelope)
    assert caught.value.details == {"rule": "frame_size", "size": size, "limit": size - 1}
    assert f"{size} bytes exceeds the maximum frame size of {size - 1} bytes" in str(caught.value)
    batch_size = len(Codec().encode_batch([envelope, envelope]))
    with pytest.raises(CodecError, match=f"{batch_size} bytes.* {size} bytes"):
        Codec(max_frame_bytes=size).encode_batch([envelope, envelope])


def test_a_frame_exactly_at_the_limit_is_accepted_both_ways() -> None:
    envelope = _big_envelope()
    frame = Codec().encode(envelope)
    exact = Codec(max_frame_bytes=len(frame))
    assert exact.encode(envelope) == frame
    assert exact.decode(frame) == envelope


@pytest.mark.parametrize("decode", ["decode", "decode_batch", "decode_batch_partial"])
def test_an_oversize_frame_is_refused_on_decode_naming_size_and_limit(decode: str) -> None:
    small = Codec(max_frame_bytes=1000)
    with pytest.raises(CodecError) as caught:
        getattr(small, decode)(b"\x00" * 1001)
    assert caught.value.details == {"rule": "frame_size", "size": 1001, "limit": 1000}
    assert "1001 bytes exceeds the maximum frame size of 1000 bytes" in caught.value.message


@pytest.mark.parametrize("limit", [0, -1])
def test_a_codec_with_a_non_positive_limit_is_refused(limit: int) -> None:
    with pytest.raises(CodecError, match=str(limit)):
        Codec(max_frame_bytes=limit)


# -- garbage never crashes ---------------------------------------------------------------------


def _decode_everywhere(data: bytes) -> None:
    """Decodes ``data`` every way; anything but an envelope list or a ProtocolError fails."""
    for decode in (codec.decode, codec.decode_batch, codec.decode_batch_partial):
        try:
            result = decode(data)
        except ProtocolError:  # CodecError is a ProtocolError
            continue
        assert isinstance(result, Envelope | list | tuple)


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=512))
def test_random_bytes_decode_or_raise_a_protocol_error(data: bytes) -> None:
    _decode_everywhere(data)


msgpack_values = st.recursive(
    leaves | st.sampled_from([msgpack.ExtType(5, b"ab"), msgpack.Timestamp(1, 0)]),
    lambda inner: st.lists(inner, max_size=5)
    | st.dictionaries(texts | ints | st.binary(max_size=4), inner, max_size=4),
    max_leaves=30,
)


@st.composite
def near_frames(draw: st.DrawFn) -> bytes:
    """Frames that are almost right: a valid envelope's fields with some replaced by anything."""
    items = []
    for _ in range(draw(st.integers(1, 3))):
        envelope = draw(envelopes())
        item = _fields(envelope)
        for index in draw(st.lists(st.integers(0, len(FIELDS) - 1), max_size=3)):
            item[index] = draw(msgpack_values)
        if draw(st.booleans()):
            item = item[: draw(st.integers(0, len(FIELDS)))]
        items.append(item)
    version = draw(st.sampled_from([WIRE_VERSION, 0, 2, True, 1.0, "1"]))
    kind = draw(st.sampled_from([0, 1, 2, False, None]))
    body = items[0] if kind == 0 else items
    return bytes(msgpack.packb([version, kind, body], use_bin_type=True))


def _fields(envelope: Envelope) -> list[Any]:
    """The envelope's field array, built by hand in FIELDS order (msgpack packs enums as str)."""
    dump = envelope.model_dump()
    return [dump[name] for name in FIELDS]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(near_frames())
def test_almost_valid_frames_decode_or_raise_a_protocol_error(data: bytes) -> None:
    _decode_everywhere(data)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(msgpack_values)
def test_valid_msgpack_of_any_shape_decodes_or_raises_a_protocol_error(value: Any) -> None:
    _decode_everywhere(msgpack.packb(value, use_bin_type=True))
    _decode_everywhere(msgpack.packb([WIRE_VERSION, 1, [value]], use_bin_type=True))


def _nested(depth: int, leaf: Any, as_map: bool) -> Any:
    for _ in range(depth):
        leaf = {"k": leaf} if as_map else [leaf]
    return leaf


def _deep_frames() -> list[Any]:
    """Frames nesting a value ~1000 deep (msgpack allows 1024) in each field, one and batched."""
    info = {"code": "c", "reason": "r", "severity": "fatal"}
    template = _fields(Envelope.request("a", "b", {}, "x@1.0").fail(ErrorInfo(**info)))
    params = []
    for (index, name), as_map in itertools.product(enumerate(FIELDS), (False, True)):
        item = [*template[:index], _nested(1015, 1, as_map), *template[index + 1:]]
        shape = "map" if as_map else "list"
        params.append(pytest.param([1, 0, item], id=f"{name}-{shape}"))
        params.append(pytest.param([1, 1, [template, item]], id=f"{name}-{shape}-batch"))
    for key in ("code", "reason", "severity", "suggestion", "details"):
        item = [*template[:12], {**info, key: _nested(1015, 1, as_map=False)}, template[13]]
        params.append(pytest.param([1, 0, item], id=f"error_info.{key}"))
    return params


@pytest.mark.parametrize("frame", _deep_frames())
def test_deeply_nested_values_in_any_field_decode_or_raise_a_protocol_error(frame: Any) -> None:
    _decode_everywhere(msgpack.packb(frame, use_bin_type=True))


GARBAGE = {
    "empty": b"", "reserved_byte": b"\xc1", "reserved_in_frame": b"\x93\x01\x00\xc1",
    "deep_5000": b"\x91" * 5000, "deep_1000": b"\x91" * 1000 + b"\x01",
    "huge_array_header": b"\xdd\xff\xff\xff\xff", "huge_str_header": b"\xdb\xff\xff\xff\xff",
    "two_elements": msgpack.packb([1, 0]), "map_frame": msgpack.packb({"version": 1}),
    "string_frame": msgpack.packb("frame"), "wire_version_2": msgpack.packb([2, 0, []]),
    "wire_version_true": msgpack.packb([True, 0, []]),
    "wire_version_float": msgpack.packb([1.0, 0, []]),
    "kind_7": msgpack.packb([1, 7, []]), "kind_false": msgpack.packb([1, False, []]),
    "batch_not_a_list": msgpack.packb([1, 1, "batch"]),
    "int_map_key": msgpack.packb([1, 0, [{1: 2}]]),
    "list_map_key": b"\x93\x01\x00\x91\x81\x91\x01\x02",
    "nil_map_key": b"\x93\x01\x00\x91\x81\xc0\x02",
    "ext_type": msgpack.packb([1, 0, [msgpack.ExtType(5, b"x")]]),
    "ext_type_empty": msgpack.packb([1, 0, [msgpack.ExtType(5, b"")]]),
    "timestamp_ext": msgpack.packb([1, 0, [msgpack.Timestamp(1, 0)]]),
    "timestamp_ext_empty": b"\x93\x01\x00\x91\xc7\x00\xff",
    "trailing_bytes": msgpack.packb([1, 0, []]) + b"\x00",
    "truncated": msgpack.packb([1, 0, []])[:-1],
}


@pytest.mark.parametrize("data", GARBAGE.values(), ids=GARBAGE.keys())
def test_structured_garbage_is_a_codec_error(data: bytes) -> None:
    for decode in (codec.decode, codec.decode_batch, codec.decode_batch_partial):
        with pytest.raises(CodecError):
            decode(data)


ITEM_GARBAGE = {
    "empty_envelope": [], "all_none": [None] * len(FIELDS), "too_few": ["m-1", "request", "s"],
    "too_many": ["m-1", *([None] * len(FIELDS))], "scalar": "scalar", "map": {"msg_id": "m-1"},
}


@pytest.mark.parametrize("item", ITEM_GARBAGE.values(), ids=ITEM_GARBAGE.keys())
def test_a_garbage_envelope_in_a_valid_batch_frame_is_refused(item: Any) -> None:
    frame = msgpack.packb([WIRE_VERSION, 1, [item]])
    with pytest.raises(ProtocolError):
        codec.decode_batch(frame)
    envelopes, refused = codec.decode_batch_partial(frame)
    assert envelopes == []
    assert [r.index for r in refused] == [0]


@pytest.mark.parametrize("item", [v for v in ITEM_GARBAGE.values() if isinstance(v, list)])
def test_a_garbage_envelope_in_a_valid_single_frame_is_refused(item: Any) -> None:
    frame = msgpack.packb([WIRE_VERSION, 0, item])
    for decode in (codec.decode, codec.decode_batch):
        with pytest.raises(ProtocolError):
            decode(frame)
    assert [r.index for r in codec.decode_batch_partial(frame)[1]] == [0]


@pytest.mark.parametrize("kind", [0, 1])
@pytest.mark.parametrize("body", ["scalar", {"msg_id": "m-1"}, None], ids=["str", "map", "nil"])
def test_a_frame_whose_body_is_not_an_array_is_a_codec_error_saying_so(
    kind: int, body: Any
) -> None:
    frame = msgpack.packb([WIRE_VERSION, kind, body])
    for decode in (codec.decode, codec.decode_batch, codec.decode_batch_partial):
        with pytest.raises(CodecError, match="body must be an array") as caught:
            decode(frame)
        assert caught.value.details["rule"] == "frame"


def test_a_frame_that_is_not_bytes_is_a_codec_error() -> None:
    with pytest.raises(CodecError, match="str"):
        codec.decode("not bytes")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "ext",
    [msgpack.ExtType(5, b"ab"), msgpack.Timestamp(1, 0), msgpack.Timestamp(1, 5),
     msgpack.Timestamp(2**35, 7)],
    ids=["ext_5", "timestamp_32", "timestamp_64", "timestamp_96"],
)
def test_an_extension_type_inside_a_payload_is_refused(ext: Any) -> None:
    item = _fields(Envelope.notification("a", "b", {"ok": 1}, "x@1.0"))
    item[4] = {"when": ext}
    with pytest.raises(CodecError, match="extension") as caught:
        codec.decode(msgpack.packb([WIRE_VERSION, 0, item], use_bin_type=True))
    assert caught.value.details["rule"] == "ext"


# -- partial batches ---------------------------------------------------------------------------


def test_a_malformed_envelope_in_a_batch_is_reported_and_the_others_are_kept() -> None:
    first = Envelope.notification("router", "b", {"n": 1}, "x@1.0")
    last = Envelope.notification("router", "c", {"n": 3}, "x@1.0")
    bad = _fields(Envelope.notification("订单-agent", "b", {"n": 2}, "x@1.0"))
    bad[FIELDS.index("msg_type")] = "response"  # a response without request_id
    frame = msgpack.packb([WIRE_VERSION, 1, [_fields(first), bad, _fields(last)]])
    envelopes, refused = codec.decode_batch_partial(frame)
    assert envelopes == [first, last]
    assert len(refused) == 1
    assert (refused[0].index, refused[0].msg_id, refused[0].sender) == (1, bad[0], "订单-agent")
    assert refused[0].error.details["rule"] == "needs_request_id"
    with pytest.raises(ProtocolError) as caught:
        codec.decode_batch(frame)
    assert caught.value == refused[0].error


def test_a_wrongly_shaped_envelope_in_a_batch_is_reported_with_what_could_be_read() -> None:
    good = Envelope.notification("router", "b", {}, "x@1.0")
    frame = msgpack.packb([WIRE_VERSION, 1, [["m-1", "request", "sender-9"], _fields(good), 7]])
    envelopes, refused = codec.decode_batch_partial(frame)
    assert envelopes == [good]
    assert [(r.index, r.msg_id, r.sender) for r in refused] == [
        (0, "m-1", "sender-9"), (2, None, None),
    ]
    assert all(isinstance(r.error, CodecError) for r in refused)
    assert all(r.error.details["rule"] == "envelope_shape" for r in refused)
    assert "3" in refused[0].error.message
    assert "int" in refused[1].error.message
