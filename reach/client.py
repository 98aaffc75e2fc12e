"""Sending: by agent ID, by capability (least loaded first), broadcast, notify, stream.

A :class:`Client` is how a driver talks to agents; a :class:`Context` is the same thing inside a
handler, where requests inherit the trace, extend the hop chain and never outlive the request being
handled. Routing is location-transparent: an agent ID is resolved to its host through the
:class:`Directory`'s cache and the envelope goes straight to that host.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter
from collections.abc import AsyncIterator, Mapping
from typing import Any

from pydantic import BaseModel

from policies.discovery import Candidate, pick_least_loaded
from policies.routing import DEFAULT_MAX_HOPS, check_hops, child_timeout_ms
from reach.directory import NOTIFY_HOLD_S, PICK_FROM, AgentInfo, Directory
from reach.errors import (
    AgentUnavailable,
    ProtocolError,
    ReachError,
    RequestTimeout,
)
from reach.metrics import metrics
from reach.protocol import Envelope, MsgType
from reach.transport import STREAM_END_SCHEMA, StaleRoute, Transport


class Link:
    """What a process needs to talk: its transport, its directory and its local load counts."""

    def __init__(self, transport: Transport, directory: Directory,
                 default_timeout_ms: int = 30_000, max_hops: int = DEFAULT_MAX_HOPS) -> None:
        self.transport = transport
        self.directory = directory
        self.default_timeout_ms = default_timeout_ms
        self.max_hops = max_hops
        self.inflight: Counter[str] = Counter()
        self._rotation = itertools.count()

    def next_tiebreak(self) -> int:
        """A counter that spreads equal-load picks round-robin."""
        return next(self._rotation)


#: How many times a request that was not delivered (its agent moved) is resent.
MAX_RESENDS = 40


class Client:
    """Sends requests and notifications on behalf of ``sender``.

    Args:
        link: The process's link.
        sender: The sending agent's (or driver's) ID.
        parent: The request being handled, for a handler's context.
        trace_id: A trace for every message this client sends (a task's), when no parent.
    """

    def __init__(self, link: Link, sender: str, parent: Envelope | None = None,
                 trace_id: str | None = None) -> None:
        self._link = link
        self.sender = sender
        self.parent = parent
        self._trace_id = trace_id

    @property
    def trace_id(self) -> str | None:
        """Trace ID shared by the call chain (None for a driver outside any call)."""
        return self.parent.trace_id if self.parent else self._trace_id

    def _envelope(self, kind: MsgType, receiver: str, payload: BaseModel | Mapping[str, Any],
                  schema: str | None, timeout_ms: int | None, **extra: Any) -> Envelope:
        parent = self.parent
        fields: dict[str, Any] = {k: v for k, v in extra.items() if v is not None}
        if parent is not None:
            fields.setdefault("session_id", parent.session_id)
            fields.update(trace_id=parent.trace_id, hops=(*parent.hops, self.sender))
            check_hops(fields["hops"], receiver, self._link.max_hops)
        elif self._trace_id is not None:
            fields["trace_id"] = self._trace_id
        if kind is MsgType.NOTIFICATION:
            return Envelope.notification(self.sender, receiver, payload, schema, **fields)
        timeout = child_timeout_ms(parent.deadline if parent else None, time.time(), timeout_ms,
                                   self._link.default_timeout_ms)
        return Envelope.request(self.sender, receiver, payload, schema, timeout_ms=timeout,
                                **fields)

    def make_request(self, agent_id: str, payload: BaseModel | Mapping[str, Any],
                     schema: str | None = None, *, timeout_ms: int | None = None,
                     session_id: str | None = None, msg_id: str | None = None) -> Envelope:
        """Builds (without sending) the request :meth:`request` would send.

        A caller that resends the same envelope (same ``msg_id``) after a failure lets the
        receiver run its handler once (see effectively-once handlers).
        """
        return self._envelope(MsgType.REQUEST, agent_id, payload, schema, timeout_ms,
                              session_id=session_id, msg_id=msg_id)

    async def call(self, env: Envelope) -> Envelope:
        """Sends a request built by :meth:`make_request` and returns its response.

        Raises:
            ReachError: as for :meth:`request`.
        """
        return await self._call(env)

    async def request(self, agent_id: str, payload: BaseModel | Mapping[str, Any],
                      schema: str | None = None, *, timeout_ms: int | None = None,
                      msg_id: str | None = None) -> Envelope:
        """Sends a request to one agent by ID and returns its response envelope.

        ``msg_id`` names the request; give the same one to a retry of the same request.

        Raises:
            AgentNotFound: no agent has that ID.
            AgentUnavailable: its host is dead or unreachable (retryable).
            RequestTimeout: no reply before the deadline (retryable).
            LoopDetected: the call would close a cycle or exceed the hop limit.
            ReachError: the handler's error, typed, with its severity.
        """
        env = self._envelope(MsgType.REQUEST, agent_id, payload, schema, timeout_ms,
                             msg_id=msg_id)
        return await self._call(env)

    async def _call(self, env: Envelope) -> Envelope:
        started = time.perf_counter()
        outcome = "error"
        try:
            reply = await self._call_once(env)
            outcome = "ok"
            return reply
        finally:
            metrics.observe("reach_request_latency_seconds", time.perf_counter() - started,
                            outcome=outcome)

    async def _call_once(self, env: Envelope) -> Envelope:
        link = self._link
        link.inflight[env.receiver] += 1
        try:
            for attempt in range(MAX_RESENDS + 1):
                try:
                    endpoint = await link.directory.route(env.receiver, env.deadline)
                except AgentUnavailable as exc:
                    self._dead_letter(env, exc)
                    raise
                try:
                    pending = link.transport.expect(env, endpoint)
                    link.transport.post(endpoint, env)
                    assert pending.future is not None
                    reply = await _until(pending.future, env)
                except StaleRoute:
                    # Not delivered (the host no longer has the agent, or is gone before the
                    # envelope left): resolving again and resending is safe. The agent may be
                    # between hosts for a moment (a restart the registry has not heard of yet):
                    # after the first resend, wait a little longer each time, up to the deadline.
                    link.directory.drop(env.receiver)
                    delay = 0.0 if attempt == 0 else min(0.02 * 2 ** (attempt - 1), 0.25)
                    left = env.remaining_ms(time.time())
                    if attempt == MAX_RESENDS or (left is not None and left <= delay * 1000):
                        raise AgentUnavailable(
                            f"agent {env.receiver!r} moved while being called and was not "
                            "reachable again in time",
                            details={"agent_id": env.receiver, "resends": attempt},
                        ) from None
                    await asyncio.sleep(delay)
                    continue
                except AgentUnavailable:
                    link.directory.drop(env.receiver)
                    raise
                finally:
                    link.transport.forget(env.msg_id)
                if reply.msg_type is MsgType.ERROR:
                    raise reply.to_error()
                result: Envelope = reply
                return result
            raise AssertionError("unreachable")  # pragma: no cover
        finally:
            link.inflight[env.receiver] -= 1

    async def ask(self, capability: str, payload: BaseModel | Mapping[str, Any],
                  schema: str | None = None, *, text: str | None = None,
                  timeout_ms: int | None = None) -> Envelope:
        """Sends a request to the least-loaded online holder of a capability.

        Raises:
            NoCapableAgent: nobody online holds the capability (names the closest tags).
            ReachError: as for :meth:`request`.
        """
        holders = await self._link.directory.holders(capability, text)
        (picked,) = _pick(self._link, holders, 1)
        return await self.request(picked.agent_id, payload, schema, timeout_ms=timeout_ms)

    def _dead_letter(self, env: Envelope, error: ReachError) -> None:
        self._link.directory.dead_letter([env], error)

    async def request_capability(
        self, capability: str, payload: BaseModel | Mapping[str, Any], schema: str | None = None,
        *, fanout_limit: int = 1, text: str | None = None, timeout_ms: int | None = None,
    ) -> list[Envelope | ReachError]:
        """Sends a request to the ``fanout_limit`` least-loaded online holders of a capability.

        Returns the replies in the order of the agents picked; a failed agent's place holds its
        typed error (use :meth:`ask` for one agent, with its error raised).

        Raises:
            NoCapableAgent: nobody online holds the capability (names the closest tags).
        """
        holders = await self._link.directory.holders(capability, text,
                                                     max(PICK_FROM, fanout_limit))
        picked = _pick(self._link, holders, fanout_limit)
        return await self._gather(picked, payload, schema, timeout_ms)

    async def broadcast(self, capability: str, payload: BaseModel | Mapping[str, Any],
                        schema: str | None = None, *, timeout_ms: int | None = None,
                        ) -> list[Envelope | ReachError]:
        """Sends a request to every online holder of a capability; gathers replies and errors.

        Raises:
            NoCapableAgent: nobody online holds the capability.
        """
        holders = await self._link.directory.holders(capability, limit=None)
        return await self._gather(holders, payload, schema, timeout_ms)

    async def _gather(self, agents: list[AgentInfo], payload: BaseModel | Mapping[str, Any],
                      schema: str | None, timeout_ms: int | None) -> list[Envelope | ReachError]:
        calls = [self.request(a.agent_id, payload, schema, timeout_ms=timeout_ms) for a in agents]
        results = await asyncio.gather(*calls, return_exceptions=True)
        out: list[Envelope | ReachError] = []
        for res in results:
            if isinstance(res, BaseException) and not isinstance(res, ReachError):
                raise res
            out.append(res)
        return out

    async def notify(self, agent_id: str, payload: BaseModel | Mapping[str, Any],
                     schema: str | None = None) -> None:
        """Sends a notification (no reply) to one agent by ID.

        A notification that cannot be handed over, now or after it left, is kept as a dead
        letter with its reason.

        Raises:
            AgentNotFound: no agent has that ID.
            AgentUnavailable: it is offline, or its host is gone.
        """
        env = self._envelope(MsgType.NOTIFICATION, agent_id, payload, schema, None)
        try:
            endpoint = await self._link.directory.route(agent_id, time.time() + NOTIFY_HOLD_S)
        except AgentUnavailable as exc:
            self._dead_letter(env, exc)
            raise
        try:
            self._link.transport.post(endpoint, env)
        except AgentUnavailable:  # a cached route to a host that is gone: resolve once more
            self._link.directory.drop(agent_id)
            try:
                self._link.transport.post(await self._link.directory.route(agent_id), env)
            except AgentUnavailable as exc:
                self._dead_letter(env, exc)
                raise

    async def stream(self, agent_id: str, payload: BaseModel | Mapping[str, Any],
                     schema: str | None = None, *, timeout_ms: int | None = None,
                     ) -> AsyncIterator[Envelope]:
        """Requests a streamed reply and yields its chunks as they arrive.

        Raises:
            RequestTimeout: the deadline passed before the stream ended.
            ReachError: an error mid-stream, after the chunks already sent.
        """
        env = self._envelope(MsgType.REQUEST, agent_id, payload, schema, timeout_ms)
        transport = self._link.transport
        endpoint = await self._link.directory.route(agent_id, env.deadline)
        pending = transport.expect(env, endpoint, stream=True)
        assert pending.chunks is not None
        try:
            try:
                transport.post(endpoint, env)
            except StaleRoute:
                self._link.directory.drop(agent_id)
                raise AgentUnavailable(f"agent {agent_id!r} moved; retry the stream") from None
            while True:
                item = await _next_chunk(pending.chunks, env)
                if isinstance(item, BaseException):
                    if isinstance(item, StaleRoute):
                        self._link.directory.drop(agent_id)
                        raise AgentUnavailable(f"agent {agent_id!r} moved; retry the stream")
                    raise item
                if item.msg_type is MsgType.ERROR:
                    raise item.to_error()
                if item.msg_type is MsgType.RESPONSE and item.payload_schema == STREAM_END_SCHEMA:
                    return
                yield item
        finally:
            transport.forget(env.msg_id)

    async def discover(self, capability: str, text: str | None = None) -> list[AgentInfo]:
        """Online holders of a capability, best first.

        Raises:
            NoCapableAgent: nobody online holds it.
        """
        return list(await self._link.directory.holders(capability, text, limit=None))


class Context(Client):
    """A handler's view of the request it handles, and its way to call other agents."""

    parent: Envelope

    def __init__(self, link: Link, agent_id: str, request: Envelope) -> None:
        super().__init__(link, agent_id, request)

    @property
    def agent_id(self) -> str:
        """ID of the agent handling the request."""
        return self.sender

    @property
    def request_envelope(self) -> Envelope:
        """The envelope being handled."""
        return self.parent

    @property
    def deadline(self) -> float | None:
        """Deadline of the request being handled (epoch seconds)."""
        return self.parent.deadline

    def remaining_ms(self) -> float | None:
        """Milliseconds left before the deadline (None for a notification)."""
        return self.parent.remaining_ms(time.time())

    @property
    def session(self) -> Any:
        """The :class:`~reach.sessions.Session` the request belongs to, or None."""
        if self.parent.session_id is None:
            return None
        from reach.sessions import Session

        return Session(self.parent.session_id, {})


def _pick(link: Link, holders: list[AgentInfo], k: int) -> list[AgentInfo]:
    if k < 1:
        raise ProtocolError(f"fanout_limit must be at least 1, got {k}")
    by_id = {h.agent_id: h for h in holders}
    cands = [Candidate(h.agent_id, h.capabilities, h.description, True, h.load) for h in holders]
    chosen = pick_least_loaded(cands, k, local_load=link.inflight, tiebreak=link.next_tiebreak())
    return [by_id[c.agent_id] for c in chosen]


async def _until(future: asyncio.Future[Any], env: Envelope) -> Any:
    # Only for plain futures (a Task cannot take set_exception): streams use _next_chunk.
    # A timer on the future itself, not asyncio.wait_for: wait_for wraps the future in a task,
    # which costs a loop iteration per reply and splits the next outbox batch.
    left = env.remaining_ms(time.time())
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


async def _next_chunk(chunks: asyncio.Queue[Any], env: Envelope) -> Any:
    left = env.remaining_ms(time.time())
    try:
        return await asyncio.wait_for(chunks.get(), None if left is None else max(left, 0) / 1000)
    except TimeoutError:
        raise RequestTimeout(
            f"stream from {env.receiver!r} did not end within {env.timeout_ms} ms",
            details={"agent_id": env.receiver, "timeout_ms": env.timeout_ms},
        ) from None


class _Expired(Exception):
    """Set on a pending future when its deadline passes."""


def _expire(future: asyncio.Future[Any]) -> None:
    if not future.done():
        future.set_exception(_Expired())
