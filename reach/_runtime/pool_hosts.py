"""The hosts of packed placements' pools (:class:`~reach.placement.HostGroup`): named, shared
by every driver and supervisor, started on first use and outlasting their agents.

Agents of a pool move, they do not wait: when a pool host dies, the agents its supervisors
restart go at once to the pool's live hosts (least loaded first, by their agent counts as last
seen here), and the dead host is started again, empty and under its name, in the background once
they have moved (it is never restarted by the platform, whose restarts make a death known only
after about 1.5 s; a new process started at once would take a core from the moves).
A pool whose hosts are all dead takes a warm spare of its hosts' shape when one is ready (one
claim per outage, whoever asks) and uses it as one more host of the pool in this process: its
agents are placed there, least loaded as usual, while the dead hosts are started again in the
background; the spare is never started again, only dropped when it dies. Only a pool whose hosts
are all dead with no spare ready waits, for its replacements. Every host of a pool keeps the
classes of the agents placed in it loaded, so that an agent moved there on a restart does not
wait for its class to arrive.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import Any

from policies.discovery import Candidate, pick_least_loaded
from reach._runtime.add_batches import AddBatches
from reach._runtime.unawaited import read_later
from reach.agent import Agent
from reach.errors import AgentUnavailable, ReachError
from reach.placement import HostGroup, HostNeeds
from reach.ports.cluster import Cluster
from reach.ports.hosts import CallLimits, HostPort, HostShape
from reach.records import AgentRecord

#: How many times a dead group host is started again before its spawn gives up, and the first wait.
REPLACE_TRIES = 20
REPLACE_WAIT_S = 0.05
#: How long a dead group host's replacement waits after the last of its agents moved to the
#: group's live hosts, and the spares' top-up after a restart took one: a new process costs a
#: core for over half a second, not to be taken from the restarts (the last one's callers are
#: still being answered), nor left to run into the next failure's.
REPLACE_AFTER_S = 0.05
#: The longest a dead group host's replacement waits for its agents' moves (one that hangs, or
#: moves that never stop coming, must not leave the group a host short for ever).
MOVES_WITHIN_S = 2.0

log = logging.getLogger("reach.spawner")

#: Takes a live warm spare of the shape of ``HostNeeds``, its agents likely of the classes given,
#: for a pool whose hosts are all dead; None when none is ready (see ``Spawner``).
TakeSpare = Callable[[HostNeeds, Sequence[type[Agent]]], Awaitable[HostPort | None]]


class PoolHosts:
    """The pools' hosts this process has used, and their agent counts as last seen here.

    Args:
        cluster: Where hosts are started.
        limits: Hop limit and default timeout the hosts apply.
        take_spare: Takes a warm spare for a pool whose hosts are all dead (None: such a pool
            waits for its replacements).
    """

    def __init__(self, cluster: Cluster, limits: CallLimits,
                 take_spare: TakeSpare | None = None) -> None:
        self.cluster = cluster
        self.limits = limits
        self._take_spare = take_spare
        # Group name -> its hosts, started on first use here.
        self._groups: dict[str, list[HostPort]] = {}
        # Group name -> the warm spares it took here while its hosts were all dead: members of
        # the group after its named hosts, dropped when they die.
        self._adopted: dict[str, list[HostPort]] = {}
        # Group name -> its claim of a spare, under way or done, until one of its named hosts
        # is back or the spare dies. Invariant: one claim per group per outage, shared by
        # every restart that finds the group dead.
        self._claims: dict[str, asyncio.Task[HostPort | None]] = {}
        # Group host name -> its agent count as last seen (asked, plus the agents placed since).
        self._counts: dict[str, int] = {}
        # Group name -> the agent classes placed in it from here; (host name, class) pairs of
        # the group hosts that have them (given or preloaded).
        self._classes: dict[str, set[type[Agent]]] = {}
        self._loaded: set[tuple[str, type[Agent]]] = set()
        # Invariant: at most one replacement of a group host (by name) runs in this process.
        self._replacing: dict[str, asyncio.Task[HostPort]] = {}
        # Group name -> its agents being moved from here now, and the event set when none is.
        self._moving: dict[str, int] = {}
        self._moved: dict[str, asyncio.Event] = {}
        # Agents moved to one host at once go in one call (a dead host's agents all move).
        self._adds = AddBatches()

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
        :meth:`place`). The agent is counted on the host chosen at once, so that its host-mates
        moving at the same time spread over the group."""
        known = self._known_group(group, needs, gone)
        if known is None:
            return None
        host = known[0][least_loaded(known[1])]
        self.added(host.name, 1)
        self._move_begins(group.name)
        try:
            records = await self._adds.add(host, cls, agent_id, args=tuple(args),
                                           kwargs=kwargs or {}, epochs=epochs,
                                           priority=priority)
        except AgentUnavailable:
            self._uncount(host.name)
            log.info("group host %s is dead too: asking the group", host.name)
            return None
        except BaseException:
            self._uncount(host.name)
            raise
        finally:
            self._move_ends(group.name)
        self._ready_everywhere(group, cls, host.name)
        return records

    def _move_begins(self, group: str) -> None:
        self._moving[group] = self._moving.get(group, 0) + 1
        self._moved.setdefault(group, asyncio.Event()).clear()

    def _move_ends(self, group: str) -> None:
        self._moving[group] -= 1
        if self._moving[group] == 0:
            self._moved[group].set()

    async def _moves_done(self, group: str) -> None:
        """Returns once no agent of the group is being moved from here (at once if none is),
        or after :data:`MOVES_WITHIN_S` at the most."""
        async def none_moving() -> None:
            while self._moving.get(group, 0) > 0:
                await self._moved[group].wait()

        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(none_moving(), MOVES_WITHIN_S)

    def _uncount(self, host: str) -> None:
        """Takes back an agent counted on a host that did not take it (if still counted)."""
        if host in self._counts:
            self._counts[host] = max(0, self._counts[host] - 1)

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
        for host in self._members(group):
            self._preload(host, [cls])

    def _members(self, group: HostGroup) -> list[HostPort]:
        """The group's hosts known here: its named hosts, then the spares it took."""
        return [*self._groups.get(group.name, []), *self._adopted.get(group.name, [])]

    def _preload(self, host: HostPort, classes: Collection[type[Agent]]) -> None:
        """Has a group host load the ``classes`` it does not hold yet (in the background)."""
        new = [c for c in classes if (host.name, c) not in self._loaded]
        if new:
            self._loaded.update((host.name, c) for c in new)
            read_later(host.preload(new), f"preloading {host.name} failed")

    def _known_group(self, group: HostGroup, needs: HostNeeds, gone: Collection[str],
                    ) -> tuple[list[HostPort], list[int]] | None:
        """The group's hosts other than ``gone`` and their agent counts as last seen here, the
        ``gone`` named ones being started again in the background (a ``gone`` spare it took is
        dropped); None if a count was never seen (or no other host is left)."""
        hosts = self._groups.get(group.name)
        if hosts is None:
            return None
        others = [h for h in self._members(group) if h.name not in gone]
        if not others or any(h.name not in self._counts for h in others):
            return None
        for i, h in enumerate(hosts):
            if h.name in gone:
                self._counts.pop(h.name, None)
                self._replace(group, needs, i, wait=True)
        for h in self._adopted.get(group.name, []):
            if h.name in gone:
                self._drop(group, h)
        return others, [self._counts[h.name] for h in others]

    async def _live_group(self, group: HostGroup, needs: HostNeeds,
                         ) -> tuple[list[HostPort], list[int]]:
        """The group's live hosts and their agent counts; dead named ones are started again in
        the background, dead spares it took are dropped. When none is alive, a warm spare is
        taken (:meth:`_spare`), else the replacements are waited for."""
        named = self._group_hosts(group, needs)
        hosts = [*named, *self._adopted.get(group.name, [])]
        counts = await asyncio.gather(*(self._count(h) for h in hosts), return_exceptions=True)
        live = [(h, c) for h, c in zip(hosts, counts, strict=True) if isinstance(c, int)]
        for h, c in zip(hosts, counts, strict=True):
            if isinstance(c, int):
                self._counts[h.name] = c
            else:
                self._counts.pop(h.name, None)
        for h, c in zip(hosts[len(named):], counts[len(named):], strict=True):
            if not isinstance(c, int):
                self._drop(group, h)
        dead = [i for i, c in enumerate(counts[:len(named)]) if not isinstance(c, int)]
        replacing = [self._replace(group, needs, i, wait=bool(live)) for i in dead]
        if not live:
            spare = await self._spare(group, needs)
            if spare is not None:
                live = [(spare, self._counts.get(spare.name, 0))]
            else:  # every host of the group is dead and no spare was ready: wait for them
                fresh = await asyncio.gather(*replacing)
                live = [(h, 0) for h in fresh]
        return [h for h, _ in live], [c for _, c in live]

    async def _count(self, host: HostPort) -> int:
        """A group host's agent count (asked).

        Raises:
            AgentUnavailable: it is dead, or being started again (asking it would wait for its
                new process to start).
        """
        replacing = self._replacing.get(host.name)
        if replacing is not None and not replacing.done():
            raise AgentUnavailable(f"group host {host.name} is being started again",
                                   details={"endpoint": host.name})
        return await host.count()

    async def _spare(self, group: HostGroup, needs: HostNeeds) -> HostPort | None:
        """A warm spare taken for the group, all of whose hosts are dead: one claim per outage
        (the first restart to find the group dead makes it, the others share it); None when
        none was ready, or the one taken has died since."""
        if self._take_spare is None:
            return None
        claim = self._claims.get(group.name)
        if claim is None:
            claim = self._claims[group.name] = asyncio.get_running_loop().create_task(
                self._adopt(group, needs))
        spare = await asyncio.shield(claim)  # a restart called off leaves the others' claim
        adopted = {h.name for h in self._adopted.get(group.name, [])}
        return spare if spare is not None and spare.name in adopted else None

    async def _adopt(self, group: HostGroup, needs: HostNeeds) -> HostPort | None:
        """Takes a warm spare of the group's shape and makes it a member of the group here,
        with the group's classes loaded; None when none was ready."""
        assert self._take_spare is not None
        try:
            spare = await self._take_spare(needs, list(self._classes.get(group.name, ())))
        except ReachError as exc:  # the registry may be restarting: wait for the hosts then
            log.warning("taking a spare for pool %s failed: %s", group.name, exc)
            return None
        if spare is None:
            return None
        log.info("pool %s has no live host: spare %s takes its agents", group.name, spare.name)
        self._adopted.setdefault(group.name, []).append(spare)
        self._counts[spare.name] = 0
        self._preload(spare, self._classes.get(group.name, ()))
        return spare

    def _drop(self, group: HostGroup, host: HostPort) -> None:
        """Forgets a spare the group took, which died (it is not started again); the group
        may claim another while its hosts are all dead."""
        adopted = self._adopted.get(group.name, [])
        self._adopted[group.name] = [h for h in adopted if h.name != host.name]
        self._counts.pop(host.name, None)
        self._loaded = {(h, c) for h, c in self._loaded if h != host.name}
        claim = self._claims.get(group.name)
        if claim is not None and claim.done():
            del self._claims[group.name]

    def _replace(self, group: HostGroup, needs: HostNeeds, i: int, *,
                 wait: bool) -> asyncio.Task[HostPort]:
        """Starts group host ``i`` again (once per process, whoever asks): at once, or with
        ``wait`` once the agents moving to the group's live hosts from here have moved, and
        :data:`REPLACE_AFTER_S` more."""
        name = group.hosts[i]
        running = self._replacing.get(name)
        if running is None or running.done():
            running = self._replacing[name] = asyncio.get_running_loop().create_task(
                self._start_again(group, needs, i, wait))
            running.add_done_callback(_read_outcome)
        return running

    async def _start_again(self, group: HostGroup, needs: HostNeeds, i: int,
                           wait: bool) -> HostPort:
        """Starts a dead group host again under its name; returns it once it answers.

        Raises:
            AgentUnavailable: it did not come up (no live node could take it).
        """
        if wait:
            await self._moves_done(group.name)
            await asyncio.sleep(REPLACE_AFTER_S)
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
            self._claims.pop(group.name, None)  # the outage is over: the next one claims anew
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


def least_loaded(counts: Sequence[int]) -> int:
    """The index of the least-loaded of several hosts (the first of equals)."""
    cands = [Candidate(f"{i:06d}", (), "", True, count) for i, count in enumerate(counts)]
    (best,) = pick_least_loaded(cands, 1)
    return int(best.agent_id)
