"""One remote agent's side of the WebSocket wire (:mod:`reach.remote.wire`), on one connection.

:class:`RemoteAgentRunner` says hello, then hands each request to the agent's handler (validated
by the handler's model, within the request's deadline), sends back the reply, the stream's chunks
and end, or the typed error, and sends the requests its handlers make through their
:class:`~reach.remote.remote_context.RemoteContext`, matching the replies to them. What it sends
is queued, and leaves in frames within the gateway's limit once connected; requests it was
handling when a connection broke are answered on the next one. Dialling the gateway, and dialling
it again, is :func:`reach.remote.client.serve_agent`'s.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Protocol

from opentelemetry import trace
from pydantic import BaseModel

from reach._runtime.tracer import TRACING, failed, handle_shared, start_handle, start_send
from reach.agent import Agent, HandlerSpec
from reach.errors import (
    AuthError,
    CodecError,
    ConnectionEnded,
    HandlerError,
    ProtocolError,
    ReachError,
    RequestTimeout,
    TaskCancelled,
)
from reach.protocol import ERROR_SCHEMA, Envelope, MsgType
from reach.remote.remote_context import RemoteContext
from reach.remote.wire import (
    CAPABILITY_PREFIX,
    DEFAULT_MAX_FRAME_BYTES,
    CloseCode,
    Declaration,
    FrameType,
    HandlerDoc,
    envelope_json,
    frame_text,
    make_hello,
    safe_envelopes_frame,
)
from reach.spans import Attr

log = logging.getLogger("reach.remote")

#: Schema of the reply of a handler that returns None, and of the end of a stream.
ACK_SCHEMA = "reach.ack@1.0"
STREAM_END_SCHEMA = "reach.stream.end@1.0"
CANCEL_SCHEMA = "reach.cancel@1.0"
#: Requests remembered as answered, so that one re-sent after a reconnect is not run twice.
ANSWERED_MEMORY = 10_000


class Connection(Protocol):
    """One WebSocket, as the runner needs it (``websockets``' client, or a test's socket)."""

    async def send(self, text: str) -> None:
        """Sends a text frame."""
        ...

    async def recv(self) -> str:
        """The next text frame.

        Raises:
            ConnectionEnded: the socket closed.
        """
        ...

    async def close(self, code: int = 1000, reason: str = "") -> None:
        """Closes the socket."""
        ...


def declaration_of(cls: type[Agent]) -> Declaration:
    """What an agent class declares in its hello: capabilities (with their priorities, those
    not at 0), description, handlers."""
    return Declaration(
        capabilities=tuple(cls.capabilities), description=cls.description,
        priorities={tag: p for tag, p in cls.capability_priorities.items() if p},
        handlers=tuple(HandlerDoc(schema_ref=s.reads, returns=s.returns, streaming=s.streaming,
                                  json_schema=s.model.model_json_schema() if s.model else None)
                       for s in cls.handler_specs()),
        pending_policy=cls.pending_policy.value)


class RemoteAgentRunner:
    """One remote agent: its instance, the requests it handles, the requests it made.

    Args:
        agent: The agent (its ``id`` is set here).
        agent_id: Its ID.
        secret: Its signing secret (:func:`reach.remote.wire.agent_secret`); None when the
            deployment runs with signing off.
        clock: Seconds since the epoch (injectable).
    """

    def __init__(self, agent: Agent, agent_id: str, secret: bytes | None, *,
                 clock: Callable[[], float] = time.time) -> None:
        agent.id = agent_id
        self.agent = agent
        self.agent_id = agent_id
        self.secret = secret
        self.clock = clock
        self.epoch = 0
        # The largest frame the gateway takes (its welcome says): batches are split to fit.
        self.max_frame_bytes = DEFAULT_MAX_FRAME_BYTES
        self.conn: Connection | None = None
        self._outbox: list[dict[str, Any]] = []
        self._connected = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None
        # Invariant: every request being handled maps to its task, until its reply is queued.
        self._running: dict[str, asyncio.Task[None]] = {}
        # The sender of each running request: the only one (besides reach's host, which sends
        # its cancels as that sender) whose cancel is obeyed.
        self._senders: dict[str, str] = {}
        self._answered: OrderedDict[str, None] = OrderedDict()
        self._waiting: dict[str, asyncio.Future[Envelope] | asyncio.Queue[Envelope]] = {}
        self.handled = 0

    # -- the connection ----------------------------------------------------------------------

    async def run(self, conn: Connection) -> CloseCode | int:
        """Says hello on ``conn`` and serves until it closes; returns the close code.

        Raises:
            AuthError: the gateway refused the hello or the token (4401, 4403).
        """
        await conn.send(frame_text(self._hello()))
        try:
            welcome = json.loads(await conn.recv())
        except ConnectionEnded as exc:
            code = int(exc.details.get("close") or 1006)
            if code in (CloseCode.UNAUTHORIZED, CloseCode.BAD_SIGNATURE):
                raise AuthError(exc.message, details=dict(exc.details)) from exc
            return code
        if welcome.get("type") != FrameType.WELCOME:
            await conn.close(int(CloseCode.MALFORMED), "expected welcome")
            return CloseCode.MALFORMED
        self.epoch = int(welcome.get("epoch", 0))
        self.max_frame_bytes = int(welcome.get("max_frame_bytes") or DEFAULT_MAX_FRAME_BYTES)
        log.info("%s connected (epoch %d%s)", self.agent_id, self.epoch,
                 ", restarted" if welcome.get("restarted") else "")
        self.conn = conn
        self._connected.set()
        self._kick()
        try:
            while True:
                self._on_frame(json.loads(await conn.recv()))
        except ConnectionEnded as exc:
            return int(exc.details.get("close") or 1006)
        finally:
            self.conn = None
            self._connected.clear()

    def _hello(self) -> dict[str, Any]:
        # With signing off the gateway checks no signature: any key makes a well-formed one.
        return make_hello(self.agent_id, declaration_of(type(self.agent)), self.secret or b"",
                          now_ms=round(self.clock() * 1000), nonce=os.urandom(16).hex())

    async def wait_connected(self) -> None:
        """Returns once the gateway has welcomed this agent on the current connection."""
        await self._connected.wait()

    async def goodbye(self, reason: str = "") -> None:
        """Leaves for good: what is queued goes first, then goodbye, then the socket closes."""
        conn = self.conn
        if conn is None:
            return
        if self._writer is not None:
            await asyncio.shield(self._writer)
        await conn.send(frame_text({"type": FrameType.GOODBYE.value, "reason": reason}))
        await conn.close(int(CloseCode.NORMAL), "goodbye")

    # -- sending -------------------------------------------------------------------------------

    def send(self, env: Envelope) -> None:
        """Queues an envelope; it leaves with whatever else is queued (one frame), at once when
        connected, on the next connection otherwise."""
        self._outbox.append(envelope_json(env))
        self._kick()

    def _kick(self) -> None:
        if self._outbox and self.conn is not None and (self._writer is None
                                                       or self._writer.done()):
            self._writer = asyncio.get_running_loop().create_task(self._write())

    async def _write(self) -> None:
        while self._outbox and self.conn is not None:
            items, self._outbox = self._outbox, []
            frames = self._frames(items)
            for index, (text, _) in enumerate(frames):
                try:
                    await self.conn.send(text)
                except ConnectionEnded:  # what has not left goes on the next connection
                    self._outbox[:0] = [i for _, part in frames[index:] for i in part]
                    return
            await asyncio.sleep(0)  # let replies ready now join the next frame

    def _frames(self, items: list[dict[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
        """The items as frames within the gateway's frame limit (each with the items it holds);
        an item with no JSON form, or too large for any frame, is refused for its own sender."""
        text, bad = safe_envelopes_frame(items)
        for item in bad:
            self._refuse_own(item, "its payload has no strict JSON form (bytes, a date, a NaN, "
                                   "an infinity...)")
        if text is None:
            return []
        good = [i for i in items if not any(i is b for b in bad)] if bad else items
        if len(text) <= self.max_frame_bytes // 4 or (
                len(text.encode("utf-8")) <= self.max_frame_bytes):
            return [(text, good)]
        if len(good) == 1:
            self._refuse_own(good[0], f"it is larger than the gateway's {self.max_frame_bytes} "
                                      "byte frame limit")
            return []
        half = len(good) // 2
        return self._frames(good[:half]) + self._frames(good[half:])

    def _refuse_own(self, item: dict[str, Any], why: str) -> None:
        """An envelope of this agent's that cannot leave: a request it waits on fails at once
        with a CodecError (not at its deadline); anything else is logged."""
        msg_id = str(item.get("msg_id"))
        error = CodecError(f"{self.agent_id} could not send {msg_id}: {why}",
                           details={"rule": "unsendable", "msg_id": msg_id})
        waiting = self._waiting.pop(msg_id, None)
        if isinstance(waiting, asyncio.Future) and not waiting.done():
            waiting.set_exception(error)
        elif isinstance(waiting, asyncio.Queue):
            waiting.put_nowait(Envelope(
                msg_type=MsgType.ERROR, sender=self.agent_id, receiver=self.agent_id,
                request_id=msg_id, payload_schema=ERROR_SCHEMA, error_info=error.to_info()))
        else:
            log.error("%s dropped %s: %s", self.agent_id, msg_id, why)

    # -- receiving -------------------------------------------------------------------------------

    def _on_frame(self, frame: dict[str, Any]) -> None:
        kind = frame.get("type")
        if kind == FrameType.ENVELOPE:
            self._on_envelope(frame["envelope"])
        elif kind == FrameType.BATCH:
            for item in frame["envelopes"]:
                self._on_envelope(item)
        elif kind == FrameType.ERROR:
            self._on_error(frame)
        elif kind != FrameType.HEARTBEAT:
            log.warning("%s ignored a frame of type %r", self.agent_id, kind)

    def _on_error(self, frame: dict[str, Any]) -> None:
        waiting = self._waiting.pop(str(frame.get("msg_id")), None)
        error = ProtocolError(f"the gateway refused an envelope: {frame.get('message')}",
                              details={"rule": str(frame.get("code"))})
        if isinstance(waiting, asyncio.Future) and not waiting.done():
            waiting.set_exception(error)
        elif waiting is None:
            log.warning("%s: the gateway refused %s: %s", self.agent_id, frame.get("msg_id"),
                        frame.get("message"))

    def _on_envelope(self, item: dict[str, Any]) -> None:
        try:
            env = Envelope.parse(item)
        except ReachError as exc:
            log.warning("%s dropped an invalid envelope: %s", self.agent_id, exc)
            return
        if env.request_id is not None and env.msg_type is not MsgType.REQUEST:
            self._on_reply(env)
        elif env.payload_schema == CANCEL_SCHEMA:
            request_id = str(env.payload.get("request_id"))
            task = self._running.get(request_id)
            if task is not None and self._senders.get(request_id) == env.sender:
                # After the task's first step (scheduled before this), so that even a handler
                # that has not started yet answers its caller with the cancellation.
                asyncio.get_running_loop().call_soon(task.cancel)
            elif task is not None:
                log.warning("%s refused a cancel of %s from %s, which did not send it",
                            self.agent_id, request_id, env.sender)
        elif env.msg_id in self._running or env.msg_id in self._answered:
            return  # re-sent after a reconnect: its reply is on its way, or was sent
        else:
            self._senders[env.msg_id] = env.sender
            self._running[env.msg_id] = asyncio.get_running_loop().create_task(
                self._handle(env, self.clock()))

    def _on_reply(self, env: Envelope) -> None:
        assert env.request_id is not None
        waiting = self._waiting.get(env.request_id)
        if isinstance(waiting, asyncio.Queue):
            if env.msg_type is not MsgType.EVENT:
                del self._waiting[env.request_id]
            waiting.put_nowait(env)
        elif waiting is not None:
            del self._waiting[env.request_id]
            if not waiting.done():
                waiting.set_result(env)

    # -- handling --------------------------------------------------------------------------------

    async def _handle(self, env: Envelope, arrived: float) -> None:
        """Handles a request or notification (in a server span, the child of the envelope's,
        where this process traces)."""
        tracer = TRACING.tracer
        if tracer is None:
            await self._handle_now(env, arrived)
            return
        span = start_handle(tracer, env,
                            handle_shared(env, tuple(self.agent.capabilities),
                                          {Attr.HOST: "remote", Attr.EPOCH: self.epoch}))
        with trace.use_span(span, end_on_exit=True, record_exception=False,
                            set_status_on_exception=False):
            await self._handle_now(env, arrived)

    async def _handle_now(self, env: Envelope, arrived: float) -> None:
        # Clocks differ: the budget counts from arrival here.
        deadline = None if env.timeout_ms is None else arrived + env.timeout_ms / 1000
        try:
            spec = type(self.agent).handler_for(env.payload_schema)
            message = spec.read(env.payload, env.payload_schema)
            ctx = RemoteContext(self, env, deadline)
            left = None if deadline is None else max(deadline - self.clock(), 0.0)
            async with asyncio.timeout(left):
                await self._invoke(spec, ctx, message, env)
        except asyncio.CancelledError:
            self._fail(env, TaskCancelled(f"{self.agent_id!r} was told to cancel the request"))
        except TimeoutError:
            self._fail(env, RequestTimeout(f"handler of {self.agent_id!r} passed the deadline",
                                           details={"agent_id": self.agent_id}))
        except ReachError as exc:
            self._fail(env, exc)
        except Exception as exc:
            self._fail(env, HandlerError(f"{type(exc).__name__}: {exc}",
                                         details={"type": type(exc).__name__,
                                                  "agent_id": self.agent_id}))
        finally:
            self._running.pop(env.msg_id, None)
            self._senders.pop(env.msg_id, None)
            self._answered[env.msg_id] = None
            if len(self._answered) > ANSWERED_MEMORY:
                self._answered.popitem(last=False)
            self.handled += 1

    async def _invoke(self, spec: HandlerSpec, ctx: RemoteContext, message: Any,
                      env: Envelope) -> None:
        fn = getattr(self.agent, spec.method)
        request = env.msg_type is MsgType.REQUEST
        if spec.streaming:
            sent = 0
            async for chunk in fn(ctx, message):
                reply = self._reply(env, spec, chunk)
                self.send(Envelope(
                    msg_type=MsgType.EVENT, sender=self.agent_id, receiver=env.sender,
                    payload=reply.payload, payload_schema=reply.payload_schema,
                    request_id=env.msg_id, trace_id=env.trace_id, session_id=env.session_id,
                    hops=env.hops))
                sent += 1
            if request:
                self.send(env.reply({"chunks": sent}, STREAM_END_SCHEMA, sender=self.agent_id))
            return
        result = await fn(ctx, message)
        if request:
            self.send(self._reply(env, spec, result))

    def _reply(self, env: Envelope, spec: HandlerSpec, result: Any) -> Envelope:
        if result is None:
            return env.reply({}, ACK_SCHEMA, sender=self.agent_id)
        if isinstance(result, BaseModel):
            return env.reply(result, spec.returns, sender=self.agent_id)
        if spec.returns is None:
            raise ProtocolError(f"handler {spec.method} returned a {type(result).__name__} but "
                                "declares no returns= schema")
        return env.reply(result, spec.returns, sender=self.agent_id)

    def _fail(self, env: Envelope, error: ReachError) -> None:
        failed(trace.get_current_span(), error)  # the handler's span, where one records
        if env.msg_type is MsgType.REQUEST:
            self.send(env.fail(error, sender=self.agent_id))
        else:
            log.warning("%s: %s %s failed: %s", self.agent_id, env.msg_type.value, env.msg_id,
                        error)

    # -- calling others --------------------------------------------------------------------------

    async def call(self, env: Envelope) -> Envelope:
        """Sends a request and waits for its reply envelope (until its deadline).

        Raises:
            RequestTimeout: no reply in time.
            ReachError: the reply is an error (typed, with its severity).
        """
        tracer = TRACING.tracer
        if tracer is None:
            return await self._call(env)
        routed = env.receiver.startswith(CAPABILITY_PREFIX)
        span, env = start_send(tracer, env, env.receiver.removeprefix(CAPABILITY_PREFIX)
                               if routed else None)
        try:
            return await self._call(env)
        except ReachError as exc:
            failed(span, exc)
            raise
        finally:
            span.end()

    async def _call(self, env: Envelope) -> Envelope:
        future: asyncio.Future[Envelope] = asyncio.get_running_loop().create_future()
        self._waiting[env.msg_id] = future
        self.send(env)
        try:
            async with asyncio.timeout((env.timeout_ms or 30_000) / 1000):
                reply = await future
        except TimeoutError:
            raise RequestTimeout(f"no reply from {env.receiver!r} within {env.timeout_ms} ms",
                                 details={"agent_id": env.receiver}) from None
        finally:
            self._waiting.pop(env.msg_id, None)
        if reply.msg_type is MsgType.ERROR:
            raise reply.to_error()
        return reply
