"""The WebSocket wire of remote agents: frames, the signed hello, close codes, the schema file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from reach.errors import CodecError, ProtocolError
from reach.protocol import Envelope
from reach.remote.client import connect_url, declaration_of
from reach.remote.wire import (
    CloseCode,
    Declaration,
    Envelopes,
    Goodbye,
    HandlerDoc,
    Heartbeat,
    Hello,
    agent_secret,
    envelope_json,
    envelope_schema_text,
    envelopes_frame,
    frame_text,
    hello_mac,
    hello_refusal,
    make_hello,
    parse_frame,
    read_envelope,
    refusal,
    safe_envelopes_frame,
)
from reach.security.keys import Keyring

ROOT = Path(__file__).resolve().parents[2]
MASTER = bytes(range(32))
NOW_MS = 1_750_000_000_000


def hello_for(agent_id: str = "calc-1", secret: bytes | None = None) -> Hello:
    frame = make_hello(agent_id, Declaration(capabilities=("math.add",), description="Adds."),
                       secret or agent_secret(MASTER, agent_id), now_ms=NOW_MS, nonce="ab" * 16)
    parsed = parse_frame(json.dumps(frame))
    assert isinstance(parsed, Hello)
    return parsed


def test_the_committed_envelope_schema_is_what_the_model_generates() -> None:
    committed = (ROOT / "docs" / "envelope.schema.json").read_text(encoding="utf-8")
    assert committed == envelope_schema_text(), (
        "docs/envelope.schema.json is stale: python -m reach.remote.wire > "
        "docs/envelope.schema.json")


def test_the_schema_names_every_field_of_the_envelope() -> None:
    schema = json.loads(envelope_schema_text())
    assert set(schema["properties"]) == set(Envelope.model_fields)
    assert schema["additionalProperties"] is False
    assert set(schema["required"]) == {"msg_type", "sender", "receiver"}


def test_an_agents_secret_is_the_one_the_keyring_derives_for_it() -> None:
    ring = Keyring(MASTER)
    assert agent_secret(MASTER, "calc-1") == ring.secret("calc-1")
    assert agent_secret(MASTER, "计算-1") == ring.secret("计算-1")


def test_the_hello_mac_matches_the_documented_vector() -> None:
    # The vector docs/wire.md gives, so that other languages can check their implementation.
    secret = agent_secret(MASTER, "calc-1")
    assert secret.hex() == "971df6d6ca18df4e65ede3fe08f87eba45569eb991bedb02a622a8c9dc43dafb"
    mac = hello_mac(secret, "calc-1", NOW_MS, "ab" * 16, '{"capabilities":["math.add"]}')
    assert mac == "a3620c3f939da20894d3100ddc40463c019e9c1c811a67b2c8bb9d569bd18834"
    assert (ROOT / "docs" / "wire.md").read_text(encoding="utf-8").count(mac) == 1


def test_a_signed_hello_verifies_and_declares_the_agent() -> None:
    hello = hello_for()
    assert hello_refusal(hello, agent_secret(MASTER, "calc-1"), NOW_MS + 1000) is None
    assert hello.declared().capabilities == ("math.add",)


def test_a_hello_signed_with_another_secret_is_a_bad_signature() -> None:
    hello = hello_for(secret=agent_secret(b"\x01" * 32, "calc-1"))
    refused = hello_refusal(hello, agent_secret(MASTER, "calc-1"), NOW_MS)
    assert refused is not None
    assert (refused.code, refused.reason) == (CloseCode.BAD_SIGNATURE, "bad_signature")


def test_a_hello_whose_declaration_was_altered_is_a_bad_signature() -> None:
    hello = hello_for()
    forged = hello.model_copy(update={"declaration": '{"capabilities":["admin"]}'})
    refused = hello_refusal(forged, agent_secret(MASTER, "calc-1"), NOW_MS)
    assert refused is not None
    assert refused.reason == "bad_signature"


def test_a_hello_signed_too_long_ago_is_outside_the_window() -> None:
    refused = hello_refusal(hello_for(), agent_secret(MASTER, "calc-1"), NOW_MS + 301_000)
    assert refused is not None
    assert (refused.code, refused.reason) == (CloseCode.BAD_SIGNATURE, "replay_window")


def test_frames_parse_into_their_kinds() -> None:
    assert parse_frame('{"type":"heartbeat","ts":5}') == Heartbeat(ts=5)
    assert parse_frame('{"type":"goodbye","reason":"done"}') == Goodbye(reason="done")
    one = parse_frame('{"type":"envelope","envelope":{"msg_id":"m"}}')
    assert one == Envelopes(items=({"msg_id": "m"},))
    many = parse_frame('{"type":"batch","envelopes":[{"a":1},{"b":2}]}')
    assert isinstance(many, Envelopes)
    assert len(many.items) == 2


@pytest.mark.parametrize(("text", "rule", "code"), [
    ("not json", "json", CloseCode.MALFORMED),
    ("[1, 2]", "frame", CloseCode.MALFORMED),
    ('{"type":"dance"}', "frame_type", CloseCode.MALFORMED),
    ('{"envelope":{}}', "frame_type", CloseCode.MALFORMED),
    ('{"type":"envelope","envelope":[1]}', "envelope", CloseCode.MALFORMED),
    ('{"type":"batch","envelopes":{}}', "batch", CloseCode.MALFORMED),
    ('{"type":"hello","agent_id":"a"}', "hello", CloseCode.MALFORMED),
    ('{"type":"heartbeat","ts":"soon"}', "heartbeat", CloseCode.MALFORMED),
], ids=["not_json", "array", "unknown_type", "no_type", "envelope_not_object", "batch_not_list",
        "hello_missing_fields", "heartbeat_bad_ts"])
def test_malformed_frames_are_refused_with_4400_naming_the_problem(
        text: str, rule: str, code: CloseCode) -> None:
    with pytest.raises(CodecError) as caught:
        parse_frame(text)
    why = refusal(caught.value)
    assert (why.code, why.reason) == (code, rule)


def test_a_frame_over_the_limit_is_refused_with_4413() -> None:
    text = json.dumps({"type": "heartbeat", "pad": "x" * 2000})
    with pytest.raises(CodecError) as caught:
        parse_frame(text, max_bytes=1024)
    assert refusal(caught.value).code is CloseCode.TOO_LARGE
    assert caught.value.details["size"] == len(text)


def test_the_limit_counts_utf8_bytes_not_characters() -> None:
    text = json.dumps({"type": "heartbeat", "pad": "好" * 400}, ensure_ascii=False)
    assert len(text) < 1024 < len(text.encode("utf-8"))
    with pytest.raises(CodecError):
        parse_frame(text, max_bytes=1024)


def test_a_binary_frame_is_refused() -> None:
    with pytest.raises(CodecError) as caught:
        parse_frame(b'{"type":"heartbeat"}')
    assert refusal(caught.value).reason == "binary"


@pytest.mark.parametrize(("field", "value", "rule", "code"), [
    ("v", 2, "version", CloseCode.UNSUPPORTED),
    ("agent_id", "no spaces allowed", "agent_id", CloseCode.MALFORMED),
    ("nonce", "short", "nonce", CloseCode.MALFORMED),
    ("sig", "XYZ", "sig", CloseCode.MALFORMED),
])
def test_a_hello_with_a_bad_field_is_refused(field: str, value: object, rule: str,
                                             code: CloseCode) -> None:
    frame = make_hello("calc-1", Declaration(), b"k" * 32, now_ms=NOW_MS, nonce="ab" * 16)
    frame[field] = value
    with pytest.raises(CodecError) as caught:
        parse_frame(json.dumps(frame))
    assert (refusal(caught.value).code, refusal(caught.value).reason) == (code, rule)


def test_a_declaration_that_is_not_json_is_refused_when_read() -> None:
    frame = make_hello("calc-1", Declaration(), b"k" * 32, now_ms=NOW_MS, nonce="ab" * 16)
    frame["declaration"] = "{nope"
    hello = parse_frame(json.dumps(frame))
    assert isinstance(hello, Hello)
    with pytest.raises(CodecError, match="declaration"):
        hello.declared()


def test_the_close_reason_fits_a_close_frame() -> None:
    with pytest.raises(CodecError) as caught:
        parse_frame("x" * 10)
    why = refusal(caught.value).model_copy(update={"message": "好" * 200})
    assert len(why.close_reason().encode("utf-8")) <= 123


def test_envelopes_round_trip_through_json_text() -> None:
    env = Envelope.request("driver:1", "calc-1", {"a": 1, "text": "你好"}, "math.add@1.0",
                           timeout_ms=500, hops=("x",))
    text = envelopes_frame([envelope_json(env)])
    assert "你好" in text  # UTF-8 as is, not escaped
    frame = parse_frame(text)
    assert isinstance(frame, Envelopes)
    assert read_envelope(frame.items[0]) == env


def test_an_envelope_that_breaks_a_rule_is_a_protocol_error_naming_it() -> None:
    with pytest.raises(ProtocolError) as caught:
        read_envelope({"msg_type": "request", "sender": "a", "receiver": "b",
                       "payload_schema": "x@1.0"})
    assert caught.value.details["rule"] == "request_timeout"


def test_an_agent_class_declares_its_capabilities_and_handlers() -> None:
    from remote_unit_agents import Calculator

    declared = declaration_of(Calculator)
    assert declared.capabilities == ("math.add", "math.count")
    reads = {h.schema_ref: h for h in declared.handlers}
    assert reads["unit.add@1.0"].returns == "unit.sum@1.0"
    assert reads["unit.count@1.0"].streaming
    assert reads["unit.add@1.0"].json_schema is not None
    assert HandlerDoc.model_validate({"schema": "x@1.0"}).schema_ref == "x@1.0"


@pytest.mark.parametrize(("given", "url"), [
    ("http://gw:8000", "ws://gw:8000/v1/agents/connect"),
    ("https://gw.example/", "wss://gw.example/v1/agents/connect"),
    ("ws://gw:8000/v1/agents/connect", "ws://gw:8000/v1/agents/connect"),
])
def test_the_connect_url_comes_from_the_gateways(given: str, url: str) -> None:
    assert connect_url(given) == url


def test_the_python_client_imports_without_ray() -> None:
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'ray' or name.startswith('ray.'):\n"
        "            raise ImportError('ray is blocked: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import reach.remote.client, reach.remote.cli, reach.remote.wire\n"
        "assert not any(m == 'ray' or m.startswith('ray.') for m in sys.modules)\n"
        "print('no ray')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "no ray"


def test_the_blocker_would_catch_an_import_of_ray() -> None:
    code = ("import sys\n"
            "class Block:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name == 'ray':\n"
            "            raise ImportError('blocked')\n"
            "sys.meta_path.insert(0, Block())\n"
            "import ray\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, check=False, timeout=60)
    assert done.returncode != 0
    assert "blocked" in done.stderr


# -- strict JSON, bounded nesting ------------------------------------------------------------


@pytest.mark.parametrize(("text", "rule"), [
    ("[" * 100_000 + "]" * 100_000, "depth"),  # within 1 MiB, far past the parser's recursion
    ('{"type":"heartbeat","x":' + "[" * 64 + "]" * 64 + "}", "depth"),
    ('{"type":"heartbeat","ts":NaN}', "not_json"),
    ('{"type":"heartbeat","ts":-Infinity}', "not_json"),
    ('{"type":"heartbeat","ts":1e999}', "not_json"),
    ('{"type":"heartbeat","ts":' + "9" * 5000 + "}", "json"),
    ('{"type":"heartbeat","x":"\\ud800"}', "surrogate"),
    ('{"type":"heartbeat","x":"\ud800"}', "utf8"),
    ('{"type":"batch","envelopes":[],"x":NaN}', "not_json"),
])
def test_a_frame_that_is_not_strict_json_or_nests_too_deep_is_refused_by_rule(
        text: str, rule: str) -> None:
    with pytest.raises(CodecError) as refused:
        parse_frame(text)
    assert refused.value.details["rule"] == rule
    assert refused.value.details["close"] == CloseCode.MALFORMED


def test_the_depth_limit_counts_levels_from_the_frame_or_the_envelope() -> None:
    ok = '{"type":"heartbeat","x":' + "[" * 63 + "]" * 63 + "}"  # 64 levels with the frame
    assert parse_frame(ok) == Heartbeat()
    payload = "[" * 62 + "]" * 62  # the envelope 1, its payload object 2, then 62 arrays
    inside = parse_frame('{"type":"envelope","envelope":{"msg_id":"m","payload":{"a":'
                         + payload + "}}}")
    assert isinstance(inside, Envelopes)
    assert (len(inside.items), inside.refused) == (1, ())
    deeper = parse_frame('{"type":"envelope","envelope":{"msg_id":"m","payload":{"a":['
                         + payload + "]}}}")
    assert isinstance(deeper, Envelopes)
    assert deeper.items == ()
    assert [(r.msg_id, r.error.details["rule"]) for r in deeper.refused] == [("m", "depth")]
    assert "64 levels" in deeper.refused[0].error.message
    with pytest.raises(CodecError, match="10 levels"):
        parse_frame('{"type":"heartbeat","x":' + "[" * 10 + "]" * 10 + "}", max_depth=10)


def test_what_the_wire_writes_is_strict_json() -> None:
    good = {"msg_id": "g", "payload": {"x": 1.5, "s": "é😀"}}
    for bad in ({"msg_id": "n", "payload": {"x": float("nan")}},
                {"msg_id": "i", "payload": {"x": float("inf")}},
                {"msg_id": "s", "payload": {"x": "\ud800"}}):
        with pytest.raises(ValueError, match=r"JSON compliant|lone surrogate"):
            envelopes_frame([bad])
        text, refused = safe_envelopes_frame([good, bad])
        assert refused == [bad]
        assert text is not None
        assert json.loads(text, parse_constant=_not_json)["envelope"] == good
        text.encode("utf-8")
    with pytest.raises(ValueError, match="JSON compliant"):
        frame_text({"type": "heartbeat", "ts": float("nan")})


def _not_json(token: str) -> None:
    raise AssertionError(f"{token} written")


@pytest.mark.parametrize(("declaration", "says"), [
    ('{"capabilities":["a"],"handlers":[{"schema":"a.b@1.0","json_schema":{"max":NaN}}]}',
     "NaN is not JSON"),
    ('{"description":"x","extra":' + "[" * 70 + "]" * 70 + "}", "deeper than 64 levels"),
    ('{"description":"\\udfff"}', "lone surrogate"),
    ("[" * 5000 + "]" * 5000, "not JSON"),
])
def test_a_declaration_that_is_not_strict_json_is_refused(declaration: str, says: str) -> None:
    hello = Hello(agent_id="calc-1", ts=NOW_MS, nonce="ab" * 16, declaration=declaration,
                  sig="00" * 32)
    with pytest.raises(CodecError, match=says) as refused:
        hello.declared()
    assert refused.value.details["rule"] == "declaration"


def test_a_batch_of_more_envelopes_than_the_limit_is_refused_as_too_large() -> None:
    at_limit = parse_frame('{"type":"batch","envelopes":[' + ",".join(["{}"] * 10_000) + "]}")
    assert isinstance(at_limit, Envelopes)
    assert len(at_limit.items) == 10_000
    with pytest.raises(CodecError, match="limit of 10000") as refused:
        parse_frame('{"type":"batch","envelopes":[' + ",".join(["{}"] * 10_001) + "]}")
    assert refused.value.details["rule"] == "batch_size"
    assert refused.value.details["close"] == CloseCode.TOO_LARGE
