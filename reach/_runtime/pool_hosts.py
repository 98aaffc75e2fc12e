"""The hosts of packed placements' pools (:class:`~reach.placement.HostGroup`): named, shared
by every driver and supervisor, started on first use and outlasting their agents.

Agents of a pool move, they do not wait: when a pool host dies, the agents its supervisors
restart go at once to the pool's live hosts (least loaded first, by their agent counts as last
seen here), and the dead host is started again, empty and under its name, in the background (it
is never restarted by the platform, whose restarts make a death known only after about 1.5 s).
Only a pool whose hosts are all dead waits, for its replacements. Every host of a pool keeps the
classes of the agents placed in it loaded, so that an agent moved there on a restart does not
wait for its class to arrive.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from policies.discovery import Candidate, pick_least_loaded
from reach._runtime.unawaited import read_later
from reach.agent import Agent
from reach.errors import AgentUnavailable
from reach.placement import HostGroup, HostNeeds
from reach.ports.cluster import Cluster
from reach.ports.hosts import CallLimits, HostPort, HostShape
from reach.records import AgentRecord

#: How many times a dead group host is started again before its spawn gives up, and the first wait.
REPLACE_TRIES = 20
REPLACE_WAIT_S = 0.05
#: How long a dead group host's replacement waits when its group has live hosts left, and the
#: spares' top-up after a restart claimed one: a new process costs a core for a while, not to be
#: taken from the restart.
REPLACE_AFTER_S = 0.5

log = logging.getLogger("reach.spawner")


class PoolHosts:
    """The pools' hosts this process has used, and their agent counts as last seen here.

    Args:
        cluster: Where hosts are started.
        limits: Hop limit and default timeout the hosts apply.
    """

    def __init__(self, cluster: Cluster, limits: CallLimits) -> None:
        self.cluster = cluster
        self.limits = limits
        # Group name -> its hosts, started on first use here.
        self._groups: dict[str, list[HostPort]] = {}
        # Group host name -> its agent count as last seen (asked, plus the agents placed since).
        self._counts: dict[str, int] = {}
        # Group name -> the agent classes placed in it from here; (host name, class) pairs of
        # the group hosts that have them (given or preloaded).
        self._classes: dict[str, set[type[Agent]]] = {}
        self._loaded: set[tuple[str, type[Agent]]] = set()
        # Invariant: at most one replacement of a group host (by name) runs in this process.
        self._replacing: dict[str, asyncio.Task[HostPort]] = {}

    async def place(self, cls: type[Agent], agent_ids: Sequence[str], group: HostGroup,
                    needs: HostNeeds) -> list[tuple[HostPort, list[str]]]:
        """Which of the group's live hosts takes which agents (least loaded first); they are
        counted there once added (:meth:`added`)."""
        hosts, counts = await self._live_group(group, needs)
        groups: dict[int, list[str]] = {}
        for agent_id in agent_ids:
            i = least_loaded(counts)
            counts[i] += 1
            groups.setdefault(i, []).append(agent_id)
        for i in groups:
            self._ready_everywhere(group, cls, hosts[i].name)
        return [(hosts[i], ids) for i, ids in groups.items()]

    def added(self, host: str, count: int) -> None:
        """Counts ``count`` agents added to a group host of :meth:`place`'s."""
        self._counts[host] = self._counts.get(host, 0) + count

    async def move(self, cls: type[Agent], agent_id: str, group: HostGroup, needs: HostNeeds,
                   gone: Collection[str], *, args: Sequence[Any], kwargs: dict[str, Any] | None,
                   epochs: dict[str, int] | None,
                   priority: int | Mapping[str, int] | None) -> list[AgentRecord] | None:
        """Starts an agent whose group host died (one of ``gone``) on the least loaded of the
        group's other hosts, as last seen here, without asking them; its records, or None when
        they were never seen, or the one chosen is dead too (the group is then asked:
        :meth:`place`)."""
        known = self._known_group(group, needs, gone)
        if known is None:
            return None
        host = known[0][least_loaded(known[1])]
        try:
            records = await host.add_agents(cls, [agent_id], tuple(args), kwargs or {}, epochs,
                                            priority=priority)
        except AgentUnavailable:
            log.info("group host %s is dead too: asking the group", host.name)
            return None
        self.added(host.name, 1)
        self._ready_everywhere(group, cls, host.name)
        return records

    def _group_hosts(self, group: HostGroup, needs: HostNeeds) -> list[HostPort]:
        hosts = self._groups.get(group.name)
        if hosts is None:
            shape = HostShape.of(needs, needs.node_id, lasting=True)
            hosts = [self.cluster.start_host(name, shape, self.limits) for name in group.hosts]
            self._groups[group.name] = hosts
        return hosts

    def _ready_everywhere(self, group: HostGroup, cls: type[Agent], placed_on: str) -> None:
        """Has every host of the group keep ``cls`` loaded (in the background): an agent moved
        to another host on a restart then does not wait for its class to be received there the
        first time (for a class defined in a script, about 10 ms of rebuilding it and its
        schemas in a fresh process)."""
        self._classes.setdefault(group.name, set()).add(cls)
        self._loaded.add((placed_on, cls))
        for host in self._groups.get(group.name, []):
            self._preload(host, [cls])

    def _preload(self, host: HostPort, classes: Collection[type[Agent]]) -> None:
        """Has a group host load the ``classes`` it does not hold yet (in the background)."""
        new = [c for c in classes if (host.name, c) not in self._loaded]
        if new:
            self._loaded.update((host.name, c) for c in new)
            read_later(host.preload(new), f"preloading {host.name} failed")

    def _known_group(self, group: HostGroup, needs: HostNeeds, gone: Collection[str],
                    ) -> tuple[list[HostPort], list[int]] | None:
        """The group's hosts other than ``gone`` and their agent counts as last seen here, the
        ``gone`` ones being started again in the background; None if a count was never seen
        (or no other host is left)."""
        hosts = self._groups.get(group.name)
        if hosts is None:
            return None
        others = [h for h in hosts if h.name not in gone]
        if not others or any(h.name not in self._counts for h in others):
            return None
        for i, h in enumerate(hosts):
            if h.name in gone:
                self._counts.pop(h.name, None)
                self._replace(group, needs, i, _replace_after(len(others)))
        return others, [self._counts[h.name] for h in others]

    async def _live_group(self, group: HostGroup, needs: HostNeeds,
                         ) -> tuple[list[HostPort], list[int]]:
        """The group's live hosts and their agent counts; dead ones are started again in the
        background, and waited for only when none is alive."""
        hosts = self._group_hosts(group, needs)
        counts = await asyncio.gather(*(h.count() for h in hosts), return_exceptions=True)
        live = [(h, c) for h, c in zip(hosts, counts, strict=True) if isinstance(c, int)]
        for h, c in zip(hosts, counts, strict=True):
            if isinstance(c, int):
                self._counts[h.name] = c
            else:
                self._counts.pop(h.name, None)
        dead = [i for i, c in enumerate(counts) if not isinstance(c, int)]
        replacing = [self._replace(group, needs, i, _replace_after(len(live))) for i in dead]
        if not live:
            # Every host of the group is dead: wait for the replacements.
            fresh = await asyncio.gather(*replacing)
            live = [(h, 0) for h in fresh]
        return [h for h, _ in live], [c for _, c in live]

    def _replace(self, group: HostGroup, needs: HostNeeds, i: int,
                 after_s: float) -> asyncio.Task[HostPort]:
        """Starts group host ``i`` again after ``after_s`` (once per process, whoever asks)."""
        name = group.hosts[i]
        running = self._replacing.get(name)
        if running is None or running.done():
            running = self._replacing[name] = asyncio.get_running_loop().create_task(
                self._start_again(group, needs, i, after_s))
            running.add_done_callback(_read_outcome)
        return running

    async def _start_again(self, group: HostGroup, needs: HostNeeds, i: int,
                           after_s: float) -> HostPort:
        """Starts a dead group host again under its name; returns it once it answers.

        Raises:
            AgentUnavailable: it did not come up (no live node could take it).
        """
        if after_s > 0:
            await asyncio.sleep(after_s)
        name = group.hosts[i]
        shape = HostShape.of(needs, needs.node_id, lasting=True)
        failure: Exception | None = None
        for attempt in range(REPLACE_TRIES):
            self.cluster.forget(name)
            host = self.cluster.start_host(name, shape, self.limits)
            try:
                self._counts[name] = await host.count()
            except AgentUnavailable as exc:  # its old self, not yet known as dead by name
                failure = exc
                await asyncio.sleep(REPLACE_WAIT_S * (attempt + 1))
                continue
            # A new process: it holds none of the group's classes until given them.
            self._loaded = {(h, c) for h, c in self._loaded if h != name}
            self._preload(host, self._classes.get(group.name, ()))
            hosts = self._groups.get(group.name)
            if hosts is not None and i < len(hosts):
                hosts[i] = host
            return host
        raise AgentUnavailable(f"group host {name} could not be started again: {failure}",
                               details={"endpoint": name})


def _read_outcome(task: asyncio.Task[HostPort]) -> None:
    """A background replacement's failure is the next spawn's to meet: read it here."""
    if not task.cancelled():
        task.exception()


def _replace_after(live: int) -> float:
    """How long a dead group host waits to be started again, ``live`` of its group's hosts
    being left: a new process costs a core for a while, so with two or more left it starts
    once the agents have moved and answered, not in their way; with one left or none it starts
    at once (a second death before it is up would leave the agents nowhere to go)."""
    return REPLACE_AFTER_S if live > 1 else 0.0


def least_loaded(counts: Sequence[int]) -> int:
    """The index of the least-loaded of several hosts (the first of equals)."""
    cands = [Candidate(f"{i:06d}", (), "", True, count) for i, count in enumerate(counts)]
    (best,) = pick_least_loaded(cands, 1)
    return int(best.agent_id)
