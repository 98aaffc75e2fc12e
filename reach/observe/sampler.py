"""The observer's one look at the cluster per second, shared by every page a replica serves.

A :class:`Sampler` asks the cluster's ports (the registry, every supervisor, a few hosts a
tick for their message counters, the trace store, the A2A gateway's most recent tasks where the
gateway gives it them) once per :data:`TICK_S` while at least one
page watches, and makes a :class:`~reach.observe.snapshot.Snapshot` of the answers: however
many pages watch, the cluster is asked once a tick, and a replica no page watches asks nothing.
Each call is bounded by a timeout; a part that did not answer keeps its last value (a
supervisor that did not answer is shown unreachable, with why).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass
from typing import TypeVar

from reach import clock
from reach.errors import ReachError
from reach.observe.snapshot import Inputs, Json, Snapshot, build, delta
from reach.observe.trees import RestartEvent, new_restarts
from reach.observe.views import spare_names
from reach.ports.cluster import Cluster, NodeInfo
from reach.ports.traces import TraceStorePort
from reach.records import (
    A2ATaskSummary,
    AgentRecord,
    DeadLetter,
    SupervisorState,
    SupervisorStatus,
)
from reach.spans import TraceEdge, TraceStoreStats

log = logging.getLogger("reach.observe")

T = TypeVar("T")

#: How often the sampler looks while a page watches.
TICK_S = 1.0
#: How long one call of a look may take.
CALL_TIMEOUT_S = 2.0
#: Hosts asked for their message counters per tick (in turn: a cluster of many hosts has its
#: rate from the last answer of each).
HOSTS_PER_TICK = 32
#: The message graph's window.
GRAPH_WINDOW_S = 60.0
#: The A2A tasks a look reads (the most recently updated).
TASKS_READ = 100
#: How many restart events are kept for pages that fell behind.
RESTARTS_KEPT = 500


@dataclass
class _Counter:
    count: int
    at: float
    rate: float | None = None


class RateMeter:
    """Messages per second over the hosts, from each host's running count of envelopes sent
    (pure: times are given)."""

    def __init__(self) -> None:
        self._hosts: dict[str, _Counter] = {}

    def update(self, host: str, count: int, at: float) -> None:
        """Records a host's count at ``at``; a count that went down is a restarted process."""
        last = self._hosts.get(host)
        if last is None or count < last.count:
            rate = None
        elif at <= last.at:
            rate = last.rate
        else:
            rate = (count - last.count) / (at - last.at)
        self._hosts[host] = _Counter(count, at, rate)

    def keep(self, hosts: Sequence[str]) -> None:
        """Forgets hosts no longer alive."""
        alive = set(hosts)
        for gone in [h for h in self._hosts if h not in alive]:
            del self._hosts[gone]

    def total(self) -> float | None:
        """The summed rate of the hosts with one; None when none has one yet."""
        rates = [c.rate for c in self._hosts.values() if c.rate is not None]
        return round(sum(rates), 2) if rates else None


async def _bounded(call: Callable[[], Awaitable[T]], timeout_s: float = CALL_TIMEOUT_S) -> T:
    return await asyncio.wait_for(call(), timeout_s)


class Sampler:
    """The looks of one replica (see the module's docstring).

    Args:
        cluster: The deployment.
        traces: The trace store (called on each look: a store that restarted is found anew);
            None when there is none to show.
        tasks: The A2A gateway's most recently updated tasks of every caller, at most the
            number it is given, newest first; None when there are none to show.
        now: The clock (epoch seconds).
    """

    def __init__(self, cluster: Cluster, traces: Callable[[], TraceStorePort] | None = None,
                 tasks: Callable[[int], Awaitable[Sequence[A2ATaskSummary]]] | None = None,
                 now: Callable[[], float] = clock.now) -> None:
        self._cluster = cluster
        self._traces = traces
        self._tasks = tasks
        self._recent_tasks: Sequence[A2ATaskSummary] = ()
        self._clock = now
        self._rates = RateMeter()
        self._turn = 0
        self._seq = 0
        self._latest: Snapshot | None = None
        self._statuses: dict[str, SupervisorStatus] = {}
        self._restarts: deque[tuple[int, RestartEvent]] = deque(maxlen=RESTARTS_KEPT)
        self._nodes: Sequence[NodeInfo] = ()
        self._records: list[AgentRecord] = []
        self._edges: list[TraceEdge] = []
        self._spares: set[str] = set()
        self._ticked = asyncio.Condition()
        self._watchers = 0
        self._loop: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    @property
    def records(self) -> list[AgentRecord]:
        """The registry's records as of the last look."""
        return self._records

    @property
    def spares(self) -> set[str]:
        """The names of the warm spares as of the last look."""
        return self._spares

    async def letters(self, limit: int = 1000) -> list[DeadLetter]:
        """The most recent dead letters, oldest first."""
        return await _bounded(lambda: self._cluster.registry().dead_letters(limit))

    @property
    def edges(self) -> list[TraceEdge]:
        """The message graph's edges as of the last look (empty without a trace store)."""
        return self._edges

    def trace_store(self) -> TraceStorePort | None:
        """The trace store, or None when there is none (or it cannot be found now)."""
        if self._traces is None:
            return None
        try:
            return self._traces()
        except ReachError as exc:
            log.debug("no trace store to show: %s", exc)
            return None

    async def look(self) -> Snapshot:
        """Looks at the cluster now (one look at a time: a caller that came during another's
        gets that one's)."""
        seq = self._seq
        async with self._lock:
            if self._latest is not None and self._seq != seq:
                return self._latest
            inputs = await self._gather()
            before, self._statuses = self._statuses, dict(inputs.statuses)
            events = new_restarts(before, inputs.statuses) if before else []
            self._seq += 1
            self._restarts.extend((self._seq, e) for e in events)
            self._latest = build(self._seq, inputs, events)
        async with self._ticked:
            self._ticked.notify_all()
        return self._latest

    async def latest(self, max_age_s: float = TICK_S * 1.5) -> Snapshot:
        """The last look if it is recent enough, else a new one."""
        if self._latest is None or self._clock() - self._latest.at > max_age_s:
            return await self.look()
        return self._latest

    async def _gather(self) -> Inputs:
        registry = self._cluster.registry()
        records, hosts, spares, stats, letters = await asyncio.gather(
            _bounded(registry.agents), _bounded(registry.hosts), _bounded(registry.spares),
            _bounded(registry.stats), _bounded(lambda: registry.dead_letters(100)))
        self._records = records
        self._spares = spare_names(spares)
        names = await asyncio.to_thread(self._cluster.supervisors)
        statuses = await asyncio.gather(*(self._status(n) for n in names))
        if self._seq % 5 == 0 or not self._nodes:  # nodes come and go slowly
            self._nodes = await asyncio.to_thread(self._cluster.nodes)
        await self._sample_hosts(hosts)
        edges, trace_stats = await self._trace_parts()
        self._edges = edges or []
        return Inputs(at=self._clock(), nodes=self._nodes, records=records, hosts=hosts,
                      spares=spares, statuses={s.name: s for s in statuses},
                      letters=letters, dead_letters=stats["dead_letters"],
                      messages_per_s=self._rates.total(), edges=edges, window_s=GRAPH_WINDOW_S,
                      trace_stats=trace_stats, tasks=await self._task_part())

    async def _status(self, name: str) -> SupervisorStatus:
        try:
            return await _bounded(lambda: self._cluster.supervisor(name).status())
        except Exception as exc:  # one broken supervisor must not hide the others
            detail = exc.message if isinstance(exc, ReachError) else type(exc).__name__
            return SupervisorStatus(name.rpartition(".")[2], SupervisorState.UNREACHABLE,
                                    detail=detail)

    async def _sample_hosts(self, hosts: Sequence[str]) -> None:
        self._rates.keep(hosts)
        if not hosts:
            return
        ordered = sorted(hosts)
        start = self._turn % len(ordered)
        turn = (ordered[start:] + ordered[:start])[:HOSTS_PER_TICK]
        self._turn += len(turn)

        async def one(name: str) -> None:
            try:
                info = await _bounded(lambda: self._cluster.host(name).info(), 0.5)
            except Exception as exc:  # a host that died meanwhile has no rate
                log.debug("host %s gave no counters: %s", name, exc)
                return
            self._rates.update(name, int(info.get("envelopes_sent", 0)), self._clock())

        await asyncio.gather(*(one(h) for h in turn))

    async def _trace_parts(self) -> tuple[list[TraceEdge] | None, TraceStoreStats | None]:
        store = self.trace_store()
        if store is None:
            return None, None
        since = int((self._clock() - GRAPH_WINDOW_S) * 1e9)
        try:
            edges, stats = await asyncio.gather(_bounded(lambda: store.edges(since)),
                                                _bounded(store.trace_stats))
        except Exception as exc:  # a store that is restarting shows nothing this tick
            log.debug("the trace store did not answer: %s", exc)
            return None, None
        return edges, stats

    async def _task_part(self) -> Sequence[A2ATaskSummary] | None:
        """The most recent A2A tasks (None: none to show); the last ones read while the session
        store does not answer."""
        source = self._tasks
        if source is None:
            return None
        try:
            self._recent_tasks = await _bounded(lambda: source(TASKS_READ))
        except Exception as exc:  # the session store restarting: the last tasks read stay
            log.debug("the A2A tasks were not read: %s", exc)
        return self._recent_tasks

    # -- watching ------------------------------------------------------------------------------

    async def watch(self) -> AsyncIterator[Json]:
        """The messages of one watching page: every part first, then the parts that changed,
        once a tick, each with the restarts made since the previous message (none in the
        first: a page's first look has no news); looks go on while any page watches."""
        self._watchers += 1
        if self._loop is None or self._loop.done():
            self._loop = asyncio.ensure_future(self._run())
        try:
            snapshot = await self.latest()
            sent: dict[str, str] = {}
            last = snapshot.seq
            message, sent = delta(snapshot, sent)
            message["restarts"] = []
            while True:
                yield message
                snapshot = await self._after(last)
                message, sent = delta(snapshot, sent)
                message["restarts"] = [asdict(e) for s, e in self._restarts
                                       if last < s <= snapshot.seq]
                last = snapshot.seq
        finally:
            self._watchers -= 1

    async def _after(self, seq: int) -> Snapshot:
        """The first look after the one numbered ``seq``."""
        async with self._ticked:
            await self._ticked.wait_for(
                lambda: self._latest is not None and self._latest.seq > seq)
        assert self._latest is not None
        return self._latest

    async def _run(self) -> None:
        """Looks once a tick while a page watches."""
        while self._watchers > 0:
            started = self._clock()
            try:
                await self.look()
            except Exception as exc:  # the registry restarting: the next tick tries again
                log.warning("the observer's look failed: %s", exc)
            await asyncio.sleep(max(0.05, TICK_S - (self._clock() - started)))

    async def close(self) -> None:
        """Stops looking."""
        if self._loop is not None:
            self._loop.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._loop


__all__ = ["CALL_TIMEOUT_S", "GRAPH_WINDOW_S", "HOSTS_PER_TICK", "TASKS_READ", "TICK_S",
           "RateMeter", "Sampler"]
