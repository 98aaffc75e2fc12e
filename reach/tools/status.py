"""What ``reach status`` shows: agents, supervisors, tasks and dead letters of a running cluster.

:func:`connect` joins a running Ray without ever starting one (through :mod:`reach._ray`, the
one module that talks to Ray); :func:`gather` asks the registry, every host and every supervisor
through the cluster's ports, each call bounded by a timeout. Everything else is pure: building
rows and trees from their typed answers (:mod:`reach.tools.status_rows`: :func:`agent_rows`,
:func:`supervisor_forest`) and formatting them as text (:mod:`reach.tools.status_format`:
:func:`format_status`); this module gives their names too.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol, TypeVar

from reach import _ray
from reach._ray import RayCluster
from reach._runtime.names import SUPERVISOR_PREFIX, supervisor_name
from reach.errors import AgentUnavailable, ConfigError, ReachError
from reach.ports.cluster import NodeInfo
from reach.ports.hosts import HostPort
from reach.ports.registry import RegistryPort
from reach.ports.supervisors import SupervisorPort
from reach.records import SupervisorState, SupervisorStatus
from reach.security.guard import SecurityConfig
from reach.tools.status_format import (
    format_agents,
    format_dead_letters,
    format_status,
    format_supervisors,
    format_tree,
    table,
)
from reach.tools.status_rows import (
    AgentRow,
    ChildRow,
    ClusterStatus,
    SupervisorNode,
    agent_rows,
    short_host,
    supervisor_forest,
    supervisor_node,
    task_totals,
    walk,
)

T = TypeVar("T")

#: How long to wait for a TCP connection to the cluster's address before calling it unreachable.
PROBE_S = 2.0
#: The registry keeps at most this many dead letters; all of them are counted.
DEAD_LETTERS_KEPT = 10_000


class Observed(Protocol):
    """What ``reach status`` asks of a cluster: :class:`reach._ray.RayCluster` answers it all,
    and a unit test's stand-in needs nothing more."""

    def registry(self) -> RegistryPort:
        """The registry."""
        ...

    def host(self, name: str) -> HostPort:
        """A named host (AgentUnavailable when none lives)."""
        ...

    def supervisor(self, name: str) -> SupervisorPort:
        """A supervisor by its actor name (AgentNotFound when none runs)."""
        ...

    def nodes(self) -> Sequence[NodeInfo]:
        """Every node known, alive or not."""
        ...

    def named(self) -> list[str]:
        """Names of reach's live processes."""
        ...


def connect(address: str | None = None, probe_s: float = PROBE_S) -> str:
    """Joins a running Ray cluster (never starts one) and returns its address.

    Args:
        address: A cluster address, or ``"auto"``/None for RAY_ADDRESS, else the Ray started
            last on this machine.
        probe_s: How long the address may take to accept a TCP connection.

    Raises:
        ConfigError: no running cluster was found, or nothing answers at its address.
    """
    try:
        return _ray.join(address, probe_s)
    except AgentUnavailable as exc:  # for a command, a cluster not there is a wrong setting
        raise ConfigError(exc.message,
                          suggestion="start one (`ray start --head`, or a driver calling "
                                     "reach.init()), or pass --address / set RAY_ADDRESS",
                          details={**exc.details, "setting": "address"}) from exc


def find_cluster() -> RayCluster:
    """The reach deployment on the Ray this process joined (see :func:`connect`).

    Its security settings do not matter: ``reach status`` only reads, and reads are unsigned.

    Raises:
        ConfigError: reach has never run on this cluster (it has no registry).
    """
    cluster = _ray.RayCluster(SecurityConfig(sign=False))
    try:
        cluster.registry()
    except AgentUnavailable as exc:
        raise ConfigError("Ray is running, but reach has not been started on it (no registry)",
                          suggestion="start agents from a driver that calls reach.init()",
                          details={"setting": "address"}) from exc
    return cluster


async def gather(cluster: Observed, *, address: str = "", letters: int = 5,
                 timeout_s: float = 5.0) -> ClusterStatus:
    """Asks the registry, the hosts and the supervisors for their state.

    A host or supervisor that is gone, fails or does not answer within ``timeout_s`` is
    reported as such; only the registry must answer.

    Args:
        cluster: The cluster (:func:`find_cluster`, or a runtime's ``cluster``).
        address: The cluster's address, to show.
        letters: How many of the last dead letters to keep.
        timeout_s: How long each call may take.

    Raises:
        AgentUnavailable: the registry is gone or did not answer within ``timeout_s``.
    """
    try:
        registry = cluster.registry()
        records, dead = await asyncio.wait_for(asyncio.gather(
            registry.agents(), registry.dead_letters(DEAD_LETTERS_KEPT)), timeout_s)
    except (TimeoutError, AgentUnavailable) as exc:
        why = exc.message if isinstance(exc, AgentUnavailable) else f"no answer in {timeout_s} s"
        raise AgentUnavailable(f"the registry did not answer: {why}",
                               suggestion="try again; the registry may be restarting") from exc
    host_names = sorted({r.host for r in records if r.host})  # a placeholder has no host
    infos = await asyncio.gather(*(_loads(cluster, h, timeout_s) for h in host_names))
    loads: dict[str, int] = {}
    for info in infos:
        loads.update(info or {})
    sup_names = sorted(n.removeprefix(SUPERVISOR_PREFIX) for n in cluster.named()
                       if n.startswith(SUPERVISOR_PREFIX))
    answers = await asyncio.gather(*(_status(cluster, n, timeout_s) for n in sup_names))
    forest = supervisor_forest(dict(zip(sup_names, answers, strict=True)))
    return ClusterStatus(
        address=address, taken_at=time.time(),
        nodes=sum(1 for n in cluster.nodes() if n.alive), hosts=len(host_names),
        agents=tuple(agent_rows(records, loads)), supervisors=tuple(forest),
        tasks=task_totals(forest), dead_letters=len(dead),
        recent_letters=tuple(dead[-letters:] if letters > 0 else ()),
        unreachable_hosts=tuple(h for h, i in zip(host_names, infos, strict=True) if i is None))


async def _loads(cluster: Observed, host: str, timeout_s: float) -> dict[str, int] | None:
    """Requests in flight per agent of a host; None if it is gone or does not answer."""
    try:
        info = await _within(lambda: cluster.host(host).info(), timeout_s)
    except Exception:  # one broken host must not hide the others
        return None
    return {str(agent_id): int(n) for agent_id, n in info.get("agents", {}).items()}


async def _status(cluster: Observed, name: str, timeout_s: float) -> SupervisorStatus:
    """A supervisor's status; an unreachable one, with why, if it is gone or does not answer."""
    try:
        return await _within(lambda: cluster.supervisor(supervisor_name(name)).status(),
                             timeout_s)
    except Exception as exc:  # one broken supervisor must not hide the others
        detail = exc.message if isinstance(exc, ReachError) else f"{type(exc).__name__}: {exc}"
        return SupervisorStatus(name, SupervisorState.UNREACHABLE, detail=detail)


async def _within(call: Callable[[], Awaitable[T]], timeout_s: float) -> T:
    """Makes a call to a process (finding it may fail too) and waits ``timeout_s`` at most.

    Raises:
        AgentUnavailable: it did not answer in time.
        Exception: what the call raised.
    """
    try:
        return await asyncio.wait_for(call(), timeout_s)
    except TimeoutError as exc:
        raise AgentUnavailable(f"no answer within {timeout_s} s") from exc


__all__ = [
    "DEAD_LETTERS_KEPT", "PROBE_S", "AgentRow", "ChildRow", "ClusterStatus", "Observed",
    "SupervisorNode", "agent_rows", "connect", "find_cluster", "format_agents",
    "format_dead_letters", "format_status", "format_supervisors", "format_tree", "gather",
    "short_host", "supervisor_forest", "supervisor_node", "table", "task_totals", "walk",
]
