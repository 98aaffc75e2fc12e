"""The port of a host of agents, how a new host is placed, and the limits hosts share."""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field
from typing import NotRequired, Protocol, TypedDict

from reach.agent import Agent
from reach.placement import HostNeeds
from reach.ports.endpoint import Endpoint
from reach.records import AgentExit, AgentRecord


class HandlerDoc(TypedDict):
    """One handler of an agent, as :meth:`HostPort.describe` tells it (what the A2A gateway
    puts in an agent's card and validates a payload against)."""

    schema: str
    returns: str | None
    streaming: bool
    reads_text: bool
    json_schema: dict[str, object] | None


class HostInfo(TypedDict):
    """A host's agents with their requests in flight, its transport counters, memory and CPU
    time (and, of a remote agents' host, the agents connected now)."""

    host: str
    node: str
    rss_bytes: int
    cpu_s: float
    pid: int
    agents: dict[str, int]
    batches_sent: int
    envelopes_sent: int
    connected: NotRequired[list[str]]


class HostPort(Endpoint, Protocol):
    """A host of agents: one (dedicated) or many (a pool host)."""

    def add_agents(  # noqa: PLR0917 - a process call carries its arguments positionally
        self, cls: type[Agent], agent_ids: list[str], args: tuple[object, ...],
        kwargs: dict[str, object], epochs: dict[str, int] | None = None,
        priority: int | Mapping[str, int] | None = None,
    ) -> Awaitable[list[AgentRecord]]:
        """Constructs, starts and registers agents, each with an epoch of at least ``epochs``'
        (when given) and, when given, ``priority`` (one for all its capabilities, or one by tag)
        in place of the priorities its class declares; their records (AgentAlreadyExists, a
        ConfigError for a priority of a capability it does not hold, or what a constructor
        raised, on failure: nothing is then added)."""
        ...

    def remove_agents(self, agent_ids: list[str], timeout_s: float = 5.0) -> Awaitable[int]:
        """Deregisters agents, lets their handlers finish, drops them; how many were here."""
        ...

    def watch_agent(self, agent_id: str) -> Awaitable[AgentExit]:
        """Returns when the agent leaves this host (fails if the host dies)."""
        ...

    def cancel_trace(self, trace_id: str, reason: str) -> Awaitable[int]:
        """Cancels every running handler of a trace; how many."""
        ...

    def count(self) -> Awaitable[int]:
        """How many agents are here."""
        ...

    def quarantine(self, agent_id: str, prints: dict[str, tuple[int, float]]) -> Awaitable[int]:
        """Refuses from now on, as ``poison``, the requests to ``agent_id`` whose content has
        one of these fingerprints (each with the incarnations it killed and the seconds its
        quarantine lasts), whether the agent is here yet or not; how many are quarantined for
        it now."""
        ...

    def stop(self, timeout_s: float = 5.0) -> Awaitable[None]:
        """Removes every agent gracefully and releases the watches."""
        ...

    def flush_audit(self) -> Awaitable[int]:
        """Writes the buffered audit records now; how many."""
        ...

    def info(self) -> Awaitable[HostInfo]:
        """Agents here with their loads, transport counters and resident memory (for tools)."""
        ...

    def describe(self, agent_ids: list[str]) -> Awaitable[dict[str, list[HandlerDoc]]]:
        """The handlers of these agents (those here), by agent ID."""
        ...

    def offer_as_spare(self, shape: str) -> Awaitable[None]:
        """Offers this empty host to the registry as a warm spare of ``shape`` (until it is
        given agents), heartbeating so that a dead spare is never handed out for long; it ends
        its own process when the registry answers an offer with "retire"."""
        ...

    def preload(self, classes: list[type[Agent]]) -> Awaitable[int]:
        """Keeps agent classes this host is likely to be given loaded, ahead of their agents;
        how many it keeps."""
        ...


@dataclass(frozen=True)
class HostShape:
    """How a new host is placed and what it reserves.

    Attributes:
        num_cpus: CPUs reserved (the platform's default when None).
        num_gpus: GPUs reserved.
        memory: Bytes of memory reserved.
        resources: Custom resources required of its node.
        node_id: The node it should run on.
        node_strict: Only that node (otherwise: prefer it, go elsewhere when it is gone).
        lasting: Outlives its creator: a pool host (named, shared) or a warm spare (the
            cluster's, whoever started it). When it dies it is not restarted by the platform
            (so that its death is known at once): whoever needs a pool host starts it again
            under the same name (see :mod:`reach._runtime.pool_hosts`).
    """

    num_cpus: float | None = None
    num_gpus: float | None = None
    memory: int | None = None
    resources: Mapping[str, float] = field(default_factory=dict)
    node_id: str | None = None
    node_strict: bool = False
    lasting: bool = False

    @classmethod
    def of(cls, needs: HostNeeds, node: str | None, *, strict: bool = False,
           lasting: bool = False) -> HostShape:
        """The shape of a host of a placement's ``needs`` on ``node`` (only there if
        ``strict``; ``lasting`` as the attribute)."""
        return cls(num_cpus=needs.num_cpus, num_gpus=needs.num_gpus, memory=needs.memory,
                   resources=dict(needs.resources), node_id=node, node_strict=strict,
                   lasting=lasting)


@dataclass(frozen=True)
class CallLimits:
    """Settings every host and supervisor of a deployment shares.

    Attributes:
        max_hops: Longest call chain accepted.
        default_timeout_ms: Timeout of requests that give none.
        spares: Warm spare hosts kept ready per node and resource shape of dedicated agents
            (0: none; a dedicated agent's restart then waits for a new process).
        max_spares: At most this many per node and shape while restarts come fast (the pool
            grows with the recent claims, see :mod:`policies.spares`; never fewer than
            ``spares``).
    """

    max_hops: int = 16
    default_timeout_ms: int = 30_000
    spares: int = 1
    max_spares: int = 4


__all__ = ["CallLimits", "HandlerDoc", "HostInfo", "HostPort", "HostShape"]
