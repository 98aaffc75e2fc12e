"""Where agents run: the :class:`Placement` protocol the spawner consults, and reach's two
placements, :class:`Dedicated` (the default) and :class:`Packed`.

The spawner asks a placement four things, and nothing else:

- :meth:`Placement.host_needs`: what each host of its agents must have (resources reserved, a
  node preferred);
- :meth:`Placement.host_group`: the named hosts its agents share (a pool), or None when each
  agent gets a new host of its own, which lives and dies with it;
- :meth:`Placement.spare_key`: the shape under which warm spare hosts wait for its agents'
  restarts, or None when no spare applies;
- :meth:`Placement.restarted_as`: how a restart of one of its agents is recorded.

A restart follows from the answers: an agent of a group moves at once to the group's other live
hosts (least loaded first; a group with none left takes a warm spare of its hosts' shape,
:meth:`HostNeeds.shape_key`, when one is ready, and holds its agents there), one with a spare key
takes a warm spare of that key when one is ready, and any other gets a new host. A third
placement (say, hosts of a group chosen by the agent's ID) is a new class answering these four,
with no edit elsewhere.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from reach.records import RestartPlacement

#: Prefix of the names of hosts of their own (a dedicated agent's, or a warm spare), which are
#: ended once they hold no agent.
OWN_HOST_PREFIX = "reach.host."
#: Prefix of the names of pool hosts (``reach.pool.<pool>.<index>``), which outlast their agents.
POOL_PREFIX = "reach.pool."


@dataclass(frozen=True, slots=True)
class HostNeeds:
    """What a placement asks of each host it puts agents on (the spawner turns it into the
    cluster's host shape).

    Attributes:
        num_cpus: CPUs reserved for the host (the platform's default when None).
        num_gpus: GPUs reserved.
        memory: Bytes of memory reserved.
        resources: Custom resources required of its node.
        node_id: The node preferred (soft affinity: elsewhere when it is gone).
    """

    num_cpus: float | None = None
    num_gpus: float | None = None
    memory: int | None = None
    resources: Mapping[str, float] = field(default_factory=dict)
    node_id: str | None = None

    def requirements(self) -> dict[str, float]:
        """The resources a host of these needs requires of its node, by resource name (those
        reserved above zero)."""
        demand = {name: float(amount) for name, amount in self.resources.items()}
        for name, amount in (("CPU", self.num_cpus), ("GPU", self.num_gpus),
                             ("memory", self.memory)):
            if amount is not None:
                demand[name] = float(amount)
        return {name: amount for name, amount in demand.items() if amount > 0}

    def shape_key(self) -> str:
        """The resource shape, as warm spares are offered and claimed by it (the node is a
        preference, not part of it)."""
        res = ",".join(f"{k}={v:g}" for k, v in sorted(self.resources.items()))
        return (f"cpus={self.num_cpus} gpus={self.num_gpus} memory={self.memory} "
                f"resources={res}")


@dataclass(frozen=True, slots=True)
class HostGroup:
    """Hosts that agents share: named, started on first use, outlasting their agents.

    Attributes:
        name: The group's name (one set of hosts per name in a process).
        hosts: The names of its hosts, in order.
    """

    name: str
    hosts: tuple[str, ...]


class Placement(Protocol):
    """Where agents run, as the spawner asks it (see the module's docstring)."""

    def host_needs(self) -> HostNeeds:
        """What each host of these agents must have."""
        ...

    def host_group(self) -> HostGroup | None:
        """The hosts these agents share, or None: each gets a new host of its own."""
        ...

    def spare_key(self) -> str | None:
        """The shape warm spares wait under for these agents' restarts (None: no spare)."""
        ...

    def restarted_as(self) -> RestartPlacement:
        """How a restart of one of these agents is recorded."""
        ...


@dataclass(frozen=True)
class Dedicated(Placement):
    """Placement of one agent in its own Ray actor, with its own resources; its restart takes a
    warm spare host of its shape when one is ready.

    Attributes:
        num_cpus: CPUs reserved for the agent's actor (Ray's default when None).
        num_gpus: GPUs reserved.
        memory: Bytes of memory reserved.
        resources: Custom resources, e.g. ``{"gpu_box": 1}``. These are requirements: an agent
            that needs a resource no live node has cannot be placed, and its spawn (or its
            supervisor's restart of it) fails with ``AgentUnavailable`` instead of waiting.
        node_id: Hex ID of the node to run on (soft affinity: elsewhere if it is gone). Use it,
            not a node's custom resource, to choose a node an agent may leave when it dies.
    """

    num_cpus: float | None = None
    num_gpus: float | None = None
    memory: int | None = None
    resources: dict[str, float] = field(default_factory=dict)
    node_id: str | None = None

    def host_needs(self) -> HostNeeds:
        """Its resources and node."""
        return HostNeeds(self.num_cpus, self.num_gpus, self.memory, dict(self.resources),
                         self.node_id)

    def host_group(self) -> None:
        """None: each agent gets a host of its own."""
        return

    def spare_key(self) -> str:
        """Its resource shape: warm spares of it take its agents' restarts."""
        return self.host_needs().shape_key()

    def restarted_as(self) -> RestartPlacement:
        """``dedicated``."""
        return RestartPlacement.DEDICATED


@dataclass(frozen=True)
class Packed(Placement):
    """Placement of a light agent in a pool of shared hosts (many agents per Ray actor); its
    restart moves it at once to the pool's other live hosts, or, when none is left, to a warm
    spare the pool takes while its hosts are started again.

    Attributes:
        pool: Name of the pool; pools are created on first use and shared by drivers.
        size: Number of hosts in the pool (used when the pool is created).
        node_id: Hex ID of the node the pool's hosts run on (used when the pool is created;
            soft affinity: a host whose node dies is restarted on another node).
    """

    pool: str = "default"
    size: int = 2
    node_id: str | None = None

    def host_needs(self) -> HostNeeds:
        """No resources of its own; the pool's node."""
        return HostNeeds(node_id=self.node_id)

    def host_group(self) -> HostGroup:
        """The pool: hosts ``reach.pool.<pool>.0`` to ``reach.pool.<pool>.<size - 1>``."""
        return HostGroup(self.pool, tuple(pool_host_name(self.pool, i) for i in range(self.size)))

    def spare_key(self) -> None:
        """None: a packed agent moves to a live host of its pool, it takes no spare of its own
        (a pool whose hosts are all dead takes one of its hosts' shape, that of a default
        :class:`Dedicated`, for the agents it restarts)."""
        return

    def restarted_as(self) -> RestartPlacement:
        """``packed``."""
        return RestartPlacement.PACKED


def pool_host_name(pool: str, index: int) -> str:
    """The name of host ``index`` of pool ``pool``."""
    return f"{POOL_PREFIX}{pool}.{index}"


def own_host_name() -> str:
    """A fresh name for a host of its own (a dedicated agent's, or a warm spare)."""
    return f"{OWN_HOST_PREFIX}{secrets.token_hex(6)}"


def is_own_host(name: str) -> bool:
    """Whether a host is one of its own: a dedicated agent's, or a warm spare (empty, or taken
    by a pool whose hosts were all dead, then holding several of the pool's agents). Such a
    host is ended once it holds no agent; a pool's named hosts outlast their agents."""
    return name.startswith(OWN_HOST_PREFIX)


__all__ = ["OWN_HOST_PREFIX", "POOL_PREFIX", "Dedicated", "HostGroup", "HostNeeds", "Packed",
           "Placement", "is_own_host", "own_host_name", "pool_host_name"]
