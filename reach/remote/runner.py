"""One remote agent inside its RemoteHost (:mod:`reach.remote.host`): what it declared, its
bounded queue, the requests it has taken and not answered, and its current connection."""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from policies.routing import check_hops
from policies.sessions import PendingAction, recover
from reach import clock
from reach._runtime.runner import ReplySink, refuse
from reach.errors import AgentUnavailable, ReachError, RequestTimeout
from reach.protocol import Envelope, MsgType
from reach.remote.wire import Declaration, envelope_json
from reach.sessions import CANCEL_SCHEMA

#: Envelopes one ``take`` hands over at most (one frame).
TAKE_MAX = 256


@dataclass(frozen=True)
class RemoteAgent:
    """What a remote agent declared: it stands where a host's Agent instance would."""

    id: str
    capabilities: tuple[str, ...]
    description: str
    declaration: Declaration


@dataclass
class _Asked:
    """A request handed to a remote agent and not answered yet: where its reply goes."""

    reply_to: str
    env: Envelope
    taken: bool = False


@dataclass
class RemoteRunner:
    """One remote agent in its host: its queue, its open requests, its current connection."""

    agent: RemoteAgent
    limit: int
    max_hops: int
    conn: str | None = None
    # Invariant: every request in the queue has an entry in asked (not taken).
    queue: deque[tuple[float | None, dict[str, Any]]] = field(default_factory=deque)
    asked: dict[str, _Asked] = field(default_factory=dict)
    # Set when there is something to take (shared by the host's runners: one poll takes all).
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    grace: asyncio.TimerHandle | None = None
    post: Any = None  # the host's reply path: (endpoint, envelope) -> None
    audit: Any = None  # the host's audit of a handled call, or None

    @property
    def inflight(self) -> int:
        """Requests it holds (queued or taken), the load its host heartbeats."""
        return len(self.asked)

    def deliver(self, env: Envelope, sink: ReplySink) -> None:
        """Queues an envelope for the agent; refusals are answered at once through ``sink``."""
        try:
            check_hops(env.hops, self.agent.id, self.max_hops)
            left = env.remaining_ms(clock.now())
            if left is not None and left <= 0:
                raise RequestTimeout(f"request reached {self.agent.id!r} after its deadline",
                                     details={"agent_id": self.agent.id})
            if len(self.queue) >= self.limit:
                raise AgentUnavailable(
                    f"remote agent {self.agent.id!r} has {len(self.queue)} envelopes queued "
                    "(its connection is slow or down)",
                    suggestion="retry later, or on another holder of the capability",
                    details={"agent_id": self.agent.id, "reason": "queue_full",
                             "limit": self.limit})
            item = envelope_json(env)
        except ReachError as exc:
            self._refuse(env, sink.send, exc)
            return
        if env.msg_type is MsgType.REQUEST:
            self.asked[env.msg_id] = _Asked(sink.reply_to, env)
        self.queue.append((env.deadline, item))
        self.wake.set()

    def _refuse(self, env: Envelope, send: Any, exc: ReachError) -> None:
        refuse(env, send, exc, self.agent.id, self.audit)

    def take(self) -> list[dict[str, Any]]:
        """Removes and returns what is queued (up to a frame's worth), dropping requests whose
        deadline passed while they waited (their callers have timed out)."""
        now = clock.now()
        out: list[dict[str, Any]] = []
        while self.queue and len(out) < TAKE_MAX:
            deadline, item = self.queue.popleft()
            asked = self.asked.get(item["msg_id"])
            if deadline is not None and deadline <= now:
                self.asked.pop(item["msg_id"], None)
                continue
            if asked is not None:
                asked.taken = True
            out.append(item)
        return out

    def answer(self, request_id: str, final: bool) -> _Asked | None:
        """The open request a reply answers (forgotten once ``final``)."""
        return self.asked.pop(request_id, None) if final else self.asked.get(request_id)

    def fail(self, asked: list[_Asked], error: ReachError) -> None:
        """Answers requests with an error, as the agent would have."""
        for item in asked:
            self.asked.pop(item.env.msg_id, None)
            if self.audit is not None:
                self.audit(item.env, f"error: {error.code}")
            self.post(item.reply_to, item.env.fail(error, sender=self.agent.id))

    def restart(self, policy: PendingAction) -> None:
        """A reconnect: the requests it had taken are queued again, or failed, per ``policy``."""
        taken = [a for a in self.asked.values() if a.taken]
        now = clock.now()
        resend = [a for a in taken if recover(policy, a.env.deadline, now)
                  is PendingAction.RESEND]
        self.fail([a for a in taken if a not in resend], AgentUnavailable(
            f"remote agent {self.agent.id!r} reconnected and cancelled the request",
            suggestion="retry the request", details={"agent_id": self.agent.id}))
        for item in reversed(resend):
            item.taken = False
            self.queue.appendleft((item.env.deadline, envelope_json(item.env)))
        if self.queue:
            self.wake.set()

    def hand_over(self) -> list[list[Any]]:
        """Gives up what it holds for another host: ``[reply_to, taken, envelope]`` for each
        open request (taken ones first) and ``[None, False, envelope]`` for each other envelope
        queued, in order; holds nothing after."""
        handed: list[list[Any]] = [[a.reply_to, True, envelope_json(a.env)]
                                   for a in self.asked.values() if a.taken]
        for _, item in self.queue:
            asked = self.asked.get(item["msg_id"])
            handed.append([None if asked is None else asked.reply_to, False, item])
        self.asked.clear()
        self.queue.clear()
        if self.grace is not None:
            self.grace.cancel()
        return handed

    def adopt(self, handed: list[list[Any]], policy: PendingAction) -> None:
        """Takes what another host handed over (see :meth:`hand_over`); the requests the agent
        had taken there are sent again or failed per ``policy``, as on any reconnect."""
        for reply_to, taken, item in handed:
            env = Envelope.parse(item)
            if reply_to is not None:
                self.asked[env.msg_id] = _Asked(reply_to, env, taken=bool(taken))
            if not taken:
                self.queue.append((env.deadline, item))
        self.restart(policy)

    def cancel(self, why: ReachError, trace_id: str | None = None,
               request_id: str | None = None) -> int:
        """Fails the open requests of a trace (or one request, or all) with ``why``, and tells
        the agent (a ``reach.cancel@1.0`` notification for each it had taken)."""
        hit = [a for a in self.asked.values()
               if (trace_id is None or a.env.trace_id == trace_id)
               and (request_id is None or a.env.msg_id == request_id)]
        ids = {a.env.msg_id for a in hit}
        self.queue = deque(q for q in self.queue if q[1]["msg_id"] not in ids)
        for item in hit:
            if item.taken:
                notice = Envelope.notification(
                    item.env.sender, self.agent.id, {"request_id": item.env.msg_id,
                                                     "reason": why.message}, CANCEL_SCHEMA,
                    trace_id=item.env.trace_id)
                self.queue.append((None, envelope_json(notice)))
                self.wake.set()
        self.fail(hit, why)
        return len(hit)

    async def stop(self, timeout_s: float) -> None:
        """Ends the agent here: every open request fails (retryable), the connection ends."""
        self.fail(list(self.asked.values()), AgentUnavailable(
            f"remote agent {self.agent.id!r} left", suggestion="retry on another holder",
            details={"agent_id": self.agent.id}))
        self.queue.clear()
        self.end_connection()
        if self.grace is not None:
            self.grace.cancel()

    def end_connection(self) -> None:
        """Forgets the current connection (its ``take`` returns None)."""
        self.conn = None
        self.wake.set()
