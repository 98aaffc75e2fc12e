"""Sending: to one agent by ID, to holders of a capability, broadcast, notify, stream.

A :class:`Client` is how a driver talks to agents; a :class:`~reach.context.Context` is the same
thing inside a handler, where requests inherit the trace, extend the hop chain and never outlive
the request being handled. Routing is location-transparent: an agent ID is resolved to its host
through the directory's cache (:mod:`reach._runtime.directory`) and the envelope goes straight to
that host. Every reply arrives as a :class:`Reply`: the typed model the handler returned (known from
the schema registry), with the envelope at hand for its headers.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections import Counter
from collections.abc import AsyncIterator, Mapping
from typing import Any, TypeVar, overload

from pydantic import BaseModel

from policies.backoff import poll_delay
from policies.discovery import pick_least_loaded
from policies.routing import DEFAULT_MAX_HOPS, check_hops, child_timeout_ms
from reach import clock
from reach._runtime.directory import NOTIFY_HOLD_S, PICK_FROM, Directory
from reach._runtime.metrics import metrics
from reach._runtime.store import StoreClient
from reach._runtime.transport import STREAM_END_SCHEMA, StaleRoute, Transport
from reach.errors import AgentUnavailable, ProtocolError, ReachError, RequestTimeout
from reach.ports.cluster import Cluster
from reach.ports.hosts import CallLimits
from reach.protocol import Envelope, MsgType
from reach.records import AgentRecord
from reach.replies import Reply, read_reply

M = TypeVar("M", bound=BaseModel)

Payload = BaseModel | Mapping[str, Any]


class Link:
    """What a process needs to talk: the cluster, its transport and directory, its local loads,
    and its way to the session store.

    Args:
        cluster: Where the processes are.
        transport: This process's transport.
        directory: This process's directory.
        limits: Hop limit and default timeout.
        rng: Random generator for the jitter of resends (seeded in tests).
    """

    def __init__(self, cluster: Cluster, transport: Transport, directory: Directory,
                 limits: CallLimits | None = None, rng: random.Random | None = None) -> None:
        self.cluster = cluster
        self.transport = transport
        self.directory = directory
        self.limits = limits or CallLimits()
        self.rng = rng or random.Random()
        self.inflight: Counter[str] = Counter()
        self._rotation = itertools.count()
        self.store = StoreClient(cluster)

    @property
    def max_hops(self) -> int:
        """Longest call chain accepted."""
        return self.limits.max_hops

    @property
    def default_timeout_ms(self) -> int:
        """Timeout of requests that give none."""
        return self.limits.default_timeout_ms

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

    # -- building ------------------------------------------------------------------------------

    def _envelope(self, kind: MsgType, receiver: str, payload: Payload, schema: str | None,
                  timeout_ms: int | None, **extra: Any) -> Envelope:
        parent = self.parent
        fields: dict[str, Any] = {k: v for k, v in extra.items() if v is not None}
        if parent is not None:
            fields.setdefault("session_id", parent.session_id)
            fields.update(trace_id=parent.trace_id, hops=(*parent.hops, self.sender))
            check_hops(fields["hops"], receiver, self._link.max_hops)
        elif self._trace_id is not None:
            fields["trace_id"] = self._trace_id
        now = clock.now()
        if kind is MsgType.NOTIFICATION:
            return Envelope.notification(self.sender, receiver, payload, schema, timestamp=now,
                                         **fields)
        timeout = child_timeout_ms(parent.deadline if parent else None, now, timeout_ms,
                                   self._link.default_timeout_ms)
        return Envelope.request(self.sender, receiver, payload, schema, timeout_ms=timeout,
                                timestamp=now, **fields)

    def _request_envelope(self, agent_id: str, payload: Payload, schema: str | None = None, *,
                          timeout_ms: int | None = None, session_id: str | None = None,
                          msg_id: str | None = None) -> Envelope:
        """The request :meth:`request` would send (sessions record it before sending it)."""
        return self._envelope(MsgType.REQUEST, agent_id, payload, schema, timeout_ms,
                              session_id=session_id, msg_id=msg_id)

    # -- by ID ---------------------------------------------------------------------------------

    @overload
    async def request(self, agent_id: str, payload: Payload, schema: str | None = None, *,
                      returns: type[M], timeout_ms: int | None = None,
                      msg_id: str | None = None) -> Reply[M]: ...

    @overload
    async def request(self, agent_id: str, payload: Payload, schema: str | None = None, *,
                      returns: None = None, timeout_ms: int | None = None,
                      msg_id: str | None = None) -> Reply[Any]: ...

    async def request(self, agent_id: str, payload: Payload, schema: str | None = None, *,
                      returns: type[BaseModel] | None = None, timeout_ms: int | None = None,
                      msg_id: str | None = None) -> Reply[Any]:
        """Sends a request to one agent by ID and returns its reply.

        Args:
            agent_id: The agent.
            payload: A registered model, or a mapping with ``schema``.
            schema: The payload's ``name@MAJOR.MINOR`` (for a mapping).
            returns: The model to read the reply as (default: the one registered for the
                reply's schema).
            timeout_ms: The request's budget (default: the runtime's, never past a parent's).
            msg_id: The request's ID; give the same one to a retry of the same request (an
                effectively-once handler then answers it once).

        Raises:
            AgentNotFound: no agent has that ID.
            AgentUnavailable: its host is dead or unreachable, or it is restarting past the
                deadline (retryable).
            RequestTimeout: no reply before the deadline (retryable).
            LoopDetected: the call would close a cycle or exceed the hop limit.
            InvalidPayload: the reply does not validate as ``returns``.
            ReachError: the handler's error, typed, with its severity.
        """
        env = self._request_envelope(agent_id, payload, schema, timeout_ms=timeout_ms,
                                     msg_id=msg_id)
        return read_reply(await self._send(env), returns)

    async def _send(self, env: Envelope) -> Envelope:
        """Sends a built request (resending it while its agent moves); its reply envelope."""
        started = clock.monotonic()
        outcome = "error"
        try:
            reply = await self._send_once(env)
            outcome = "ok"
            return reply
        finally:
            metrics.observe("reach_request_latency_seconds", clock.monotonic() - started,
                            outcome=outcome)

    async def _send_once(self, env: Envelope) -> Envelope:
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
                    await asyncio.sleep(delay)
                    continue
                except AgentUnavailable:
                    link.directory.drop(env.receiver)
                    raise
                finally:
                    link.transport.forget(env.msg_id)
                if reply.msg_type is MsgType.ERROR:
                    raise reply.to_error()
                return reply
            raise AssertionError("unreachable")  # pragma: no cover
        finally:
            link.inflight[env.receiver] -= 1

    def _dead_letter(self, env: Envelope, error: ReachError) -> None:
        self._link.directory.dead_letter([env], error)

    # -- by capability -------------------------------------------------------------------------

    @overload
    async def request_capability(self, capability: str, payload: Payload,
                                 schema: str | None = None, *, returns: type[M],
                                 text: str | None = None, timeout_ms: int | None = None,
                                 ) -> Reply[M]: ...

    @overload
    async def request_capability(self, capability: str, payload: Payload,
                                 schema: str | None = None, *, returns: None = None,
                                 text: str | None = None, timeout_ms: int | None = None,
                                 ) -> Reply[Any]: ...

    async def request_capability(self, capability: str, payload: Payload,
                                 schema: str | None = None, *,
                                 returns: type[BaseModel] | None = None, text: str | None = None,
                                 timeout_ms: int | None = None) -> Reply[Any]:
        """Sends a request to the least-loaded online holder of a capability.

        Args:
            capability: A tag (``order.query``), a parent tag (``order``) or a separator
                variant (``order_query``).
            text: Words that rank holders by their descriptions.

        Raises:
            NoCapableAgent: nobody online holds the capability (names the closest tags).
            ReachError: as for :meth:`request`.
        """
        holders = await self._link.directory.holders(capability, text)
        (picked,) = _pick(self._link, holders, 1)
        return await self.request(picked.agent_id, payload, schema, returns=returns,
                                  timeout_ms=timeout_ms)

    async def fanout(self, capability: str, payload: Payload, schema: str | None = None, *,
                     fanout_limit: int, returns: type[BaseModel] | None = None,
                     text: str | None = None, timeout_ms: int | None = None,
                     ) -> list[Reply[Any] | ReachError]:
        """Sends a request to the ``fanout_limit`` least-loaded online holders of a capability.

        Returns the replies in the order of the agents picked; a failed agent's place holds its
        typed error.

        Raises:
            ProtocolError: ``fanout_limit`` is below 1.
            NoCapableAgent: nobody online holds the capability (names the closest tags).
        """
        holders = await self._link.directory.holders(capability, text,
                                                     max(PICK_FROM, fanout_limit))
        picked = _pick(self._link, holders, fanout_limit)
        return await self._gather(picked, payload, schema, returns, timeout_ms)

    async def broadcast(self, capability: str, payload: Payload, schema: str | None = None, *,
                        returns: type[BaseModel] | None = None, timeout_ms: int | None = None,
                        ) -> list[Reply[Any] | ReachError]:
        """Sends a request to every online holder of a capability; gathers replies and errors.

        Raises:
            NoCapableAgent: nobody online holds the capability.
        """
        holders = await self._link.directory.holders(capability, limit=None)
        return await self._gather(holders, payload, schema, returns, timeout_ms)

    async def _gather(self, agents: list[AgentRecord], payload: Payload, schema: str | None,
                      returns: type[BaseModel] | None, timeout_ms: int | None,
                      ) -> list[Reply[Any] | ReachError]:
        calls = [self.request(a.agent_id, payload, schema, returns=returns,
                              timeout_ms=timeout_ms) for a in agents]
        results = await asyncio.gather(*calls, return_exceptions=True)
        out: list[Reply[Any] | ReachError] = []
        for res in results:
            if isinstance(res, BaseException) and not isinstance(res, ReachError):
                raise res
            out.append(res)
        return out

    async def discover(self, capability: str, text: str | None = None) -> list[AgentRecord]:
        """Online holders of a capability, best first.

        Raises:
            NoCapableAgent: nobody online holds it.
        """
        return list(await self._link.directory.holders(capability, text, limit=None))

    # -- one way, and streams ------------------------------------------------------------------

    async def notify(self, agent_id: str, payload: Payload, schema: str | None = None) -> None:
        """Sends a notification (no reply) to one agent by ID.

        A notification that cannot be handed over, now or after it left, is kept as a dead
        letter with its reason.

        Raises:
            AgentNotFound: no agent has that ID.
            AgentUnavailable: it is offline, or its host is gone.
        """
        env = self._envelope(MsgType.NOTIFICATION, agent_id, payload, schema, None)
        directory = self._link.directory
        try:
            endpoint = await directory.route(agent_id, clock.now() + NOTIFY_HOLD_S)
        except AgentUnavailable as exc:
            self._dead_letter(env, exc)
            raise
        try:
            self._link.transport.post(endpoint, env)
        except AgentUnavailable:  # a cached route to a host that is gone: resolve once more
            directory.drop(agent_id)
            try:
                self._link.transport.post(await directory.route(agent_id), env)
            except AgentUnavailable as exc:
                self._dead_letter(env, exc)
                raise

    async def stream(self, agent_id: str, payload: Payload, schema: str | None = None, *,
                     returns: type[BaseModel] | None = None, timeout_ms: int | None = None,
                     ) -> AsyncIterator[Reply[Any]]:
        """Requests a streamed reply and yields its chunks as they arrive.

        Raises:
            AgentUnavailable: the agent moved or died mid-stream (retry the stream).
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
                yield read_reply(item, returns)
        finally:
            transport.forget(env.msg_id)


def _pick(link: Link, holders: list[AgentRecord], k: int) -> list[AgentRecord]:
    if k < 1:
        raise ProtocolError(f"fanout_limit must be at least 1, got {k}")
    return pick_least_loaded(holders, k, local_load=link.inflight, tiebreak=link.next_tiebreak())


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


__all__ = ["DEFAULT_MAX_HOPS", "Client", "Link", "Payload"]
