"""Placing agents on hosts, as their :class:`~reach.placement.Placement` says: a new host of its
own for each agent (a dedicated agent's), or a group of shared, named hosts (a packed pool, see
:mod:`reach._runtime.pool_hosts`).

Used by the driver's runtime and by supervisors alike, so an agent restarted by its supervisor is
placed exactly as it was first spawned. A host of its own is ended once it holds no agent
(:meth:`Spawner.release`), and a dedicated agent's restart takes a warm spare of its placement's
shape when one is ready (no waiting for a new process); so does a pool whose hosts are all dead,
for the agents it restarts (a spare it takes holds several of them). Spares are started where
the registry says they lack: it sees every restart's claim in the cluster and sizes each node's
pool of each shape to the recent claims (:mod:`policies.spares`). When a node dies, its hosts are
placed again on the nodes left (soft node affinity lets them leave it). An agent that requires
resources no live node has is not left waiting for them: its spawn fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import Any, TypeVar

from reach._runtime.names import check_agent_ids
from reach._runtime.pool_hosts import REPLACE_AFTER_S, PoolHosts
from reach._runtime.unawaited import read_later
from reach.agent import Agent
from reach.errors import AgentUnavailable
from reach.placement import HostNeeds, Placement, is_own_host, own_host_name
from reach.ports.cluster import Cluster
from reach.ports.hosts import CallLimits, HostPort, HostShape
from reach.records import AgentRecord

#: How often a dedicated host still waiting to be placed checks that some live node can take it.
PLACEMENT_CHECK_S = 1.0
#: How many claimed spares that turn out dead a restart tries before it starts a new host.
SPARE_TRIES = 3

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
        self.pools = PoolHosts(cluster, limits, self._pool_spare)

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
        the group is asked and the agent placed again. A group whose hosts are all dead takes
        a warm spare of its hosts' shape for its agents when one is ready, else waits for its
        hosts to be started again (:mod:`reach._runtime.pool_hosts`).

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
            moved = (await self.pools.move(cls, agent_ids[0], group, needs, gone, args=args,
                                           kwargs=kwargs, epochs=epochs, priority=priority)
                     if gone and len(agent_ids) == 1 else None)
            if moved is not None:
                return moved
            placed = [(h, ids, False)
                      for h, ids in await self.pools.place(cls, agent_ids, group, needs)]
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
                    self.pools.added(host.name, len(ids))
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
        return self.cluster.start_host(own_host_name(), HostShape.of(needs, node, strict=strict),
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
        return HostShape.of(needs, node if alive else None, strict=alive, lasting=True)

    async def _on_spare(self, cls: type[Agent], agent_id: str, p: Placement, key: str, *,
                        args: Sequence[Any], kwargs: dict[str, Any] | None,
                        epochs: dict[str, int] | None, priority: int | Mapping[str, int] | None,
                        ) -> list[AgentRecord] | None:
        """Starts an agent on a warm spare of its placement's key (its node's, else any
        node's); None when no live spare took it. Either way the node's spares are topped up
        afterwards, as many as the registry says the recent claims want."""
        needs = p.host_needs()
        node = needs.node_id or self.cluster.node_id()
        try:
            return await self._claimed(key, node, lambda host: host.add_agents(
                cls, [agent_id], tuple(args), kwargs or {}, epochs, priority=priority))
        finally:
            self._top_up_later(needs, key, node, (cls,))

    async def _pool_spare(self, needs: HostNeeds,
                          classes: Sequence[type[Agent]]) -> HostPort | None:
        """A live warm spare of ``needs``' shape for a pool whose hosts are all dead (a Packed
        pool's needs have a default ``Dedicated()``'s shape: its spares serve), on the pool's
        node, else this process's (any node's when that has none); None when none is ready.
        Either way the node's spares are topped up afterwards, with ``classes`` loaded."""
        if self.limits.spares <= 0:
            return None
        key, node = needs.shape_key(), needs.node_id or self.cluster.node_id()

        async def alive(host: HostPort) -> HostPort:
            await host.count()
            return host

        try:
            return await self._claimed(key, node, alive)
        finally:
            self._top_up_later(needs, key, node, classes)

    async def _claimed(self, key: str, node: str,
                       use: Callable[[HostPort], Awaitable[T]]) -> T | None:
        """Claims a warm spare of ``key`` (on ``node`` if one is there, else on any node) and
        returns what ``use`` makes of it; None when none is ready. A claimed spare found dead
        makes way for another (up to :data:`SPARE_TRIES`); one that ``use`` failed on
        otherwise is ended (taken, it would never be offered again)."""
        registry = self.cluster.registry()
        for _ in range(SPARE_TRIES):
            name = await registry.claim_spare(key, node)
            if name is None:
                return None  # none was ready: the pool grows with the claims all the same
            try:
                return await use(self.cluster.host(name))
            except AgentUnavailable:
                continue  # a spare that died since its last heartbeat: take another
            except BaseException:
                self.cluster.kill(self.cluster.host(name))
                raise
        return None

    def _top_up_later(self, needs: HostNeeds, key: str, node: str,
                      classes: Sequence[type[Agent]]) -> None:
        """Tops up ``node``'s spares of ``key`` once the restart is done: a new process
        costs a core for a while, not to be taken from the restart."""
        def top_up() -> None:
            read_later(self._top_up(needs, key, node, classes), "topping up the spares failed")

        asyncio.get_running_loop().call_later(REPLACE_AFTER_S, top_up)

    def start_spares(self, p: Placement, nodes: Sequence[str], count: int,
                     classes: Sequence[type[Agent]] = ()) -> list[HostPort]:
        """Starts ``count`` empty hosts of ``p``'s needs on each node (soft affinity), each
        offering itself as a warm spare of ``p``'s key once it runs, with ``classes`` (those of
        the agents it is likely to take) loaded ahead. Returns them at once (none when no spare
        applies to ``p``)."""
        key = p.spare_key()
        return [] if key is None else self._start_spares(p.host_needs(), key, nodes, count,
                                                         classes)

    def _start_spares(self, needs: HostNeeds, key: str, nodes: Sequence[str], count: int,
                      classes: Sequence[type[Agent]]) -> list[HostPort]:
        """:meth:`start_spares` of hosts of ``needs``, offered under ``key``."""
        started = []
        for node in nodes:
            for _ in range(count):
                # Lasting: a spare is the cluster's, not its starter's, and must not die with
                # the supervisor or driver that started it (it would be offered, dead, until its
                # heartbeats are missed, and counted as there by whoever tops the spares up).
                host = self.cluster.start_host(own_host_name(),
                                               self._spare_shape(needs, node), self.limits)
                offered = host.offer_as_spare(key)  # the call is under way: never awaited here
                read_later(offered, "a spare host did not start")
                if classes:
                    read_later(host.preload(list(classes)), "preloading a spare failed")
                started.append(host)
        return started

    async def top_up(self, p: Placement, node: str,
                     classes: Sequence[type[Agent]] = ()) -> list[HostPort]:
        """Starts as many warm spares of ``p``'s key on ``node`` as the registry says it lacks
        (the deployment's ``spares``, plus one per restart that claimed one there lately, up to
        ``max_spares``; it counts those already offered or starting), with ``classes`` loaded
        ahead. Returns them (none when no spare applies to ``p``)."""
        key = p.spare_key()
        return [] if key is None else await self._top_up(p.host_needs(), key, node, classes)

    async def _top_up(self, needs: HostNeeds, key: str, node: str,
                      classes: Sequence[type[Agent]]) -> list[HostPort]:
        """:meth:`top_up` of hosts of ``needs``, offered under ``key``."""
        if self.limits.spares <= 0:
            return []
        count = await self.cluster.registry().top_up_spares(key, node, self.limits.spares,
                                                            self.limits.max_spares)
        return self._start_spares(needs, key, [node], count, classes) if count > 0 else []

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

    async def release(self, host: HostPort, timeout_s: float) -> bool:
        """Ends a host of its own (:func:`~reach.placement.is_own_host`) once it holds no agent,
        after an agent was stopped on it: a dedicated agent's host ends with its agent, a warm
        spare a pool took ends with the last of the pool's agents on it (stopping one of them
        leaves the others be); a pool's named hosts outlast their agents. Whether it was ended
        (a host of its own found dead is ended all the same)."""
        if not is_own_host(host.name):
            return False
        with contextlib.suppress(AgentUnavailable):  # dead already: ended all the same
            if await host.count() > 0:
                return False
            await host.stop(timeout_s)
        self.cluster.kill(host)
        return True

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


def shape_key(p: Placement) -> str:
    """The resource shape of a placement's hosts, as spares are offered and claimed by it (its
    node is a preference, not part of its shape)."""
    return p.host_needs().shape_key()


def unplaceable(demand: dict[str, float], agent_ids: Sequence[str]) -> AgentUnavailable:
    """The error of agents whose placement no live node can satisfy."""
    wanted = ", ".join(f"{k}={v:g}" for k, v in sorted(demand.items()))
    return AgentUnavailable(
        f"no live node has the resources {wanted} that {', '.join(agent_ids)} requires",
        suggestion="add a node that has them, or choose a node with Dedicated(node_id=...), "
                   "which lets the agent move to another node when its node dies",
        details={"agent_id": agent_ids[0], "resources": wanted},
    )
