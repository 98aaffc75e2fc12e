"""Where agents are: a per-process cache of routes and capability holders, fed by the registry.

The registry is never in the message path: a client resolves an agent ID to its host here (cached
for ROUTE_TTL_S, dropped at once when the host is found dead or no longer holds the agent), and
a capability to its best holders (cached for HOLDERS_TTL_S, so loads stay fresh). Concurrent
misses of one key share one registry call, and an expired holder list is served while its
refresh runs, so that no request waits on the registry once a capability was seen. While an
agent restarts, a lookup waits for it rather than failing, up to the caller's deadline.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any, TypeVar

from reach import clock
from reach.errors import (
    AgentNotFound,
    AgentUnavailable,
    NoCapableAgent,
    PoisonMessage,
    ReachError,
)
from reach.ports.registry import RegistryPort
from reach.protocol import Envelope
from reach.records import AgentRecord, AgentStatus, DeadLetter

#: How long a resolved agent ID stays cached (seconds).
ROUTE_TTL_S = 30.0
#: How long a capability's holder list stays fresh (seconds); loads are refreshed this often.
HOLDERS_TTL_S = 1.0
#: How many of the best holders a pick considers (broadcast asks for all of them).
PICK_FROM = 64
#: Longest wait for the registry when the caller has no deadline.
REGISTRY_WAIT_S = 10.0
#: Longest long poll of the registry for an agent found dead at its route (its new incarnation
#: usually registers within tens of milliseconds; one nobody restarts is not waited for longer).
STALE_WAIT_S = 0.5
#: Longest long poll of the registry for an agent marked restarting (asked again until the
#: caller's deadline).
RESTART_WAIT_S = 2.0
#: Time a long poll leaves of the caller's budget: for the registry's answer to come back (and
#: the request to follow) before the deadline.
LOOKUP_MARGIN_S = 0.05
#: How a notification waits for a restarting agent before it becomes a dead letter.
NOTIFY_HOLD_S = 5.0

log = logging.getLogger("reach._runtime.directory")

T = TypeVar("T")
_HoldersKey = tuple[str, str | None, int | None]
#: A capability's best online holders, the close tags when there are none, and when it expires.
_Holders = tuple[list[AgentRecord], list[str], float]


class Directory:
    """Per-process cache of routes (agent ID -> host) and capability holders, fed by the registry.

    Args:
        registry: The registry.
        rng: Random generator for the jitter of polls (seeded in tests).
    """

    def __init__(self, registry: RegistryPort, rng: random.Random | None = None) -> None:
        self.registry = registry
        self._rng = rng or random.Random()
        # agent ID -> (host, epoch, expiry): a route is replaced only by one of an epoch as
        # new or newer (an older incarnation's record, from a stale answer, never wins).
        self._routes: dict[str, tuple[str, int, float]] = {}
        # agent ID -> the epoch of its last route found dead (a lookup waits for a newer one).
        self._stale: dict[str, int] = {}
        self._principals: dict[str, tuple[tuple[str, ...], float]] = {}
        self._holders: dict[_HoldersKey, _Holders] = {}
        # Invariant: at most one registry call per key is in flight; callers of the key share it.
        self._flights: dict[object, asyncio.Future[Any]] = {}
        # Invariant: the refresh of a key's holders under way (or the last one, done).
        self._refreshing: dict[_HoldersKey, asyncio.Task[_Holders]] = {}
        self.lookups = 0

    async def _once(self, key: object, call: Callable[[], Awaitable[T]],
                    deadline: float | None) -> T:
        """The result of ``call``, made once for every concurrent caller with the same key."""
        flight = self._flights.get(key)
        if flight is None:
            self.lookups += 1
            made: asyncio.Future[Any] = asyncio.ensure_future(self._ask(call(), None))
            self._flights[key] = flight = made
            made.add_done_callback(lambda _: self._flights.pop(key, None))
        wait = REGISTRY_WAIT_S if deadline is None else max(deadline - clock.now(), 0.001)
        try:
            result: T = await asyncio.wait_for(asyncio.shield(flight), wait)
        except TimeoutError:
            raise _registry_silent(wait) from None
        return result

    async def route(self, agent_id: str, deadline: float | None = None) -> str:
        """The host endpoint of ``agent_id``; while it restarts, waits for it (until ``deadline``).

        Raises:
            AgentNotFound: the registry has no such agent.
            AgentUnavailable: the agent is offline, or still restarting when waiting longer would
                pass ``deadline`` (epoch seconds).
        """
        return (await self.locate(agent_id, deadline))[0]

    async def locate(self, agent_id: str, deadline: float | None = None) -> tuple[str, int]:
        """The host endpoint of ``agent_id`` and the epoch of its incarnation there, as
        :meth:`route` finds them.

        Raises:
            AgentNotFound: the registry has no such agent.
            AgentUnavailable: the agent is offline, or still restarting past ``deadline``.
        """
        hit = self._routes.get(agent_id)
        if hit is not None and hit[2] > clock.monotonic():
            return hit[0], hit[1]
        rec = await self._lookup_settled(agent_id, deadline)
        if rec is None:
            raise AgentNotFound(
                f"no agent {agent_id!r} is registered",
                suggestion="check the ID, or discover agents by capability",
                details={"agent_id": agent_id},
            )
        if rec.status is AgentStatus.RECOVERING:
            raise AgentUnavailable(
                f"agent {agent_id!r} is not re-registered yet: the registry restarted and is "
                "rebuilding its table from the hosts' heartbeats",
                suggestion="retry within a heartbeat interval",
                details={"agent_id": agent_id},
            )
        if rec.status is AgentStatus.OFFLINE:
            raise AgentUnavailable(
                f"agent {agent_id!r} is offline (host {rec.host} missed its heartbeats, or its "
                "restart failed)",
                details={"agent_id": agent_id, "host": rec.host},
            )
        # A newer incarnation, or none came in time (nobody restarts it): wait no more.
        self._stale.pop(agent_id, None)
        self._routes[agent_id] = (rec.host, rec.epoch, clock.monotonic() + ROUTE_TTL_S)
        return rec.host, rec.epoch

    async def _lookup_settled(self, agent_id: str, deadline: float | None) -> AgentRecord | None:
        """Looks an agent up, holding while its supervisor restarts it.

        The registry holds the lookup (a long poll) while the agent restarts, or, after its
        route was found dead, until an incarnation newer than the dead one registers (at most
        STALE_WAIT_S: an agent nobody restarts is not waited for long); it answers the moment
        the new incarnation registers.
        """
        newer_than = self._stale.get(agent_id, -1)
        wait = STALE_WAIT_S if newer_than >= 0 else 0.0
        while True:
            left = REGISTRY_WAIT_S / 2 if deadline is None else deadline - clock.now()
            ask = max(min(wait, left - LOOKUP_MARGIN_S), 0.0)
            # Concurrent callers of the same wait share one registry call.
            rec = await self._once(("lookup", agent_id, newer_than, wait),
                                   partial(self.registry.lookup, agent_id, newer_than, ask),
                                   deadline)
            if rec is None or rec.status is not AgentStatus.RESTARTING:
                return rec
            if deadline is None or deadline - clock.now() <= LOOKUP_MARGIN_S:
                raise AgentUnavailable(
                    f"agent {agent_id!r} is restarting and is not back before the request's "
                    "deadline",
                    suggestion="retry later, or give the request a longer timeout",
                    details={"agent_id": agent_id, "restarting": True},
                )
            wait = RESTART_WAIT_S

    async def _ask(self, call: Awaitable[T], deadline: float | None) -> T:
        """Awaits a registry call, no longer than the caller's deadline (or REGISTRY_WAIT_S)."""
        wait = REGISTRY_WAIT_S if deadline is None else max(deadline - clock.now(), 0.001)
        try:
            return await asyncio.wait_for(call, wait)
        except TimeoutError:
            raise _registry_silent(wait) from None

    def known_principal(self, agent_id: str) -> tuple[str, ...] | None:
        """The cached capabilities of a registered agent; None when not cached (ask
        :meth:`principal`)."""
        hit = self._principals.get(agent_id)
        if hit is not None and hit[1] > clock.monotonic():
            return hit[0]
        return None

    async def principal(self, agent_id: str) -> tuple[str, ...] | None:
        """The capabilities of a registered agent (in any state), or None if none has that ID.

        Known principals are cached like routes; unknown ones are asked again next time.
        """
        cached = self.known_principal(agent_id)
        if cached is not None:
            return cached
        now = clock.monotonic()
        rec = await self._once(("lookup", agent_id), lambda: self.registry.lookup(agent_id), None)
        if rec is None:
            return None
        if rec.status is not AgentStatus.RECOVERING and rec.host:  # not a placeholder
            self._principals[agent_id] = (rec.capabilities, now + ROUTE_TTL_S)
        return rec.capabilities

    def dead_letter(self, envelopes: list[Envelope], error: ReachError) -> None:
        """Records envelopes that could not be delivered, and why (fire and forget)."""
        at = clock.now()
        kills = error.kills if isinstance(error, PoisonMessage) else 0
        letters = [DeadLetter(e.msg_id, e.msg_type.value, e.sender, e.receiver, e.trace_id,
                              error.code, error.message, at, kills) for e in envelopes]
        for e in envelopes:
            log.warning("dead letter: %s %s from %s to %s: %s (trace %s)", e.msg_type.value,
                        e.msg_id, e.sender, e.receiver, error.message, e.trace_id)
        if letters:
            self.registry.dead_letter(letters)

    def learn(self, record: AgentRecord) -> None:
        """Caches a route found by discovery or spawning (of an online agent only, and only
        when no route of a newer incarnation is cached)."""
        if not record.online:
            return
        hit = self._routes.get(record.agent_id)
        if hit is None or hit[1] <= record.epoch or hit[2] <= clock.monotonic():
            self._routes[record.agent_id] = (record.host, record.epoch,
                                             clock.monotonic() + ROUTE_TTL_S)

    def gone_among(self, records: Sequence[AgentRecord]) -> set[str]:
        """The agents among ``records`` whose incarnation there this process found gone from
        its host (a route dropped, no newer incarnation seen since): a pick by capability
        prefers the holders it has not found gone."""
        stale = self._stale
        if not stale:
            return set()
        return {r.agent_id for r in records if r.epoch <= stale.get(r.agent_id, -1)}

    def drop(self, agent_id: str) -> None:
        """Forgets the route of one agent (its host did not have it); the next lookup waits
        for an incarnation newer than the one dropped."""
        gone = self._routes.pop(agent_id, None)
        if gone is not None:
            self._stale[agent_id] = max(gone[1], self._stale.get(agent_id, -1))

    def drop_endpoint(self, endpoint: str) -> None:
        """Forgets every route and holder list through a dead host."""
        for agent_id in [a for a, (host, *_) in self._routes.items() if host == endpoint]:
            self.drop(agent_id)
        self._holders.clear()

    async def holders(self, capability: str, text: str | None = None,
                      limit: int | None = PICK_FROM) -> list[AgentRecord]:
        """The ``limit`` best online holders of ``capability`` (fresh for HOLDERS_TTL_S; an
        expired list is served while one refresh runs).

        Raises:
            NoCapableAgent: nobody online holds it; the error names the closest tags.
        """
        key = (capability, text, limit)
        hit = self._holders.get(key)
        if hit is None or not hit[0]:
            hit = await asyncio.shield(self._refresh_once(key))
        elif hit[2] <= clock.monotonic():
            self._refresh_once(key)  # served stale meanwhile
        records, close, _ = hit
        if not records:
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise NoCapableAgent(
                f"no online agent holds capability {capability!r}{hint}",
                suggestion="spawn an agent with that capability, or check the tag",
                details={"capability": capability, "close_matches": ", ".join(close)},
            )
        return records

    def _refresh_once(self, key: _HoldersKey) -> asyncio.Task[_Holders]:
        """The refresh of a holder list under way, started if none is (one per key: every
        caller until it ends shares it, its registry call and its learning of routes)."""
        task = self._refreshing.get(key)
        if task is None or task.done():
            task = self._refreshing[key] = asyncio.ensure_future(self._refresh(key))
            task.add_done_callback(_quiet)
        return task

    async def _refresh(self, key: _HoldersKey) -> _Holders:
        capability, text, limit = key
        records, close = await self._once(
            ("holders", key), lambda: self.registry.discover(capability, text, limit), None)
        hit = self._holders[key] = (records, close, clock.monotonic() + HOLDERS_TTL_S)
        for record in records:
            self.learn(record)
        return hit


def _registry_silent(wait: float) -> AgentUnavailable:
    return AgentUnavailable(
        f"the registry did not answer within {wait:.1f} s (is it restarting?)",
        suggestion="retry shortly", details={"waited_s": round(wait, 3)},
    )


def _quiet(task: asyncio.Future[Any]) -> None:
    """Reads a background refresh's outcome (a failure is logged, the stale list stays)."""
    if not task.cancelled() and task.exception() is not None:
        log.info("refreshing holders failed: %s", task.exception())
