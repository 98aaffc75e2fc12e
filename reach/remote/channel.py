"""The gateway's WebSocket channel for remote agents: ``/v1/agents/connect``.

A gateway replica holding a socket is only its bridge: the reach side of the agents connected
through the replica is its :class:`~reach.remote.ports.RemoteHostPort` (``host.py``),
which registers them, queues what is sent to them and sends what they send. The replica keeps
two calls to it in flight at most, whatever the number of agents (:class:`Bridge`):

- *out*: one long poll (``take``) over every connection able to write, which returns a frame of
  everything queued for each; a connection writes its frame to its socket before it is polled
  for again, so that a slow socket leaves envelopes in the host's bounded queue (whose senders
  are refused past it), not in this process;
- *in*: one ``put`` of what every connection read; while it is in flight, the envelopes read
  next wait and then go together (adaptive batching, as the transport does).

Every refusal closes the socket with a :class:`~reach.remote.wire.CloseCode` and a reason, and
is audited; it touches neither the replica nor any other connection. An envelope that cannot
travel (nested too deep, not JSON, or one the call into the cluster cannot carry) is refused
alone, with an ``error`` frame to its sender: it never takes the rest of a batch with it. See
``docs/wire.md``; the server's own frame limit is ``channel_server.py``'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

from starlette.routing import BaseRoute, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from reach.errors import CodecError, ConfigError, ReachError
from reach.ports.cluster import Cluster
from reach.remote.bridge import GONE, Bridge
from reach.remote.channel_server import REFUSAL
from reach.remote.ports import RemoteHostPort
from reach.remote.wire import (
    CONNECT_PATH,
    DEFAULT_MAX_BATCH,
    DEFAULT_MAX_DEPTH,
    DEFAULT_MAX_FRAME_BYTES,
    WIRE_VERSION,
    Attached,
    CloseCode,
    Envelopes,
    FrameType,
    Goodbye,
    Heartbeat,
    Hello,
    WireRefusal,
    error_frame,
    frame_text,
    parse_frame,
    refusal,
)
from reach.security.keys import Keyring
from reach.web.auth import ANONYMOUS, bearer_token, principal_for
from reach.web.options import GatewayOptions

log = logging.getLogger("reach.remote.channel")


@dataclass(frozen=True, slots=True)
class ChannelOptions:
    """The channel's settings.

    Attributes:
        max_frame_bytes: Largest frame an agent may send (UTF-8 bytes); larger: close 4413.
            The server serving the channel must be given it too (``uvicorn_settings``), so
            that a larger frame is refused before it is buffered.
        max_depth: Levels of objects and arrays an envelope may nest, itself the first
            (deeper: that envelope is refused with an ``error`` frame); and any other frame
            (deeper: close 4400).
        max_batch: Most envelopes a ``batch`` frame may carry (more: close 4413).
        hello_timeout_s: Time allowed for the hello after the socket opens; then close 4408.
        heartbeat_s: Interval the welcome asks agents to heartbeat at (keeps NATs open).
        goodbye_linger_s: Time the replica waits, after goodbye, for the agent to close.
        grace_s: How long a disconnected agent may take to come back (its restart); passed
            to the remote host when the replica starts it.
        queue_limit: Envelopes queued per agent before senders are refused (retryable).
        put_backlog: Envelopes read from one socket and not yet handed over, past which the
            replica stops reading it (the agent's own sends are then slowed by TCP).
    """

    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    max_depth: int = DEFAULT_MAX_DEPTH
    max_batch: int = DEFAULT_MAX_BATCH
    hello_timeout_s: float = 10.0
    heartbeat_s: float = 15.0
    goodbye_linger_s: float = 1.0
    grace_s: float = 10.0
    queue_limit: int = 1000
    put_backlog: int = 2000

    def __post_init__(self) -> None:
        if self.max_frame_bytes < 1024:
            raise ConfigError(f"max_frame_bytes must be at least 1024, got {self.max_frame_bytes}")
        if self.max_batch < 1:
            raise ConfigError(f"max_batch must be at least 1, got {self.max_batch}")
        if self.max_depth < 2:
            raise ConfigError(f"max_depth must be at least 2 (an envelope and its payload), got "
                              f"{self.max_depth}")
        times = (self.hello_timeout_s, self.heartbeat_s, self.grace_s, self.goodbye_linger_s)
        if min(times) <= 0 or not all(math.isfinite(t) for t in times):
            raise ConfigError("hello_timeout_s, heartbeat_s, grace_s and goodbye_linger_s must "
                              "be positive and finite")
        if self.queue_limit < 1 or self.put_backlog < 1:
            raise ConfigError("queue_limit and put_backlog must be at least 1")


def channel_routes(cluster: Cluster, options: GatewayOptions, host: RemoteHostPort,
                   channel: ChannelOptions | None = None) -> list[BaseRoute]:
    """The channel's route, to mount in the gateway's Starlette application.

    Args:
        cluster: The deployment (its keyring checks the bearer tokens).
        options: The gateway's settings (``auth``: a bearer token is required).
        host: This replica's remote host (:func:`reach.remote.host.start_remote_host`).
        channel: The channel's own settings.

    Raises:
        ConfigError: ``options.auth`` while signing is off (tokens need the keyring).
    """
    guard = cluster.guard()
    if options.auth and guard is None:
        raise ConfigError("the channel's auth needs the deployment's keyring, and signing is "
                          "off", details={"setting": "auth"})
    keyring = guard.keyring if options.auth and guard is not None else None
    settings = channel or ChannelOptions()
    bridge = Bridge(host, settings.put_backlog)

    async def endpoint(ws: WebSocket) -> None:
        await _Connection(ws, bridge, settings, keyring).run()

    return [WebSocketRoute(CONNECT_PATH, endpoint)]


class _Closed(Exception):
    """The connection ends: with this refusal (to send and audit), or None (the peer left)."""

    def __init__(self, why: WireRefusal | None, audit: bool = True, sent: bool = False) -> None:
        super().__init__(why.reason if why else "peer left")
        self.why = why
        self.audit = audit
        self.sent = sent  # the server closed the socket already, with this refusal


class _Connection:
    """One agent's socket, from its hello to its close."""

    def __init__(self, ws: WebSocket, bridge: Bridge, settings: ChannelOptions,
                 keyring: Keyring | None) -> None:
        self.ws = ws
        self.bridge = bridge
        self.host = bridge.host
        self.settings = settings
        self.keyring = keyring
        self.principal = ANONYMOUS
        self.agent_id = ""
        self.conn = ""
        self.attached: Attached | None = None
        self._lock = asyncio.Lock()
        # What the poll took for this connection (None: the connection is over).
        self.frames: asyncio.Queue[str | None] = asyncio.Queue()
        self.errors: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        # Set while fewer than queue_limit error frames wait: an agent that sends bad envelopes
        # and does not read its socket is not read any more either (its memory here is bounded).
        self._room = asyncio.Event()
        self._room.set()
        self.goodbye = False

    async def run(self) -> None:
        await self.ws.accept()
        reason = "connection closed"
        try:
            self.principal = self._principal()
            attached = await self._attach(await self._hello())
            await self._send(self._welcome(attached))
            await self._serve(attached)
        except _Closed as closed:
            reason = closed.why.reason if closed.why else reason
            await self._end(closed)
        except ReachError as exc:  # the remote host is gone or unreachable
            log.warning("the remote host failed for %s: %s", self.agent_id, exc)
            reason = "remote_host"
            await self._end(_Closed(WireRefusal(code=CloseCode.UNAVAILABLE, reason="unavailable",
                                                message=exc.message), audit=False))
        except asyncio.CancelledError:  # Ray Serve cancels a request whose client has gone
            why = self._refused_by_server()
            if why is not None:  # by the server's refusal: audited all the same
                reason = why.reason
                await self._end(_Closed(why, sent=True))
            raise
        finally:
            if self.attached is not None and not self.goodbye:
                with contextlib.suppress(ReachError):
                    await self.host.detach(self.agent_id, self.attached.conn, reason, False)

    def _principal(self) -> str:
        if self.keyring is None:
            return ANONYMOUS
        given = self.ws.headers.get("authorization")
        token = bearer_token(given) or self.ws.query_params.get("token")
        principal = None if token is None else principal_for(self.keyring, token)
        if principal is None:
            why = "missing_token" if token is None else "invalid_token"
            raise _Closed(WireRefusal(code=CloseCode.UNAUTHORIZED, reason=why,
                                      message="send 'Authorization: Bearer <token>' with a token "
                                              "of this deployment (reach token NAME)"))
        return principal

    async def _hello(self) -> Hello:
        try:
            text = await asyncio.wait_for(self._receive(), self.settings.hello_timeout_s)
        except TimeoutError:
            raise _Closed(WireRefusal(code=CloseCode.HELLO_TIMEOUT, reason="hello_timeout",
                                      message=f"no hello within {self.settings.hello_timeout_s:g}"
                                              " s")) from None
        frame = self._parse(text)
        if not isinstance(frame, Hello):
            raise _Closed(WireRefusal(code=CloseCode.MALFORMED, reason="expected_hello",
                                      message="the first frame must be a hello"))
        return frame

    async def _attach(self, hello: Hello) -> Attached:
        self.agent_id = hello.agent_id
        attached = await self.host.attach(hello, self.principal)
        if isinstance(attached, WireRefusal):
            raise _Closed(attached, audit=False)  # audited by the host
        self.attached = attached
        self.conn = attached.conn
        return attached

    def _welcome(self, attached: Attached) -> dict[str, Any]:
        return {"type": FrameType.WELCOME.value, "v": WIRE_VERSION, "agent_id": attached.agent_id,
                "epoch": attached.epoch, "restarted": attached.restarted,
                "max_frame_bytes": self.settings.max_frame_bytes,
                "heartbeat_s": self.settings.heartbeat_s, "queue_limit": attached.queue_limit}

    async def _serve(self, attached: Attached) -> None:
        out = asyncio.ensure_future(self._pump_out())
        reader = asyncio.ensure_future(self._pump_in(attached.conn))
        errors = asyncio.ensure_future(self._pump_errors())
        self.bridge.ready_to_write(self)
        try:
            done, _ = await asyncio.wait({out, reader}, return_when=asyncio.FIRST_COMPLETED)
            if done == {out} and not out.exception():  # after goodbye: the reader closes
                await reader
            for task in (reader, out):
                if task in done:
                    task.result()  # raises _Closed or a ReachError
        finally:
            self.bridge.leave(self)
            for task in (out, reader, errors):
                task.cancel()
                task.add_done_callback(_retrieved)

    async def _pump_out(self) -> None:
        while True:
            text = await self.frames.get()
            if text is None and self.goodbye:  # the reader closes the socket
                return
            if text is None:  # replaced by a newer connection, or removed from reach
                raise _Closed(WireRefusal(code=CloseCode.NORMAL, reason="removed",
                                          message="this connection is no longer the agent's"),
                              audit=False)
            if text == GONE:
                raise _Closed(WireRefusal(code=CloseCode.UNAVAILABLE, reason="unavailable",
                                          message="the gateway lost its remote host"),
                              audit=False)
            await self._send_text(text)
            self.bridge.ready_to_write(self)

    async def _pump_errors(self) -> None:
        while True:
            frame = await self.errors.get()
            if self.errors.qsize() < self.settings.queue_limit:
                self._room.set()
            await self._send(frame)

    async def _pump_in(self, conn: str) -> None:
        while True:
            if self.errors.qsize() >= self.settings.queue_limit:
                self._room.clear()
                await self._room.wait()
            frame = self._parse(await self._receive())
            if isinstance(frame, Envelopes):
                for refused in frame.refused:  # the others of the frame go on
                    self.errors.put_nowait(error_frame(refused.msg_id, refused.error.code,
                                                       refused.error.message))
                if frame.items:
                    await self.bridge.put(self, list(frame.items))
            elif isinstance(frame, Heartbeat):
                await self._send({"type": FrameType.HEARTBEAT.value, "ts": frame.ts})
            elif isinstance(frame, Goodbye):
                await self._leave(conn, frame)
                return
            else:
                raise _Closed(WireRefusal(code=CloseCode.MALFORMED, reason="second_hello",
                                          message="a connection says hello once"))

    async def _leave(self, conn: str, goodbye: Goodbye) -> None:
        """Goodbye: what was sent before it is handed over, the agent leaves, and the socket
        closes (normally, or 4410 if the agent sends anything more)."""
        await self.bridge.flushed()
        self.goodbye = True
        await self.host.detach(self.agent_id, conn, goodbye.reason, True)
        try:
            await asyncio.wait_for(self._receive(), self.settings.goodbye_linger_s)
        except TimeoutError:
            raise _Closed(WireRefusal(code=CloseCode.NORMAL, reason="goodbye",
                                      message=goodbye.reason or "goodbye"),
                          audit=False) from None
        raise _Closed(WireRefusal(code=CloseCode.AFTER_GOODBYE, reason="after_goodbye",
                                  message="a frame came after goodbye"))

    # -- the socket ------------------------------------------------------------------------------

    async def _receive(self) -> str | bytes:
        try:
            message = await self.ws.receive()
        except WebSocketDisconnect:
            raise _Closed(None) from None
        if message["type"] == "websocket.disconnect":
            why = self._refused_by_server()
            raise _Closed(why, sent=True) if why is not None else _Closed(None)
        text = message.get("text")
        return text if text is not None else message.get("bytes") or b""

    def _refused_by_server(self) -> WireRefusal | None:
        """What the WebSocket server refused on this socket, closing it (``channel_server``)."""
        found = (self.ws.scope.get("extensions") or {}).get(REFUSAL)
        if not found:
            return None
        return WireRefusal(code=CloseCode(int(found["code"])), reason=str(found["rule"]),
                           message=str(found["words"]))

    def _parse(self, text: str | bytes) -> Any:
        try:
            return parse_frame(text, self.settings.max_frame_bytes, self.settings.max_depth,
                               self.settings.max_batch)
        except CodecError as exc:
            raise _Closed(refusal(exc)) from exc

    async def _send(self, frame: dict[str, Any]) -> None:
        try:
            text = frame_text(frame)
        except (TypeError, ValueError):  # the replica's own frame: a fault of reach's
            log.exception("could not write a %s frame to %s", frame.get("type"), self.agent_id)
            return
        await self._send_text(text)

    async def _send_text(self, text: str) -> None:
        async with self._lock:
            try:
                await self.ws.send_text(text)
            except (WebSocketDisconnect, RuntimeError, OSError):
                raise _Closed(None) from None

    async def _end(self, closed: _Closed) -> None:
        why = closed.why
        if why is None:
            return
        if closed.audit:
            await _quietly(self.host.refused(self.principal, self.agent_id, why.reason))
        log.info("closing the connection of %r (%s): %s", self.agent_id or self.principal,
                 why.code, why.message)
        if closed.sent:
            return
        with contextlib.suppress(RuntimeError, OSError, WebSocketDisconnect):
            await self.ws.close(int(why.code), why.close_reason())


def _retrieved(task: asyncio.Future[Any]) -> None:
    """Reads a finished task's outcome (its error was handled by whoever ended the connection)."""
    if not task.cancelled():
        task.exception()


async def _quietly(call: Awaitable[Any]) -> None:
    try:
        await call
    except ReachError as exc:
        log.warning("could not audit a refused connection: %s", exc)


__all__ = ["ChannelOptions", "channel_routes"]
