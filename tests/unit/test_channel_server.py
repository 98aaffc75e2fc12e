"""The WebSocket server keeps the channel's frame limit itself: a real uvicorn, as reach
configures it, refuses a frame over the limit as its header arrives (4413), text that is not
UTF-8 (4400), and lets the application tell, so that it audits the refusal; Serve builds its
server the way reach's seam counts on."""

from __future__ import annotations

import contextlib
import inspect
import socket
import struct
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn
from ray.serve._private import http_util, replica

from reach import _ray
from reach.remote.channel_server import REFUSAL, ChannelWebSocketProtocol, uvicorn_settings

LIMIT = 4096


class Recorder:
    """An ASGI WebSocket application that accepts, then records what it receives."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        self.refusal: dict[str, Any] = {}
        self.ended = threading.Event()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        assert scope["type"] == "websocket"
        self.refusal = scope["extensions"][REFUSAL]
        await receive()  # websocket.connect
        await send({"type": "websocket.accept"})
        while True:
            message = await receive()
            self.received.append(message)
            if message["type"] == "websocket.disconnect":
                self.ended.set()
                return


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def serving(app: Recorder, **settings: Any) -> Iterator[int]:
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="off",
                                           log_level="warning", **settings))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(timeout=10)


class RawSocket:
    """A WebSocket client by hand: it can announce a frame without sending its payload."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
                          b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                          b"Sec-WebSocket-Version: 13\r\n\r\n")
        head = b""
        while b"\r\n\r\n" not in head:
            head += self.sock.recv(4096)
        assert head.startswith(b"HTTP/1.1 101"), head
        self.rest = head.split(b"\r\n\r\n", 1)[1]

    def header(self, length: int, opcode: int = 0x1, fin: bool = True) -> None:
        """A frame's header, masked with a zero key (so the payload goes as it is)."""
        first = (0x80 if fin else 0) | opcode
        if length < 126:
            size = struct.pack("!B", 0x80 | length)
        elif length < 1 << 16:
            size = struct.pack("!BH", 0x80 | 126, length)
        else:
            size = struct.pack("!BQ", 0x80 | 127, length)
        self.sock.sendall(bytes([first]) + size + b"\x00\x00\x00\x00")

    def frame(self, payload: bytes, opcode: int = 0x1, fin: bool = True) -> None:
        self.header(len(payload), opcode, fin)
        self.sock.sendall(payload)

    def close_frame(self) -> tuple[int, str]:
        """Reads until the server's close frame; its code and reason."""
        data = self.rest
        while True:
            while len(data) >= 2:
                opcode, length = data[0] & 0x0F, data[1] & 0x7F
                if len(data) < 2 + length:
                    break
                body, data = data[2:2 + length], data[2 + length:]
                if opcode == 0x8:
                    return struct.unpack("!H", body[:2])[0], body[2:].decode()
            chunk = self.sock.recv(65536)
            assert chunk, "closed without a close frame"
            data += chunk


@pytest.mark.parametrize(("send", "code", "rule"), [
    ("announced", 4413, "frame_size"),
    ("fragments", 4413, "frame_size"),
    ("not_utf8", 4400, "utf8"),
])
def test_the_server_refuses_what_the_channel_would_with_its_codes_and_tells_the_app(
        send: str, code: int, rule: str) -> None:
    app = Recorder()
    with serving(app, **uvicorn_settings(LIMIT)) as port:
        client = RawSocket(port)
        if send == "announced":  # 64 MiB announced, not one byte of it sent
            client.header(64 << 20)
        elif send == "fragments":  # each fragment under the limit, together over it
            client.frame(b"x" * (LIMIT - 100), fin=False)
            client.frame(b"x" * 200, opcode=0x0)
        else:
            client.frame(b'{"type":"heartbeat","pad":"\xff\xfe"}')
        closed = client.close_frame()
        assert closed[0] == code
        assert closed[1].startswith(f"{rule}: ")
        assert app.ended.wait(10)
    assert app.received[-1]["code"] == code
    assert (app.refusal["code"], app.refusal["rule"]) == (code, rule)
    assert [m for m in app.received if m["type"] == "websocket.receive"] == []


def test_a_frame_within_the_limit_and_a_peers_own_close_are_not_refusals() -> None:
    app = Recorder()
    with serving(app, **uvicorn_settings(LIMIT)) as port:
        client = RawSocket(port)
        client.frame(b"y" * (LIMIT - 10))
        client.frame(struct.pack("!H", 4413) + b"frame_size: forged", opcode=0x8)
        assert client.close_frame()[0] == 4413  # the echo
        assert app.ended.wait(10)
    assert app.received[0] == {"type": "websocket.receive", "text": "y" * (LIMIT - 10)}
    assert app.refusal == {}


def test_the_seam_gives_uvicorn_the_channels_settings_as_defaults() -> None:
    original = uvicorn.Config
    try:
        _ray.set_server_defaults(uvicorn_settings(LIMIT))
        _ray.set_server_defaults(uvicorn_settings(LIMIT))  # wraps uvicorn's own, not itself
        config = uvicorn.Config(Recorder())
        assert (config.ws, config.ws_max_size) == (ChannelWebSocketProtocol, LIMIT)
        assert uvicorn.Config.__mro__[1] is original
        assert uvicorn.Config(Recorder(), ws_max_size=10).ws_max_size == 10
    finally:
        uvicorn.Config = original  # type: ignore[misc]


def test_serve_builds_its_replicas_server_from_uvicorns_config_after_the_constructor() -> None:
    """What :func:`reach._ray.set_server_defaults` counts on: if this fails, Serve moved,
    and a replica's WebSockets are no longer bounded before they are buffered."""
    builder = inspect.getsource(http_util.start_asgi_http_server)
    assert "uvicorn.Config(" in builder
    assert "ws_max_size" not in builder
    assert "ws=" not in builder
    assert vars(http_util)["uvicorn"] is uvicorn
    init = inspect.getsource(replica.Replica.initialize)
    assert init.index("initialize_callable()") < init.index("self._on_initialized()")
    started = inspect.getsource(replica.Replica._on_initialized)
    assert "_maybe_start_direct_ingress_servers" in started
    assert "start_asgi_http_server(" in inspect.getsource(
        replica.Replica._maybe_start_direct_ingress_servers)
    parameters = inspect.signature(uvicorn.Config).parameters
    assert {"ws", "ws_max_size"} <= set(parameters)
