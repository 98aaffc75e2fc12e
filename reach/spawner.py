"""Placing agents on hosts: a new AgentHost per dedicated agent, or a pool of shared hosts.

Used by the driver's runtime and by supervisors alike, so an agent restarted by its supervisor is
placed exactly as it was first spawned. Pool hosts are named, shared by every driver and
supervisor, and restarted by Ray when their process dies (empty: their supervisors re-add their
agents); a dedicated host lives and dies with its one agent.

When a node dies, its hosts are placed again on the nodes left: a pool host by Ray (soft node
affinity lets it leave its node), a dedicated host by the supervisor that restarts its agent. An
agent that requires resources no live node has is not left waiting for them: its spawn fails.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Sequence
from typing import Any

import ray

from reach.agent import Agent, Dedicated, Packed, Placement
from reach.errors import AgentUnavailable
from reach.names import DEDICATED_PREFIX, NAMESPACE, POOL_PREFIX
from reach.transport import Transport

#: How often a dedicated host still waiting to be placed checks that some live node can take it.
PLACEMENT_CHECK_S = 1.0


class Spawner:
    """Creates hosts and adds agents to them.

    Args:
        registry: Handle of the Registry actor (given to every host).
        transport: The process's transport (learns the new hosts' handles).
        max_hops: Longest call chain hosts accept.
        default_timeout_ms: Timeout of requests made from handlers that give none.
    """

    def __init__(self, registry: Any, transport: Transport, max_hops: int,
                 default_timeout_ms: int) -> None:
        self.registry = registry
        self.transport = transport
        self.max_hops = max_hops
        self.default_timeout_ms = default_timeout_ms
        self._pools: dict[str, list[Any]] = {}

    async def spawn(self, cls: type[Agent], agent_ids: Sequence[str], placement: Placement,
                    args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None,
                    ) -> list[dict[str, Any]]:
        """Starts agents and registers them; returns their registry entries (with ``host``).

        Raises:
            AgentAlreadyExists: an ID is live.
            AgentUnavailable: a dedicated placement requires resources no live node has (also
                when the last node that had them dies while the host waits to be placed).
            Exception: what an agent's constructor or ``on_start`` raised.
        """
        demand: dict[str, float] = {}
        if isinstance(placement, Packed):
            hosts = self._pool(placement)
            counts = await asyncio.gather(*(h.count.remote() for h in hosts))
            groups: dict[int, list[str]] = {}
            for agent_id in agent_ids:
                i = min(range(len(hosts)), key=lambda j: counts[j])
                counts[i] += 1
                groups.setdefault(i, []).append(agent_id)
            placed = [(hosts[i], ids, False) for i, ids in groups.items()]
        else:
            demand = requirements(placement)
            if not placeable(demand):
                raise unplaceable(demand, agent_ids)
            placed = [(self._dedicated(placement), [a], True) for a in agent_ids]
        results = await asyncio.gather(
            *(_placed(h.add_agents.remote(cls, ids, tuple(args), kwargs or {}), ids, demand)
              for h, ids, _ in placed),
            return_exceptions=True)
        entries: list[dict[str, Any]] = []
        failure: BaseException | None = None
        for (host, _, own), res in zip(placed, results, strict=True):
            if isinstance(res, BaseException):
                failure = failure or unwrap(res)
                if own:  # a dedicated host whose agent did not start has nothing to host
                    ray.kill(host)
            else:
                entries.extend(res)
        if failure is not None:
            raise failure
        return entries

    def _new_host(self, name: str, **options: Any) -> Any:
        from actors.host import AgentHost

        host_cls: Any = AgentHost  # a Ray actor class: typed by ray.remote, not by its body
        handle = host_cls.options(name=name, namespace=NAMESPACE, max_concurrency=10_000,
                                  **options).remote(name, NAMESPACE, self.registry,
                                                    self.max_hops, self.default_timeout_ms)
        self.transport.remember(name, handle)
        return handle

    def _dedicated(self, p: Dedicated) -> Any:
        options: dict[str, Any] = {}
        if p.num_cpus is not None:
            options["num_cpus"] = p.num_cpus
        if p.num_gpus is not None:
            options["num_gpus"] = p.num_gpus
        if p.memory is not None:
            options["memory"] = p.memory
        if p.resources:
            options["resources"] = dict(p.resources)
        if p.node_id is not None:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            if p.num_cpus != 0 or requirements(p):
                options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(p.node_id,
                                                                                soft=True)
            elif p.node_id in live_nodes():
                # Ray places an actor that needs no resources on any node when its affinity is
                # soft: ask for the node outright while it is alive, and for none once it is not.
                options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(p.node_id,
                                                                                soft=False)
        return self._new_host(f"{DEDICATED_PREFIX}{secrets.token_hex(6)}", **options)

    def _pool(self, p: Packed) -> list[Any]:
        hosts = self._pools.get(p.pool)
        if hosts is None:
            options: dict[str, Any] = {}
            if p.node_id is not None:
                from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

                options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(p.node_id,
                                                                                soft=True)
            hosts = [self._new_host(f"{POOL_PREFIX}{p.pool}.{i}", get_if_exists=True,
                                    lifetime="detached", max_restarts=-1, **options)
                     for i in range(p.size)]
            self._pools[p.pool] = hosts
        return hosts


async def _placed(ref: Any, agent_ids: list[str], demand: dict[str, float]) -> Any:
    """Awaits a host's ``add_agents`` call; while a host with requirements waits to be placed,
    checks that some live node can still take it (the one node that could may have died)."""
    call = asyncio.ensure_future(ref)
    while demand:
        done, _ = await asyncio.wait({call}, timeout=PLACEMENT_CHECK_S)
        if done:
            break
        if not placeable(demand):
            call.cancel()
            raise unplaceable(demand, agent_ids)
    return await call


def requirements(p: Dedicated) -> dict[str, float]:
    """The resources a dedicated placement requires of its node, by Ray resource name."""
    demand = {name: float(amount) for name, amount in p.resources.items()}
    for name, amount in (("CPU", p.num_cpus), ("GPU", p.num_gpus), ("memory", p.memory)):
        if amount is not None:
            demand[name] = float(amount)
    return {name: amount for name, amount in demand.items() if amount > 0}


def _nodes() -> list[dict[str, Any]]:
    nodes: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
    return nodes


def live_nodes() -> set[str]:
    """Hex IDs of the nodes of the cluster that are alive."""
    return {str(node["NodeID"]) for node in _nodes() if node.get("Alive")}


def placeable(demand: dict[str, float]) -> bool:
    """Whether some live node of the cluster has (in total) every resource of ``demand``."""
    if not demand:
        return True
    for node in _nodes():
        total = node.get("Resources", {})
        if node.get("Alive") and all(total.get(k, 0.0) >= v for k, v in demand.items()):
            return True
    return False


def unplaceable(demand: dict[str, float], agent_ids: Sequence[str]) -> AgentUnavailable:
    """The error of agents whose placement no live node can satisfy."""
    wanted = ", ".join(f"{k}={v:g}" for k, v in sorted(demand.items()))
    return AgentUnavailable(
        f"no live node has the resources {wanted} that {', '.join(agent_ids)} requires",
        suggestion="add a node that has them, or choose a node with Dedicated(node_id=...), "
                   "which lets the agent move to another node when its node dies",
        details={"agent_id": agent_ids[0], "resources": wanted},
    )


def unwrap(exc: BaseException) -> BaseException:
    """The user-facing exception inside a Ray task error (a ReachError, or the original)."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, BaseException) else exc
