"""Hostile remote agents on real Ray, through one channel (uvicorn in a thread, configured as
reach configures a gateway replica's server; its RemoteHost a Ray actor):

- an attacker sends notifications nested 600 deep while an honest agent answers the driver: the
  honest one loses nothing, the attacker gets ``error`` frames and keeps its connection;
- a gateway replica on Serve refuses an oversize frame from its header;
- 30 sockets announce oversize frames: each is refused (4413) and audited before the server
  buffers it, and the serving process's memory stays within the stated bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import select
import socket
import struct
import sys
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
import ray
from channel_helpers import ROOT, Channel, Process
from ray_helpers import start_gateway, wait_until
from remote_agents import Add

from reach.remote.wire import (
    CONNECT_PATH,
    DEFAULT_MAX_FRAME_BYTES,
    CloseCode,
    agent_secret,
)

HOST = "reach.remote.isolation-replica"
pytestmark = [pytest.mark.integration]

#: What a connection may hold in the server (``reach/remote/channel_server.py``'s docstring).
BOUND_PER_CONNECTION = 3 * DEFAULT_MAX_FRAME_BYTES


@pytest.fixture(scope="module")
def channel(rt: Any) -> Iterator[Channel]:
    made = Channel(rt, HOST, "isolation-tests")
    try:
        yield made
    finally:
        made.close()


def rss() -> int:
    """This process's resident memory, in bytes (uvicorn serves the channel in it)."""
    assert ray.is_initialized()  # Ray puts the psutil it ships on the path
    import psutil  # type: ignore[import-untyped]

    return int(psutil.Process().memory_info().rss)


def nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth - 1):
        value = [value]
    return value


async def test_an_attackers_600_deep_notifications_cost_an_honest_agent_nothing(
        rt: Any, channel: Channel) -> None:
    from websockets.asyncio.client import connect

    honest = await Process([
        sys.executable, "-m", "reach.remote", "--gateway", channel.url,
        "remote_agents:PyCalculator", "--id", "iso-calc-1", "--token", channel.token,
        "--secret", agent_secret(channel.master, "iso-calc-1").hex()],
        env={"PYTHONPATH": os.pathsep.join((str(ROOT / "tests" / "integration"),
                                            str(ROOT)))}).start()
    try:
        await wait_until(lambda: rt.cluster.registry().lookup("iso-calc-1"), timeout_s=30)
        async with connect(f"{channel.url}{CONNECT_PATH}", max_size=None,
                           additional_headers={"Authorization": f"Bearer {channel.token}"},
                           ) as spy:
            await spy.send(channel.hello("iso-spy-1"))
            assert json.loads(await spy.recv())["type"] == "welcome"
            poison = json.dumps({"type": "envelope", "envelope": {
                "msg_id": "poison", "msg_type": "notification", "sender": "iso-spy-1",
                "receiver": "iso-calc-1", "payload_schema": "test.add@1.0",
                "payload": {"a": nested(600)}}})
            errors: list[dict[str, Any]] = []

            async def read_errors() -> None:
                while True:
                    errors.append(json.loads(await spy.recv()))

            sent = 0

            async def attack(until: asyncio.Future[Any]) -> None:
                nonlocal sent
                while not until.done():  # a poisoned frame every 5 ms while replies flow
                    await spy.send(poison)
                    sent += 1
                    await asyncio.sleep(0.005)

            reading = asyncio.ensure_future(read_errors())
            for round_ in range(10):
                calls = asyncio.ensure_future(asyncio.gather(*(
                    rt.client.request("iso-calc-1", Add(a=round_, b=i), timeout_ms=20_000)
                    for i in range(15))))
                await attack(calls)
                replies = await calls
                assert [r.value.total for r in replies] == [round_ + i for i in range(15)]
            await wait_until(lambda: _true(len(errors) == sent))
            reading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reading
            assert {(e["type"], e["code"], e.get("msg_id")) for e in errors} == {
                ("error", "codec_error", "poison")}
            assert "deeper than 64 levels" in errors[0]["message"]
            await spy.send('{"type":"heartbeat","ts":5}')  # the attacker's connection stays
            while (frame := json.loads(await spy.recv()))["type"] != "heartbeat":
                assert frame["type"] == "error"
    finally:
        await honest.stop()


class RawSocket:
    """A WebSocket client by hand, to announce a frame and send its payload only if asked."""

    def __init__(self, port: int, token: str) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.sock.sendall(
            f"GET {CONNECT_PATH} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
            "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            f"Sec-WebSocket-Version: 13\r\nAuthorization: Bearer {token}\r\n\r\n"
            .encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += self.sock.recv(4096)
        assert head.startswith(b"HTTP/1.1 101"), head
        self.data = head.split(b"\r\n\r\n", 1)[1]

    def header(self, length: int) -> None:
        """A text frame's header, masked with a zero key (the payload goes as it is)."""
        if length < 126:
            size = struct.pack("!B", 0x80 | length)
        elif length < 1 << 16:
            size = struct.pack("!BH", 0x80 | 126, length)
        else:
            size = struct.pack("!BQ", 0x80 | 127, length)
        self.sock.sendall(b"\x81" + size + b"\x00\x00\x00\x00")

    def send_text(self, text: str) -> None:
        payload = text.encode()
        self.header(len(payload))
        self.sock.sendall(payload)

    def answered(self, within_s: float) -> bool:
        """Whether the server has sent something (or closed) within ``within_s``."""
        return bool(self.data) or bool(select.select([self.sock], [], [], within_s)[0])

    def read_frame(self) -> tuple[int, bytes]:
        while True:
            if len(self.data) >= 2:
                opcode, length, at = self.data[0] & 0x0F, self.data[1] & 0x7F, 2
                if length == 126:
                    (length,), at = struct.unpack("!H", self.data[2:4]), 4
                elif length == 127:
                    (length,), at = struct.unpack("!Q", self.data[2:10]), 10
                if len(self.data) >= at + length:
                    body, self.data = self.data[at:at + length], self.data[at + length:]
                    return opcode, body
            chunk = self.sock.recv(65536)
            assert chunk, "closed without a close frame"
            self.data += chunk

    def close_code(self) -> tuple[int, str]:
        while True:
            opcode, body = self.read_frame()
            if opcode == 0x8:
                return struct.unpack("!H", body[:2])[0], body[2:].decode()


def hold_oversize(channel: Channel, agent_id: str, size: int) -> RawSocket:
    """A welcomed socket that announces a frame of ``size`` bytes; if the server does not
    refuse it at once, sends all of it but its last byte (the server then holds it)."""
    client = RawSocket(channel.port, channel.token)
    client.send_text(channel.hello(agent_id))
    _, body = client.read_frame()
    assert json.loads(body)["type"] == "welcome", body
    client.header(size)
    if not client.answered(within_s=2.0):  # reach before this change: it reads the frame
        chunk = b"x" * 65536
        with contextlib.suppress(OSError):
            for _ in range((size - 1) // len(chunk)):
                client.sock.sendall(chunk)
            client.sock.sendall(chunk[:(size - 1) % len(chunk)])
    return client


async def test_thirty_sockets_announcing_oversize_frames_are_refused_before_buffered(
        rt: Any, channel: Channel) -> None:
    before = rss()
    sizes = [8 << 20 if i % 2 else 20 << 20 for i in range(30)]  # under and over uvicorn's 16
    held = [await asyncio.to_thread(hold_oversize, channel, f"iso-big-{i}", size)
            for i, size in enumerate(sizes)]
    grown = rss() - before
    try:
        print(f"30 sockets with oversize frames: the serving process grew {grown >> 20} MiB")
        assert grown < 30 * BOUND_PER_CONNECTION, f"the server grew {grown >> 20} MiB"
        for client in held:
            with contextlib.suppress(OSError):
                client.sock.sendall(b"x")  # the last byte, for a server still reading
        closes = [await asyncio.to_thread(c.close_code) for c in held]
        assert {code for code, _ in closes} == {CloseCode.TOO_LARGE}
        assert all(reason.startswith("frame_size: ") for _, reason in closes)
    finally:
        for client in held:
            client.sock.close()

    async def audited() -> bool:
        await channel.host.flush_audit()
        found = [await rt.cluster.audit_log().audit_records(None, f"iso-big-{i}", 10)
                 for i in range(30)]
        return all("refused: frame_size" in {r["outcome"] for r in f} for f in found)

    await wait_until(audited)


async def test_a_gateway_replica_on_serve_refuses_an_oversize_frame_from_its_header(
        rt: Any, channel: Channel) -> None:
    """The gateway as reach deploys it (Serve, its HAProxy ingress): the replica's own server
    was built with the channel's limit (``reach._ray.set_server_defaults``)."""
    name = "reach-gateway-isolation"
    url = await asyncio.to_thread(start_gateway, rt, name=name)
    port = urlsplit(url).port or 80
    try:
        # Until HAProxy routes to the new replica, Serve's fallback proxy holds the sockets
        # (uvicorn as Serve configures it): try until the replica's own server answers.
        deadline, attempt = time.monotonic() + 90, 0
        while True:
            attempt += 1
            client = RawSocket(port, channel.token)
            client.send_text(channel.hello(f"iso-serve-{attempt}"))
            _, body = client.read_frame()
            assert json.loads(body)["type"] == "welcome", body
            client.header(8 << 20)  # under uvicorn's 16 MiB, over the channel's 1 MiB
            if client.answered(within_s=5.0):
                break
            client.sock.close()
            assert time.monotonic() < deadline, "no replica's own server refused the frame"
        code, reason = await asyncio.to_thread(client.close_code)
        assert (code, reason.split(":")[0]) == (CloseCode.TOO_LARGE, "frame_size")
        client.sock.close()

        async def audited() -> bool:
            records = await rt.cluster.audit_log().audit_records(None, f"iso-serve-{attempt}", 10)
            return "refused: frame_size" in {r["outcome"] for r in records}

        await wait_until(audited, timeout_s=30)
    finally:
        await asyncio.to_thread(rt.stop_gateway, name)


async def _true(value: bool) -> bool:
    return value
