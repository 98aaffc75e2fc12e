"""The runtime's one send path: a :class:`Courier` builds and carries envelopes for one sender.

Everything a process sends to an agent leaves through a courier: what a
:class:`~reach.client.Client` builds, and envelopes built elsewhere (a session's recorded request,
resent after a restart; a task's attempt; a remote agent's own request). A courier carries

- a request until its reply (:meth:`Courier.call`): routed through the directory's cache, resent
  while its agent moves between hosts, failed at its deadline; when its agent's process dies with
  it in hands, the death is reported, and a request that is poison fails as such; when a later
  incarnation answers a request of a content so reported, the answer is reported too (it clears
  that content's kills: see :mod:`reach._runtime.poison`);
- a notification (:meth:`Courier.post`), kept as a dead letter when it cannot be handed over;
- a streamed request's chunks until the stream's end (:meth:`Courier.stream`).

It builds, for its sender within the call being handled (if any), envelopes that keep the trace,
extend the hop chain and never outlive that call's deadline. Where the process traces, each
send is a client span (:mod:`reach._runtime.tracer`), the child of the span current where it is
sent (the handler's, in a handler), and the envelope leaves carrying it as its parent span.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator
from typing import Any

from opentelemetry.trace import Span

from policies.backoff import poll_delay
from policies.routing import check_hops, child_timeout_ms
from reach import clock
from reach._runtime.directory import NOTIFY_HOLD_S
from reach._runtime.link import Link
from reach._runtime.metrics import metrics
from reach._runtime.tracer import TRACING, dropped_new, event, failed, start_send
from reach._runtime.transport import STREAM_END_SCHEMA, Pending, StaleRoute
from reach.errors import AgentUnavailable, ReachError, RequestTimeout
from reach.protocol import Envelope, MsgType
from reach.schemas import PayloadLike
from reach.spans import Attr

#: How many times a request that was not delivered (its agent moved) is resent.
MAX_RESENDS = 40


class Courier:
    """Builds and carries envelopes for ``sender`` over a process's link.

    Args:
        link: The process's link.
        sender: The sending agent's (or process's) ID.
        parent: The request being handled, whose trace, hops and deadline what is built here
            inherits (a handler's courier).
        trace_id: A trace for everything built here, when no parent (a task's).
    """

    def __init__(self, link: Link, sender: str, parent: Envelope | None = None,
                 trace_id: str | None = None) -> None:
        self.link = link
        self.sender = sender
        self.parent = parent
        self._trace_id = trace_id

    @property
    def trace_id(self) -> str | None:
        """Trace ID shared by the call chain (None for a driver outside any call)."""
        return self.parent.trace_id if self.parent else self._trace_id

    # -- building ------------------------------------------------------------------------------

    def build_request(self, receiver: str, payload: PayloadLike, schema: str | None = None, *,
                      timeout_ms: int | None = None, session_id: str | None = None,
                      msg_id: str | None = None) -> Envelope:
        """A request from this sender (its deadline never past the parent's).

        Raises:
            LoopDetected: it would close a cycle in the call chain or exceed the hop limit.
            UnknownSchema: ``payload`` is an unregistered model and no ``schema`` is given.
        """
        fields = self._inherited(receiver, session_id=session_id, msg_id=msg_id)
        now = clock.now()
        parent = self.parent
        timeout = child_timeout_ms(parent.deadline if parent else None, now, timeout_ms,
                                   self.link.default_timeout_ms)
        return Envelope.request(self.sender, receiver, payload, schema, timeout_ms=timeout,
                                timestamp=now, **fields)

    def build_notification(self, receiver: str, payload: PayloadLike,
                           schema: str | None = None) -> Envelope:
        """A notification from this sender.

        Raises:
            LoopDetected: it would close a cycle in the call chain or exceed the hop limit.
            UnknownSchema: ``payload`` is an unregistered model and no ``schema`` is given.
        """
        return Envelope.notification(self.sender, receiver, payload, schema,
                                     timestamp=clock.now(), **self._inherited(receiver))

    def _inherited(self, receiver: str, **extra: str | None) -> dict[str, Any]:
        """The fields an envelope built here inherits: the parent's session, trace and hops
        (this sender added), or the courier's trace."""
        fields: dict[str, Any] = {k: v for k, v in extra.items() if v is not None}
        parent = self.parent
        if parent is not None:
            fields.setdefault("session_id", parent.session_id)
            fields.update(trace_id=parent.trace_id, hops=(*parent.hops, self.sender))
            check_hops(fields["hops"], receiver, self.link.max_hops)
        elif self._trace_id is not None:
            fields["trace_id"] = self._trace_id
        return fields

    # -- carrying ------------------------------------------------------------------------------

    async def call(self, env: Envelope, capability: str | None = None, *,
                   fresh: bool = False) -> Envelope:
        """Sends a built request (resending it while its agent moves); returns its reply
        envelope. ``capability``: the capability its receiver was chosen for (its span's);
        ``fresh``: ``env`` was just built for this call and nothing else holds it (a traced
        send then gives it its span's context in place, rather than a copy).

        Raises:
            AgentUnavailable: its agent's host is dead or unreachable, or it moved and was not
                reachable again before the deadline (kept as a dead letter when not routable).
            PoisonMessage: its agent died with it in hands in as many incarnations as the
                deployment allows (``poison_after``), now or before: it is not delivered again.
            RequestTimeout: no reply before the deadline.
            ReachError: the error the receiver answered with, typed.
        """
        started = clock.monotonic()
        outcome = "error"
        tracer = TRACING.tracer
        span = None
        if tracer is not None:
            made = fresh and self.parent is None and self._trace_id is None
            if not (made and dropped_new(env)):  # (a new trace sampled out: no span at all)
                span, env = start_send(tracer, env, capability, self.parent, fresh, made)
        try:
            reply = await self._call_once(env, span)
            outcome = "ok"
            return reply
        except ReachError as exc:
            if span is not None:
                failed(span, exc)
            raise
        finally:
            metrics.count("reach_requests", 1, outcome)
            metrics.observe("reach_request_latency_seconds", clock.monotonic() - started,
                            outcome)
            if span is not None:
                span.end()

    async def _call_once(self, env: Envelope, span: Span | None) -> Envelope:
        link = self.link
        link.inflight[env.receiver] += 1
        try:
            for attempt in range(MAX_RESENDS + 1):
                try:
                    endpoint, epoch = await link.directory.locate(env.receiver, env.deadline)
                except AgentUnavailable as exc:
                    link.directory.dead_letter([env], exc)
                    raise
                pending: Pending | None = None
                try:
                    pending = link.transport.expect(env, endpoint)
                    link.transport.post(endpoint, env)
                    assert pending.future is not None
                    reply: Envelope = await _until(pending.future, env)
                except StaleRoute:
                    # Not delivered (the host no longer has the agent, or is gone before the
                    # envelope left): resolving again and resending is safe. The agent may be
                    # between hosts for a moment (a restart the registry has not heard of yet):
                    # after the first resend, wait a little longer each time, up to the deadline.
                    # Nobody waits for this try's reply any more: drop it before waiting.
                    link.transport.forget(env.msg_id)
                    link.directory.drop(env.receiver)
                    delay = 0.0 if attempt == 0 else poll_delay(attempt - 1, link.rng)
                    left = env.remaining_ms(clock.now())
                    if attempt == MAX_RESENDS or (left is not None and left <= delay * 1000):
                        raise AgentUnavailable(
                            f"agent {env.receiver!r} moved while being called and was not "
                            "reachable again in time",
                            details={"agent_id": env.receiver, "resends": attempt},
                        ) from None
                    event(span, "resend", {Attr.ATTEMPT: attempt + 1,
                                           Attr.REASON: "the agent moved"})
                    await asyncio.sleep(delay)
                    continue
                except AgentUnavailable as exc:
                    link.directory.drop(env.receiver)
                    if pending is not None and pending.lost:
                        # Its agent died with it in hands: the registry says if it is poison.
                        poison = await link.kills.report(env, epoch)
                        if poison is not None:
                            raise poison from exc
                    raise
                finally:
                    link.transport.forget(env.msg_id)
                if reply.msg_type is MsgType.ERROR:
                    raise reply.to_error()
                if env.receiver in link.kills.suspects:  # it died lately with this in hands?
                    link.kills.answered(env, epoch)
                return reply
            raise AssertionError("unreachable")  # pragma: no cover
        finally:
            link.inflight[env.receiver] -= 1

    async def post(self, env: Envelope, *, fresh: bool = False) -> None:
        """Hands over a built notification. One that cannot be handed over, now or after it
        left, is kept as a dead letter with its reason. ``fresh``: as :meth:`call`'s.

        Raises:
            AgentNotFound: no agent has its receiver's ID.
            AgentUnavailable: the receiver is offline, or its host is gone.
        """
        tracer = TRACING.tracer
        made = fresh and self.parent is None and self._trace_id is None
        if tracer is None or (made and dropped_new(env)):  # (a new trace sampled out: no span)
            await self._post(env)
            return
        span, env = start_send(tracer, env, None, self.parent, fresh, made)
        try:
            await self._post(env)
        except ReachError as exc:
            failed(span, exc)
            raise
        finally:
            span.end()

    async def _post(self, env: Envelope) -> None:
        directory = self.link.directory
        try:
            endpoint = await directory.route(env.receiver, clock.now() + NOTIFY_HOLD_S)
        except AgentUnavailable as exc:
            directory.dead_letter([env], exc)
            raise
        try:
            self.link.transport.post(endpoint, env)
        except AgentUnavailable:  # a cached route to a host that is gone: resolve once more
            directory.drop(env.receiver)
            try:
                self.link.transport.post(await directory.route(env.receiver), env)
            except AgentUnavailable as exc:
                directory.dead_letter([env], exc)
                raise

    async def stream(self, env: Envelope, *, fresh: bool = False,
                     ) -> AsyncGenerator[Envelope, None]:
        """Sends a built request for a streamed reply; yields its chunks as they arrive, until
        the stream's end. ``fresh``: as :meth:`call`'s.

        Raises:
            AgentUnavailable: the agent moved or died mid-stream (retry the stream).
            PoisonMessage: the agent died with it in hands too often (see :meth:`call`).
            RequestTimeout: the deadline passed before the stream ended.
            ReachError: an error mid-stream, after the chunks already sent.
        """
        tracer = TRACING.tracer
        span = None
        if tracer is not None:  # not made current: the stream's consumer runs between chunks
            made = fresh and self.parent is None and self._trace_id is None
            if not (made and dropped_new(env)):  # (a new trace sampled out: no span at all)
                span, env = start_send(tracer, env, None, self.parent, fresh, made)
        try:
            async with contextlib.aclosing(self._chunks(env)) as chunks:
                async for chunk in chunks:
                    yield chunk
        except ReachError as exc:
            if span is not None:
                failed(span, exc)
            raise
        finally:
            if span is not None:
                span.end()

    async def _chunks(self, env: Envelope) -> AsyncGenerator[Envelope, None]:
        agent_id = env.receiver
        transport, directory = self.link.transport, self.link.directory
        endpoint, epoch = await directory.locate(agent_id, env.deadline)
        pending = transport.expect(env, endpoint, stream=True)
        assert pending.chunks is not None
        try:
            try:
                transport.post(endpoint, env)
            except StaleRoute:
                directory.drop(agent_id)
                raise AgentUnavailable(f"agent {agent_id!r} moved; retry the stream") from None
            while True:
                item = await _next_chunk(pending.chunks, env)
                if isinstance(item, BaseException):
                    if isinstance(item, StaleRoute):
                        directory.drop(agent_id)
                        raise AgentUnavailable(f"agent {agent_id!r} moved; retry the stream")
                    if isinstance(item, AgentUnavailable) and pending.lost:
                        poison = await self.link.kills.report(env, epoch)
                        if poison is not None:
                            raise poison from item
                    raise item
                if item.msg_type is MsgType.ERROR:
                    raise item.to_error()
                if item.msg_type is MsgType.RESPONSE and item.payload_schema == STREAM_END_SCHEMA:
                    if agent_id in self.link.kills.suspects:
                        self.link.kills.answered(env, epoch)
                    return
                yield item
        finally:
            transport.forget(env.msg_id)


async def _until(future: asyncio.Future[Envelope], env: Envelope) -> Envelope:
    # Only for plain futures (a Task cannot take set_exception): streams use _next_chunk.
    # A timer on the future itself, not asyncio.wait_for: wait_for wraps the future in a task,
    # which costs a loop iteration per reply and splits the next outbox batch.
    left = env.remaining_ms(clock.now())
    if left is None:
        return await future
    timer = asyncio.get_running_loop().call_later(max(left, 0) / 1000, _expire, future)
    try:
        return await future
    except _Expired:
        raise RequestTimeout(
            f"no reply from {env.receiver!r} within {env.timeout_ms} ms",
            suggestion="retry, or give the request a longer timeout",
            details={"agent_id": env.receiver, "timeout_ms": env.timeout_ms},
        ) from None
    finally:
        timer.cancel()


async def _next_chunk(chunks: asyncio.Queue[Envelope | BaseException],
                      env: Envelope) -> Envelope | BaseException:
    left = env.remaining_ms(clock.now())
    try:
        return await asyncio.wait_for(chunks.get(), None if left is None else max(left, 0) / 1000)
    except TimeoutError:
        raise RequestTimeout(
            f"stream from {env.receiver!r} did not end within {env.timeout_ms} ms",
            details={"agent_id": env.receiver, "timeout_ms": env.timeout_ms},
        ) from None


class _Expired(Exception):
    """Set on a pending future when its deadline passes."""


def _expire(future: asyncio.Future[Envelope]) -> None:
    if not future.done():
        future.set_exception(_Expired())


__all__ = ["MAX_RESENDS", "Courier"]
