"""Hostile input on the WebSocket channel, on the fake cluster: every case gets its documented
close code or ``error`` frame, is audited, and harms no one else (an honest agent connected all
along keeps answering; an envelope of an honest agent never goes down with an attacker's)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from remote_sockets import AsgiSocket
from remote_unit_agents import Add, Calculator, Sum
from starlette.applications import Starlette
from test_remote_host import HOST, Gateway

import reach
from reach import clock
from reach.errors import CodecError
from reach.ports.hosts import CallLimits
from reach.remote.channel import ChannelOptions, channel_routes
from reach.remote.channel_server import REFUSAL
from reach.remote.host import start_remote_host
from reach.remote.wire import CONNECT_PATH, CloseCode, Declaration, make_hello
from reach.security.guard import SecurityConfig, resolve_keyring
from reach.testing import FakeCluster, eventually, run
from reach.web.auth import token_for
from reach.web.options import GatewayOptions

FRAME_LIMIT = 4096


@reach.schema("hostile.measure@1.0")
class Measure(BaseModel):
    x: float = 0.0
    label: str = ""


Scenario = Callable[[FakeCluster, Gateway], Coroutine[Any, Any, None]]


def on_hostile_channel(scenario: Scenario, tmp_path: Path, **settings: Any) -> None:
    """The channel of one replica (signed: tokens and hellos are checked), ``settings`` its
    :class:`ChannelOptions` beyond a 4 KiB frame limit."""
    async def main(fake: FakeCluster) -> None:
        host = start_remote_host(fake, HOST, CallLimits(), 5.0, 1000)
        options = ChannelOptions(**{"max_frame_bytes": FRAME_LIMIT, "grace_s": 5.0, **settings})
        app = Starlette(routes=channel_routes(fake, GatewayOptions(auth=True), host, options))
        guard = fake.guard()
        assert guard is not None
        gateway = Gateway(fake, host, app, guard.keyring.master,
                          token_for(guard.keyring, "prober"))
        try:
            await scenario(fake, gateway)
        finally:
            for _, task in gateway.runners:
                task.cancel()

    security = SecurityConfig(sign=True, keyring=resolve_keyring(tmp_path / "keyring.json",
                                                                 create=True))
    run(main, security=security)


def hello(gw: Gateway, agent_id: str, *, nonce: str, secret: bytes | None = None,
          **changes: Any) -> str:
    frame = make_hello(agent_id, Declaration(capabilities=("probe.any",)),
                       secret or gw.secret(agent_id) or b"k" * 32,
                       now_ms=round(clock.now() * 1000), nonce=nonce)
    frame.update(changes)
    return json.dumps(frame)


def nested(depth: int) -> Any:
    """A JSON value of ``depth`` levels of arrays (a level is one array)."""
    value: Any = []
    for _ in range(depth - 1):
        value = [value]
    return value


def notification(sender: str, payload: dict[str, Any], msg_id: str) -> dict[str, Any]:
    return {"msg_id": msg_id, "msg_type": "notification", "sender": sender,
            "receiver": "calc-1", "payload_schema": "unit.add@1.0", "payload": payload}


def envelope_frame(item: dict[str, Any]) -> str:
    return json.dumps({"type": "envelope", "envelope": item})


async def attached(gw: Gateway, agent_id: str, nonce: str) -> AsgiSocket:
    sock = gw.socket()
    await sock.send(hello(gw, agent_id, nonce=nonce))
    assert (await sock.recv_json())["type"] == "welcome"
    return sock


async def honest_answers(rt: Any) -> None:
    reply = await rt.client.request("calc-1", Add(a=20, b=22), timeout_ms=5000)
    assert reply.value == Sum(total=42, by="calc-1")


# -- frames that end their connection ----------------------------------------------------------

_DEEP = json.dumps({"type": "heartbeat", "ts": 1, "pad": nested(70)})
_DEEPER_THAN_PYTHON = "[" * 2000 + "]" * 2000  # within the size limit, past json's recursion
_NAN = '{"type":"heartbeat","ts":NaN}'
_RAW_SURROGATE = '{"type":"heartbeat","pad":"\ud800"}'

# name: (token, frames after the socket opens (a str: text; bytes: a binary frame), the close
# code, the reason it starts with).
CLOSING: dict[str, tuple[str | None, list[str | bytes], CloseCode, str]] = {
    "no_token": ("", [], CloseCode.UNAUTHORIZED, "missing_token"),
    "foreign_token": ("nobody.00", [], CloseCode.UNAUTHORIZED, "invalid_token"),
    "not_json": (None, ["{not json"], CloseCode.MALFORMED, "json"),
    "not_an_object": (None, ["[1, 2]"], CloseCode.MALFORMED, "frame"),
    "unknown_type": (None, ['{"type":"shout"}'], CloseCode.MALFORMED, "frame_type"),
    "first_not_hello": (None, ['{"type":"heartbeat"}'], CloseCode.MALFORMED, "expected_hello"),
    "binary": (None, [b"\x00\x01"], CloseCode.TOO_LARGE, "binary"),
    "oversize": (None, ['{"type":"hello","pad":"' + "x" * FRAME_LIMIT + '"}'],
                 CloseCode.TOO_LARGE, "frame_size"),
    "oversize_multibyte": (None, ['{"pad":"' + "é" * (FRAME_LIMIT // 2) + '"}'],
                           CloseCode.TOO_LARGE, "frame_size"),
    "deep_frame": (None, [_DEEP], CloseCode.MALFORMED, "depth"),
    "deeper_than_the_parser": (None, [_DEEPER_THAN_PYTHON], CloseCode.MALFORMED, "depth"),
    "hundred_thousand_deep": (None, ["[" * 100_000 + "]" * 100_000], CloseCode.TOO_LARGE,
                              "frame_size"),
    "nan": (None, [_NAN], CloseCode.MALFORMED, "not_json"),
    "infinity_in_hello": (None, ['{"type":"hello","ts":Infinity}'], CloseCode.MALFORMED,
                          "not_json"),
    "overflowing_number": (None, ['{"type":"hello","ts":1e999}'], CloseCode.MALFORMED,
                           "not_json"),
    "not_utf8": (None, [_RAW_SURROGATE], CloseCode.MALFORMED, "utf8"),
    "too_many_envelopes": (None, ['{"type":"batch","envelopes":[' + ",".join(["{}"] * 1001)
                                  + "]}"], CloseCode.TOO_LARGE, "batch_size"),
}


@pytest.mark.parametrize("case", sorted(CLOSING))
def test_a_hostile_frame_closes_its_own_connection_audited_and_harms_no_one(
        case: str, tmp_path: Path) -> None:
    token, frames, code, reason = CLOSING[case]

    async def scenario(fake: FakeCluster, gw: Gateway) -> None:
        rt = fake.runtime()
        await gw.connect("calc-1")
        sock = gw.socket(token)
        for frame in frames:
            await (sock.send_bytes(frame) if isinstance(frame, bytes) else sock.send(frame))
        closed = await sock.closed_with()
        assert closed[0] == code, closed
        assert closed[1].startswith(f"{reason}: "), closed
        await honest_answers(rt)
        audited = {r["outcome"] for r in await gw.audit(HOST)}
        assert f"refused: {reason}" in audited

    on_hostile_channel(scenario, tmp_path, max_batch=1000)


def test_hellos_forged_replayed_stale_or_repeated_are_refused_and_harm_no_one(
        tmp_path: Path) -> None:
    async def scenario(fake: FakeCluster, gw: Gateway) -> None:
        rt = fake.runtime()
        await gw.connect("calc-1")
        cases = {
            "forged": ([hello(gw, "spy-1", nonce="01" * 16, secret=b"\x07" * 32)],
                       CloseCode.BAD_SIGNATURE, "bad_signature"),
            "stale": ([hello(gw, "spy-2", nonce="02" * 16, ts=1)], CloseCode.BAD_SIGNATURE,
                      "replay_window"),
            "impersonating": ([hello(gw, "calc-1", nonce="03" * 16)],
                              CloseCode.ALREADY_ONLINE, "already_online"),
            "version": ([hello(gw, "spy-3", nonce="04" * 16, v=99)], CloseCode.UNSUPPORTED,
                        "version"),
        }
        for name, (frames, code, reason) in cases.items():
            sock = gw.socket()
            for frame in frames:
                await sock.send(frame)
            closed = await sock.closed_with()
            assert (closed[0], closed[1].split(":")[0]) == (code, reason), name
            await honest_answers(rt)
        # a second hello on a welcomed connection, then that hello replayed on a new one
        first = hello(gw, "twice-1", nonce="05" * 16)
        sock = gw.socket()
        await sock.send(first)
        assert (await sock.recv_json())["type"] == "welcome"
        await sock.send(hello(gw, "twice-1", nonce="06" * 16))
        assert (await sock.closed_with())[1].startswith("second_hello: ")
        replay = gw.socket()
        await replay.send(first)
        closed = await replay.closed_with()
        assert (closed[0], closed[1].split(":")[0]) == (CloseCode.BAD_SIGNATURE,
                                                        "replayed_nonce")
        await honest_answers(rt)
        assert "refused: bad_signature" in {r["outcome"] for r in await gw.audit("spy-1")}
        assert "refused: replayed_nonce" in {r["outcome"] for r in await gw.audit("twice-1")}

    on_hostile_channel(scenario, tmp_path)


# -- envelopes refused alone, the connection staying ------------------------------------------

# name: (the payload of a notification, what the error frame's message says)
REFUSED_ALONE: dict[str, tuple[str, str]] = {
    "too_deep": ('{"a":' + json.dumps(nested(70)) + "}", "deeper than 64 levels"),
    "six_hundred_deep": ('{"a":' + json.dumps(nested(600)) + "}", "deeper than 64 levels"),
    "nan": ('{"a":NaN}', "NaN is not JSON"),
    "minus_infinity": ('{"a":[1,-Infinity]}', "-Infinity is not JSON"),
    "overflow": ('{"a":1e400}', "1e400 is not JSON"),
    "lone_surrogate": ('{"a":"\\udc00"}', "lone surrogate"),
    "lone_surrogate_key": ('{"\\ud800":1}', "lone surrogate"),
}


@pytest.mark.parametrize("case", sorted(REFUSED_ALONE))
def test_an_envelope_that_cannot_travel_is_refused_alone_and_the_rest_of_its_frame_goes_on(
        case: str, tmp_path: Path) -> None:
    payload, says = REFUSED_ALONE[case]

    async def scenario(fake: FakeCluster, gw: Gateway) -> None:
        rt = fake.runtime()
        runner, _ = await gw.connect("calc-1")
        sock = await attached(gw, "raw-1", "11" * 16)
        bad = json.dumps(notification("raw-1", {}, "bad-1")).replace(
            '"payload": {}', f'"payload": {payload}')
        good = json.dumps(notification("raw-1", {"a": 1, "b": 2}, "good-1"))
        await sock.send(f'{{"type":"batch","envelopes":[{bad},{good}]}}')
        error = await sock.recv_json()
        assert (error["type"], error["code"], error["msg_id"]) == ("error", "codec_error",
                                                                   "bad-1")
        assert says in error["message"]
        calculator = runner.agent
        assert isinstance(calculator, Calculator)
        await eventually(lambda: _true(calculator.runs >= 1))  # the good one came through
        await honest_answers(rt)
        await sock.send('{"type":"heartbeat","ts":7}')  # the connection stays
        assert await sock.recv_json() == {"type": "heartbeat", "ts": 7}

    on_hostile_channel(scenario, tmp_path)


# -- one agent's poison, another's messages ----------------------------------------------------


def test_an_agents_poison_never_takes_another_agents_envelopes_with_it(tmp_path: Path) -> None:
    """The probe's defect: notifications nested 600 deep dropped whole batches toward the
    cluster, honest agents' replies included."""
    async def scenario(fake: FakeCluster, gw: Gateway) -> None:
        rt = fake.runtime()
        await gw.connect("calc-1")
        attacker = await attached(gw, "spy-1", "21" * 16)
        poison = envelope_frame(notification("spy-1", {"a": nested(600)}, "p"))
        calls = []
        for i in range(20):
            calls.append(asyncio.ensure_future(
                rt.client.request("calc-1", Add(a=i, b=1), timeout_ms=5000)))
            for _ in range(3):
                await attacker.send(poison)
        replies = await asyncio.gather(*calls)
        assert [r.value.total for r in replies] == [i + 1 for i in range(20)]
        errors = [await attacker.recv_json() for _ in range(60)]
        assert {(e["type"], e["code"]) for e in errors} == {("error", "codec_error")}

    on_hostile_channel(scenario, tmp_path, max_frame_bytes=1 << 16)


def test_an_agent_sending_bad_envelopes_that_reads_nothing_is_not_read_either(
        tmp_path: Path) -> None:
    """Its error frames wait for it in the replica: at most ``queue_limit`` of them, then the
    replica stops reading its socket (TCP slows the agent), and goes on once it reads."""
    async def scenario(fake: FakeCluster, gw: Gateway) -> None:
        rt = fake.runtime()
        await gw.connect("calc-1")
        sock = AsgiSocket(gw.app, CONNECT_PATH, {"authorization": f"Bearer {gw.token}"},
                          buffer=1)
        await sock.send(hello(gw, "mute-1", nonce="43" * 16))
        assert (await sock.recv_json())["type"] == "welcome"
        bad = envelope_frame(notification("mute-1", {"a": nested(100)}, "deep"))
        for _ in range(200):
            await sock.send(bad)
        await asyncio.sleep(5)  # virtual: time for the replica to read all it would
        assert sock.unread >= 200 - 10 - 5  # read no more than its queue_limit and a few
        await honest_answers(rt)  # nobody else waits for it
        errors = [await sock.recv_json() for _ in range(200)]  # reading lets it go on
        assert {(e["type"], e["code"]) for e in errors} == {("error", "codec_error")}
        assert sock.unread == 0

    on_hostile_channel(scenario, tmp_path, queue_limit=10)


def test_past_the_depth_check_a_batch_that_fails_to_pickle_is_sent_again_without_the_bad_one(
        tmp_path: Path) -> None:
    """The backstop: with the depth limit out of the way, the call into the cluster fails to
    pickle the batch; it is put again connection by connection, then envelope by envelope,
    and only the poisoned envelope is refused (its sender told why)."""
    async def scenario(fake: FakeCluster, gw: Gateway) -> None:
        runner, _ = await gw.connect("calc-1")
        attacker = await attached(gw, "spy-1", "31" * 16)
        honest = await attached(gw, "raw-1", "32" * 16)
        poison = notification("spy-1", {"a": nested(600)}, "poison-1")
        for round_ in range(5):
            before = notification("spy-1", {"a": 1, "b": 1}, f"before-{round_}")
            after = notification("spy-1", {"a": 2, "b": 2}, f"after-{round_}")
            await attacker.send(json.dumps({"type": "batch",
                                            "envelopes": [before, poison, after]}))
            await honest.send(envelope_frame(notification("raw-1", {"a": 3, "b": 3},
                                                          f"honest-{round_}")))
        # every good envelope arrives: 2 of the attacker's and 1 of the honest agent's a round
        calculator = runner.agent
        assert isinstance(calculator, Calculator)
        await eventually(lambda: _true(calculator.runs >= 15))
        errors = [await attacker.recv_json() for _ in range(5)]
        assert {(e["code"], e["msg_id"]) for e in errors} == {("codec_error", "poison-1")}
        assert "cannot travel into the cluster (RecursionError" in errors[0]["message"]

    on_hostile_channel(scenario, tmp_path, max_depth=10_000)


# -- what the replica writes --------------------------------------------------------------------


@pytest.mark.parametrize(("value", "says"), [
    (Measure(x=float("nan")), "no JSON form"), (Measure(x=float("-inf")), "no JSON form"),
    (Measure(label="\ud800"), "not valid UTF-8")])  # the cluster's own codec refuses this one
def test_a_request_with_no_strict_json_form_fails_for_its_caller_and_the_writer_goes_on(
        value: Measure, says: str, tmp_path: Path) -> None:
    async def scenario(fake: FakeCluster, gw: Gateway) -> None:
        rt = fake.runtime()
        sock = await attached(gw, "raw-1", "41" * 16)
        with pytest.raises(CodecError, match=says):
            await rt.client.request("raw-1", value, timeout_ms=5000)
        call = asyncio.ensure_future(rt.client.request("raw-1", Measure(x=1.5),
                                                       timeout_ms=5000))
        text = await sock.recv()
        text.encode("utf-8")  # strict UTF-8
        request = json.loads(text, parse_constant=_refuse)["envelope"]
        assert request["payload"]["x"] == 1.5
        await sock.send(envelope_frame({
            "msg_type": "response", "sender": "raw-1", "receiver": request["sender"],
            "request_id": request["msg_id"], "payload": {"x": 3.0},
            "payload_schema": "hostile.measure@1.0"}))
        assert (await call).value == Measure(x=3.0)

    on_hostile_channel(scenario, tmp_path)


class Unmeasurable(reach.Agent):
    """An agent in the cluster whose every answer holds a NaN (which msgpack carries, JSON not)."""

    capabilities = ("hostile.nan",)

    @reach.handler(Measure, returns=Measure)
    async def measure(self, ctx: reach.Context, m: Measure) -> Measure:
        return Measure(x=float("nan"))


def test_a_reply_with_no_strict_json_form_fails_the_remote_agents_call_at_once(
        tmp_path: Path) -> None:
    async def scenario(fake: FakeCluster, gw: Gateway) -> None:
        rt = fake.runtime()
        await rt.spawn(Unmeasurable, "nan-1")
        sock = await attached(gw, "raw-2", "42" * 16)
        await sock.send(envelope_frame({
            "msg_id": "7" * 32, "msg_type": "request", "sender": "raw-2", "receiver": "nan-1",
            "payload": {"x": 1.0}, "payload_schema": "hostile.measure@1.0",
            "timeout_ms": 600_000}))
        answer = json.loads(await sock.recv(), parse_constant=_refuse)["envelope"]
        assert (answer["msg_type"], answer["request_id"]) == ("error", "7" * 32)
        assert answer["error_info"]["code"] == "codec_error"
        assert "no JSON form" in answer["error_info"]["reason"]

    on_hostile_channel(scenario, tmp_path)


def _refuse(token: str) -> None:
    raise AssertionError(f"the replica wrote {token}")


async def _true(value: bool) -> bool:
    return value


# -- refusals by the WebSocket server ----------------------------------------------------------


@pytest.mark.parametrize("cancelled", [False, True])
def test_a_frame_the_server_refused_is_audited_even_if_serve_cancels_the_channel(
        cancelled: bool, tmp_path: Path) -> None:
    """The server (``channel_server``) refuses an oversize frame from its header and closes;
    the channel learns it from the scope, also when Ray Serve, seeing the client gone, cancels
    the channel at once."""
    async def scenario(fake: FakeCluster, gw: Gateway) -> None:
        refusal: dict[str, Any] = {}
        scope = {"type": "websocket", "asgi": {"version": "3.0"}, "scheme": "ws",
                 "path": CONNECT_PATH, "raw_path": CONNECT_PATH.encode(), "root_path": "",
                 "query_string": b"", "server": ("gateway", 80), "client": ("agent", 1),
                 "subprotocols": [], "extensions": {REFUSAL: refusal},
                 "headers": [(b"authorization", f"Bearer {gw.token}".encode())]}
        to_app: asyncio.Queue[Any] = asyncio.Queue()
        from_app: asyncio.Queue[Any] = asyncio.Queue()
        task = asyncio.ensure_future(gw.app(scope, to_app.get, from_app.put))
        await to_app.put({"type": "websocket.connect"})
        assert (await from_app.get())["type"] == "websocket.accept"
        await to_app.put({"type": "websocket.receive", "text": hello(gw, "big-1",
                                                                     nonce="51" * 16)})
        assert json.loads((await from_app.get())["text"])["type"] == "welcome"
        refusal.update(code=4413, rule="frame_size",
                       words="frame with 8388608 bytes exceeds limit of 4096 bytes")
        await to_app.put({"type": "websocket.disconnect", "code": 4413})
        if cancelled:
            task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert from_app.empty()  # no close sent on a socket the server closed
        outcomes = [r["outcome"] for r in await gw.audit("big-1")]
        assert outcomes.count("refused: frame_size") == 1

    on_hostile_channel(scenario, tmp_path)
