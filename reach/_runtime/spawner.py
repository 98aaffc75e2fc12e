"""Placing agents on hosts, as their :class:`~reach.placement.Placement` says: a new host of its
own for each agent (a dedicated agent's), or a group of shared, named hosts (a packed pool).

Used by the driver's runtime and by supervisors alike, so an agent restarted by its supervisor is
placed exactly as it was first spawned. Group hosts are named and shared by every driver and
supervisor; a host of its own lives and dies with its one agent, and its restart takes a warm
spare of its placement's shape when one is ready (no waiting for a new process). Spares are
started where the registry says they lack: it sees every restart's claim in the cluster and
sizes each node's pool of each shape to the recent claims (:mod:`policies.spares`).

Agents of a group move, they do not wait: when a group host dies, the agents its supervisors
restart go at once to the group's live hosts (least loaded first), and the dead host is started
again, empty and under its name, in the background (it is never restarted by the platform, whose
restarts make a death known only after about 1.5 s). Only a group whose hosts are all dead waits,
for its replacements. When a node dies, its hosts are placed again on the nodes left (soft node
affinity lets them leave it). An agent that requires resources no live node has is not left
waiting for them: its spawn fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Collection, Mapping, Sequence
from typing import Any, TypeVar

from policies.discovery import Candidate, pick_least_loaded
from reach._runtime.names import check_agent_ids
from reach.agent import Agent
from reach.errors import AgentUnavailable
from reach.placement import HostGroup, HostNeeds, Placement, own_host_name
from reach.ports.cluster import Cluster
from reach.ports.hosts import CallLimits, HostPort, HostShape
from reach.records import AgentRecord

#: How often a dedicated host still waiting to be placed checks that some live node can take it.
PLACEMENT_CHECK_S = 1.0
#: How many times a dead group host is started again before its spawn gives up, and the first wait.
REPLACE_TRIES = 20
REPLACE_WAIT_S = 0.05
#: How long a dead group host's replacement waits when its group has live hosts left, and the
#: spares' top-up after a restart claimed one: a new process costs a core for a while, not to be
#: taken from the restart.
REPLACE_AFTER_S = 0.5
#: How many claimed spares that turn out dead a restart tries before it starts a new host.
SPARE_TRIES = 3

log = logging.getLogger("reach.spawner")

T = TypeVar("T")


class Spawner:
    """Creates hosts and adds agents to them.

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

    async def spawn(self, cls: type[Agent], agent_ids: Sequence[str], placement: Placement,
                    args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None, *,
                    epochs: dict[str, int] | None = None, warm: bool = False,
                    gone: Collection[str] = (), priority: int | Mapping[str, int] | None = None,
                    ) -> list[AgentRecord]:
        """Starts agents and registers them; returns their registry records.

        ``epochs``: the least epoch of each new incarnation (see ``HostPort.add_agents``).
        ``priority``: their capabilities' priorities, in place of their class's (see
        ``HostPort.add_agents``).
        ``warm``: an agent of a placement with a spare key takes a warm spare host when one of
        that key is offered (a restart: no waiting for a new process), and its node's spares
        are topped up afterwards (:meth:`top_up`).
        ``gone``: hosts known to be dead (the one a restarted agent died with). One agent of a
        group then goes at once to the least loaded of the group's other hosts, by their agent
        counts as last seen here, without asking them first; if that host turns out dead too,
        the group is asked and the agent placed again.

        Raises:
            AgentAlreadyExists: an ID is live.
            ConfigError: an ID uses a prefix reserved for reach's own processes.
            AgentUnavailable: a placement of hosts of their own requires resources no live node
                has (also when the last node that had them dies while the host waits to be
                placed).
            Exception: what an agent's constructor or ``on_start`` raised.
        """
        check_agent_ids(*agent_ids)  # before a host is started for them (hosts check too)
        demand: dict[str, float] = {}
        needs, group = placement.host_needs(), placement.host_group()
        if group is not None:
            moved = (await self._move_in_group(cls, agent_ids[0], group, needs, gone, args=args,
                                              kwargs=kwargs, epochs=epochs,
                                              priority=priority)
                     if gone and len(agent_ids) == 1 else None)
            if moved is not None:
                return moved
            placed = await self._in_group(cls, agent_ids, group, needs)
        else:
            spare_key = placement.spare_key()
            if (warm and spare_key is not None and self.limits.spares > 0
                    and len(agent_ids) == 1):
                taken = await self._on_spare(cls, agent_ids[0], placement, spare_key, args=args,
                                             kwargs=kwargs, epochs=epochs,
                                             priority=priority)
                if taken is not None:
                    return taken
            demand = needs.requirements()
            if not self.placeable(demand):
                raise unplaceable(demand, agent_ids)
            placed = [(self._own_host(needs), [a], True) for a in agent_ids]
        results = await asyncio.gather(
            *(self._placed(h.add_agents(cls, ids, tuple(args), kwargs or {},
                                        {i: epochs[i] for i in ids if i in epochs}
                                        if epochs else None, priority=priority),
                           ids, demand)
              for h, ids, _ in placed),
            return_exceptions=True)
        records: list[AgentRecord] = []
        failure: BaseException | None = None
        for (host, ids, own), res in zip(placed, results, strict=True):
            if isinstance(res, BaseException):
                failure = failure or res
                if own:  # a host of its own whose agent did not start has nothing to host
                    self.cluster.kill(host)
            else:
                records.extend(res)
                if not own:
                    self._counts[host.name] = self._counts.get(host.name, 0) + len(ids)
        if failure is not None:
            raise failure
        return records

    def _own_host(self, needs: HostNeeds) -> HostPort:
        """Starts a host of its own for one agent."""
        strict = False
        demand = needs.requirements()
        if needs.node_id is not None and needs.num_cpus == 0 and not demand:
            # Ray places an actor that needs no resources on any node when its affinity is
            # soft: ask for the node outright while it is alive, and for none once it is not.
            strict = needs.node_id in self.live_nodes()
        node = needs.node_id if (needs.node_id is None or strict or needs.num_cpus != 0
                                 or demand) else None
        return self.cluster.start_host(own_host_name(), _shape(needs, node, strict=strict),
                                       self.limits)

    def _spare_shape(self, needs: HostNeeds, node: str) -> HostShape:
        """The shape of a warm spare of ``needs`` for ``node``: there and nowhere else while the
        node is alive (Ray honours a soft affinity only when the node has the resources free at
        that moment, and a spare elsewhere is counted for the other node, whose pool may retire
        it), on any node once it is not."""
        alive = node in self.live_nodes()
        if alive and needs.num_cpus is None:
            # An actor reserves a CPU by default only to be scheduled, none once it runs: a
            # spare pinned to its node needs none to be placed, so it does not queue behind
            # every other process being started there for a CPU to be scheduled with.
            needs = dataclasses.replace(needs, num_cpus=0)
        return _shape(needs, node if alive else None, strict=alive, lasting=True)

    async def _on_spare(self, cls: type[Agent], agent_id: str, p: Placement, key: str, *,
                        args: Sequence[Any], kwargs: dict[str, Any] | None,
                        epochs: dict[str, int] | None, priority: int | Mapping[str, int] | None,
                        ) -> list[AgentRecord] | None:
        """Starts an agent on a warm spare of its placement's key (its node's, else any
        node's); None when no live spare took it. Either way the node's spares are topped up
        afterwards, as many as the registry says the recent claims want."""
        registry = self.cluster.registry()
        node = p.host_needs().node_id or self.cluster.node_id()
        try:
            for _ in range(SPARE_TRIES):
                name = await registry.claim_spare(key, node)
                if name is None:
                    return None  # none was ready: the pool grows with the claims all the same
                try:
                    host = self.cluster.host(name)
                    return await host.add_agents(cls, [agent_id], tuple(args), kwargs or {},
                                                 epochs, priority=priority)
                except AgentUnavailable:
                    continue  # a spare that died since its last heartbeat: take another
                except BaseException:
                    self.cluster.kill(self.cluster.host(name))
                    raise
            return None
        finally:
            self._top_up_later(p, node, cls)

    def _top_up_later(self, p: Placement, node: str, cls: type[Agent]) -> None:
        """Tops up ``node``'s spares of ``p``'s key once the restart is done: a new process
        costs a core for a while, not to be taken from the restart."""
        def top_up() -> None:
            _read_later(self.top_up(p, node, (cls,)), "topping up the spares failed")

        asyncio.get_running_loop().call_later(REPLACE_AFTER_S, top_up)

    def start_spares(self, p: Placement, nodes: Sequence[str], count: int,
                     classes: Sequence[type[Agent]] = ()) -> list[HostPort]:
        """Starts ``count`` empty hosts of ``p``'s needs on each node (soft affinity), each
        offering itself as a warm spare of ``p``'s key once it runs, with ``classes`` (those of
        the agents it is likely to take) loaded ahead. Returns them at once (none when no spare
        applies to ``p``)."""
        key = p.spare_key()
        if key is None:
            return []
        needs = p.host_needs()
        started = []
        for node in nodes:
            for _ in range(count):
                # Lasting: a spare is the cluster's, not its starter's, and must not die with
                # the supervisor or driver that started it (it would be offered, dead, until its
                # heartbeats are missed, and counted as there by whoever tops the spares up).
                host = self.cluster.start_host(own_host_name(),
                                               self._spare_shape(needs, node), self.limits)
                offered = host.offer_as_spare(key)  # the call is under way: never awaited here
                _read_later(offered, "a spare host did not start")
                if classes:
                    _read_later(host.preload(list(classes)), "preloading a spare failed")
                started.append(host)
        return started

    async def top_up(self, p: Placement, node: str,
                     classes: Sequence[type[Agent]] = ()) -> list[HostPort]:
        """Starts as many warm spares of ``p``'s key on ``node`` as the registry says it lacks
        (the deployment's ``spares``, plus one per restart that claimed one there lately, up to
        ``max_spares``; it counts those already offered or starting), with ``classes`` loaded
        ahead. Returns them (none when no spare applies to ``p``)."""
        key = p.spare_key()
        if self.limits.spares <= 0 or key is None:
            return []
        count = await self.cluster.registry().top_up_spares(key, node, self.limits.spares,
                                                            self.limits.max_spares)
        return self.start_spares(p, [node], count, classes) if count > 0 else []

    async def keep_spares(self, p: Placement, node: str,
                          classes: Sequence[type[Agent]] = ()) -> None:
        """Tops up the warm spares of ``p``'s key on ``node`` (:meth:`top_up`), and looks up
        the ones ready there, so that a restart taking one need not. Nothing when no spare
        applies to ``p``."""
        key = p.spare_key()
        if self.limits.spares <= 0 or key is None:
            return
        await self.top_up(p, node, classes)
        offered = await self.cluster.registry().spares()
        for name in offered.get(f"{node} {key}", ()):  # by name now, not on a restart's path
            with contextlib.suppress(AgentUnavailable):
                self.cluster.host(name)

    def _group_hosts(self, group: HostGroup, needs: HostNeeds) -> list[HostPort]:
        hosts = self._groups.get(group.name)
        if hosts is None:
            shape = _shape(needs, needs.node_id, lasting=True)
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
            _read_later(host.preload(new), f"preloading {host.name} failed")

    async def _in_group(self, cls: type[Agent], agent_ids: Sequence[str], group: HostGroup,
                       needs: HostNeeds) -> list[tuple[HostPort, list[str], bool]]:
        """Which of the group's live hosts takes which agents (least loaded first)."""
        hosts, counts = await self._live_group(group, needs)
        groups: dict[int, list[str]] = {}
        for agent_id in agent_ids:
            i = least_loaded(counts)
            counts[i] += 1
            groups.setdefault(i, []).append(agent_id)
        for i in groups:
            self._ready_everywhere(group, cls, hosts[i].name)
        return [(hosts[i], ids, False) for i, ids in groups.items()]

    async def _move_in_group(self, cls: type[Agent], agent_id: str, group: HostGroup,
                            needs: HostNeeds, gone: Collection[str], *, args: Sequence[Any],
                            kwargs: dict[str, Any] | None, epochs: dict[str, int] | None,
                            priority: int | Mapping[str, int] | None) -> list[AgentRecord] | None:
        """Starts an agent whose group host died on the least loaded of the group's other
        hosts, as last seen here, without asking them; None when they were never seen, or the
        one chosen is dead too."""
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
        self._counts[host.name] = self._counts.get(host.name, 0) + 1
        self._ready_everywhere(group, cls, host.name)
        return records

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
        shape = _shape(needs, needs.node_id, lasting=True)
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

    async def _placed(self, call: Awaitable[T], agent_ids: list[str],
                      demand: dict[str, float]) -> T:
        """Awaits a host's ``add_agents`` call; while a host with requirements waits to be
        placed, checks that some live node can still take it (the one node that could may have
        died)."""
        future = asyncio.ensure_future(call)
        while demand:
            done, _ = await asyncio.wait({future}, timeout=PLACEMENT_CHECK_S)
            if done:
                break
            if not self.placeable(demand):
                future.cancel()
                raise unplaceable(demand, agent_ids)
        return await future

    def live_nodes(self) -> set[str]:
        """IDs of the nodes of the cluster that are alive."""
        return {node.node_id for node in self.cluster.nodes() if node.alive}

    def placeable(self, demand: dict[str, float]) -> bool:
        """Whether some live node of the cluster has (in total) every resource of ``demand``."""
        if not demand:
            return True
        return any(node.alive and all(node.resources.get(k, 0.0) >= v for k, v in demand.items())
                   for node in self.cluster.nodes())


def _read_outcome(task: asyncio.Task[HostPort]) -> None:
    """A background replacement's failure is the next spawn's to meet: read it here."""
    if not task.cancelled():
        task.exception()


def _read_later(call: Awaitable[Any], failing: str) -> None:
    """Reads the outcome of a call nobody awaits (a failure is logged as ``failing``, not
    lost)."""
    def done(future: asyncio.Future[Any]) -> None:
        if not future.cancelled() and future.exception() is not None:
            log.warning("%s: %s", failing, future.exception())

    try:
        asyncio.get_running_loop()
    except RuntimeError:  # no event loop here (a synchronous driver): the call runs anyway
        return
    asyncio.ensure_future(call).add_done_callback(done)


def _shape(needs: HostNeeds, node: str | None, *, strict: bool = False,
           lasting: bool = False) -> HostShape:
    """The cluster's shape of a host of ``needs`` on ``node``."""
    return HostShape(num_cpus=needs.num_cpus, num_gpus=needs.num_gpus, memory=needs.memory,
                     resources=dict(needs.resources), node_id=node, node_strict=strict,
                     lasting=lasting)


def _replace_after(live: int) -> float:
    """How long a dead group host waits to be started again, ``live`` of its group's hosts
    being left: a new process costs a core for a while, so with two or more left it starts
    once the agents have moved and answered, not in their way; with one left or none it starts
    at once (a second death before it is up would leave the agents nowhere to go)."""
    return REPLACE_AFTER_S if live > 1 else 0.0


def shape_key(p: Placement) -> str:
    """The resource shape of a placement's hosts, as spares are offered and claimed by it (its
    node is a preference, not part of its shape)."""
    return p.host_needs().shape_key()


def least_loaded(counts: Sequence[int]) -> int:
    """The index of the least-loaded of several hosts (the first of equals)."""
    cands = [Candidate(f"{i:06d}", (), "", True, count) for i, count in enumerate(counts)]
    (best,) = pick_least_loaded(cands, 1)
    return int(best.agent_id)


def unplaceable(demand: dict[str, float], agent_ids: Sequence[str]) -> AgentUnavailable:
    """The error of agents whose placement no live node can satisfy."""
    wanted = ", ".join(f"{k}={v:g}" for k, v in sorted(demand.items()))
    return AgentUnavailable(
        f"no live node has the resources {wanted} that {', '.join(agent_ids)} requires",
        suggestion="add a node that has them, or choose a node with Dedicated(node_id=...), "
                   "which lets the agent move to another node when its node dies",
        details={"agent_id": agent_ids[0], "resources": wanted},
    )
