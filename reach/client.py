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
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from policies.discovery import Candidate, pick_least_loaded
from policies.routing import DEFAULT_MAX_HOPS, check_hops, child_timeout_ms
from reach.errors import (
    AgentNotFound,
    AgentUnavailable,
    NoCapableAgent,
    ProtocolError,
    ReachError,
    RequestTimeout,
)
from reach.protocol import Envelope, MsgType
from reach.transport import STREAM_END_SCHEMA, StaleRoute, Transport

#: How long a resolved agent ID stays cached (seconds).
ROUTE_TTL_S = 30.0
#: How long a capability's holder list stays cached (seconds); loads are refreshed this often.
HOLDERS_TTL_S = 1.0
#: How many of the best holders a pick considers (broadcast asks for all of them).
PICK_FROM = 64
#: First interval at which a held message polls for its restarting agent (doubles to 0.25 s).
HOLD_POLL_S = 0.02
#: How long a notification waits for a restarting agent before it becomes a dead letter.
NOTIFY_HOLD_S = 5.0


@dataclass(frozen=True)
class AgentInfo:
    """What the registry knows of an agent.

    Attributes:
        agent_id: The agent's ID.
        capabilities: Its capability tags.
        description: Its natural-language self-description.
        host: Name of the host actor it lives in.
        node: ID of the Ray node of that host.
        status: ``online``, ``busy`` or ``offline``.
        load: Requests in flight, as last heartbeat.
        epoch: Incarnation number, larger after each restart.
    """

    agent_id: str
    capabilities: tuple[str, ...]
    description: str
    host: str
    node: str
    status: str
    load: int
    epoch: int

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> AgentInfo:
        """Builds an AgentInfo from a registry record."""
        return cls(
            rec["agent_id"], tuple(rec["capabilities"]), rec["description"], rec["host"],
            rec["node"], rec["status"], rec["load"], rec["epoch"],
        )


class Directory:
    """Per-process cache of routes (agent ID -> host) and capability holders, fed by the registry.

    Args:
        registry: Handle of the Registry actor.
        clock: Monotonic clock, injectable for tests.
    """

    def __init__(self, registry: Any, clock: Any = time.monotonic) -> None:
        self.registry = registry
        self._clock = clock
        self._routes: dict[str, tuple[str, float]] = {}
        self._holders: dict[tuple[str, str | None, int | None],
                            tuple[list[AgentInfo], list[str], float]] = {}
        self.lookups = 0

    async def route(self, agent_id: str, deadline: float | None = None) -> str:
        """The host endpoint of ``agent_id``; while it restarts, waits for it (until ``deadline``).

        Raises:
            AgentNotFound: the registry has no such agent.
            AgentUnavailable: the agent is offline, or still restarting when waiting longer would
                pass ``deadline`` (epoch seconds).
        """
        hit = self._routes.get(agent_id)
        now = self._clock()
        if hit is not None and hit[1] > now:
            return hit[0]
        rec = await self._lookup_settled(agent_id, deadline)
        if rec is None:
            raise AgentNotFound(
                f"no agent {agent_id!r} is registered",
                suggestion="check the ID, or discover agents by capability",
                details={"agent_id": agent_id},
            )
        if rec["status"] == "recovering":
            raise AgentUnavailable(
                f"agent {agent_id!r} is not re-registered yet: the registry restarted and is "
                "rebuilding its table from the hosts' heartbeats",
                suggestion="retry within a heartbeat interval",
                details={"agent_id": agent_id},
            )
        if rec["status"] == "offline":
            raise AgentUnavailable(
                f"agent {agent_id!r} is offline (host {rec['host']} missed its heartbeats)",
                details={"agent_id": agent_id, "host": rec["host"]},
            )
        self._routes[agent_id] = (rec["host"], self._clock() + ROUTE_TTL_S)
        return str(rec["host"])

    async def _lookup_settled(self, agent_id: str, deadline: float | None) -> Any:
        """Looks an agent up, holding while its supervisor restarts it."""
        delay = HOLD_POLL_S
        while True:
            self.lookups += 1
            rec = await self.registry.lookup.remote(agent_id)
            if rec is None or rec["status"] != "restarting":
                return rec
            if deadline is None or time.time() + delay >= deadline:
                raise AgentUnavailable(
                    f"agent {agent_id!r} is restarting and is not back before the request's "
                    "deadline",
                    suggestion="retry later, or give the request a longer timeout",
                    details={"agent_id": agent_id, "restarting": True},
                )
            await asyncio.sleep(delay)  # poll: the registry does not push
            delay = min(delay * 2, 0.25)

    def dead_letter(self, envelopes: list[Envelope], error: ReachError) -> None:
        """Records envelopes that could not be delivered, and why (fire and forget)."""
        letters = [{"msg_id": e.msg_id, "msg_type": e.msg_type.value, "sender": e.sender,
                    "receiver": e.receiver, "trace_id": e.trace_id, "code": error.code,
                    "reason": error.message, "at": time.time()} for e in envelopes]
        if letters:
            self.registry.dead_letter.remote(letters)

    def learn(self, info: AgentInfo) -> None:
        """Caches a route found by discovery (of an online agent only)."""
        if info.status == "online":
            self._routes[info.agent_id] = (info.host, self._clock() + ROUTE_TTL_S)

    def drop(self, agent_id: str) -> None:
        """Forgets the route of one agent (its host did not have it)."""
        self._routes.pop(agent_id, None)

    def drop_endpoint(self, endpoint: str) -> None:
        """Forgets every route and holder list through a dead host."""
        for agent_id in [a for a, (host, _) in self._routes.items() if host == endpoint]:
            del self._routes[agent_id]
        self._holders.clear()

    async def holders(self, capability: str, text: str | None = None,
                      limit: int | None = PICK_FROM) -> list[AgentInfo]:
        """The ``limit`` best online holders of ``capability`` (cached for HOLDERS_TTL_S).

        Raises:
            NoCapableAgent: nobody online holds it; the error names the closest tags.
        """
        key = (capability, text, limit)
        now = self._clock()
        hit = self._holders.get(key)
        if hit is None or hit[2] <= now:
            records, close = await self.registry.discover.remote(capability, text, limit)
            infos = [AgentInfo.from_record(r) for r in records]
            hit = self._holders[key] = (infos, close, now + HOLDERS_TTL_S)
            for info in infos:
                self.learn(info)
        infos, close, _ = hit
        if not infos:
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise NoCapableAgent(
                f"no online agent holds capability {capability!r}{hint}",
                suggestion="spawn an agent with that capability, or check the tag",
                details={"capability": capability, "close_matches": ", ".join(close)},
            )
        return infos


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
        link = self._link
        link.inflight[env.receiver] += 1
        try:
            for attempt in range(2):
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
                    # envelope left): resolving again and resending is safe.
                    link.directory.drop(env.receiver)
                    if attempt:
                        raise AgentUnavailable(
                            f"agent {env.receiver!r} moved twice while being called",
                            details={"agent_id": env.receiver},
                        ) from None
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
        transport.post(endpoint, env)
        assert pending.chunks is not None
        try:
            while True:
                item = await _until(asyncio.ensure_future(pending.chunks.get()), env)
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


class _Expired(Exception):
    """Set on a pending future when its deadline passes."""


def _expire(future: asyncio.Future[Any]) -> None:
    if not future.done():
        future.set_exception(_Expired())
