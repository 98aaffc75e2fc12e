"""What ``reach status`` shows: agents, supervisors, tasks and dead letters of a running cluster.

:func:`connect` joins a running Ray without ever starting one (through :mod:`reach._ray`, the
one module that talks to Ray); :func:`gather` asks the registry, every host and every supervisor
through the cluster's ports, each call bounded by a timeout. Everything else is pure: building
rows and trees from their typed answers (:func:`agent_rows`, :func:`supervisor_forest`) and
formatting them as text (:func:`format_status`).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, TypeVar

from reach._runtime.names import SUPERVISOR_PREFIX, supervisor_name
from reach.errors import AgentUnavailable, ConfigError, ReachError
from reach.records import (
    AgentRecord,
    AgentStatus,
    ChildKind,
    DeadLetter,
    SupervisorState,
    SupervisorStatus,
)

if TYPE_CHECKING:
    from reach._ray import RayCluster
    from reach.ports.cluster import NodeInfo
    from reach.ports.hosts import HostPort
    from reach.ports.registry import RegistryPort
    from reach.ports.supervisors import SupervisorPort

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


@dataclass(frozen=True)
class AgentRow:
    """One agent as the registry and its host see it.

    Attributes:
        agent_id: The agent's ID.
        node: The first 8 characters of its node's ID.
        host: Its host's name, without the ``reach.`` prefix.
        status: Where it is in its life (online, restarting, recovering, offline).
        load: Requests in flight (from its host when it answered, else the last heartbeat).
        epoch: Incarnation number, larger after each restart.
    """

    agent_id: str
    node: str
    host: str
    status: AgentStatus
    load: int
    epoch: int


@dataclass(frozen=True)
class ChildRow:
    """An agent child of a supervisor.

    Attributes:
        child_id: The agent's ID.
        restart: Its restart type (permanent, transient, temporary).
        restarts: How many times its supervisor restarted it.
        host: Its host, without the ``reach.`` prefix (empty while it restarts).
        kind: Always ``agent`` (tells it from a :class:`SupervisorNode` in JSON).
    """

    child_id: str
    restart: str
    restarts: int
    host: str = ""
    kind: ChildKind = ChildKind.AGENT


@dataclass(frozen=True)
class SupervisorNode:
    """A supervisor and its children in start order, sub-supervisors nested.

    Attributes:
        name: The supervisor's name.
        state: starting, running, stopping, stopped, failed, or unreachable.
        strategy: one_for_one, one_for_all or rest_for_one.
        node: The first 8 characters of its node's ID (empty if unknown).
        restart: How its parent treats it (empty for a root).
        restarts: How many times its parent restarted it.
        tasks: Its tasks by state.
        children: Its children, agents and supervisors.
        detail: Why it is unreachable, for an unreachable one (may be empty).
        kind: Always ``supervisor``.
    """

    name: str
    state: SupervisorState
    strategy: str = ""
    node: str = ""
    restart: str = ""
    restarts: int = 0
    tasks: dict[str, int] = field(default_factory=dict)
    children: tuple[ChildRow | SupervisorNode, ...] = ()
    detail: str = ""
    kind: ChildKind = ChildKind.SUPERVISOR


@dataclass(frozen=True)
class ClusterStatus:
    """Everything ``reach status`` reports (``dataclasses.asdict`` makes it JSON-ready).

    Attributes:
        address: The cluster's address.
        taken_at: When it was gathered (seconds since the epoch).
        nodes: Nodes alive.
        hosts: Hosts holding agents; ``unreachable_hosts`` of them did not answer.
        agents: Every registered agent, sorted by ID.
        supervisors: The supervision trees, by root name.
        tasks: Tasks by state, over every supervisor.
        dead_letters: How many messages could not be delivered (as many as the registry keeps).
        recent_letters: The last few of them, oldest first.
        unreachable_hosts: Hosts that did not answer (their agents show the heartbeat's load).
    """

    address: str
    taken_at: float
    nodes: int
    hosts: int
    agents: tuple[AgentRow, ...]
    supervisors: tuple[SupervisorNode, ...]
    tasks: dict[str, int]
    dead_letters: int
    recent_letters: tuple[DeadLetter, ...]
    unreachable_hosts: tuple[str, ...] = ()


# -- connecting and gathering ----------------------------------------------------------------


def connect(address: str | None = None, probe_s: float = PROBE_S) -> str:
    """Joins a running Ray cluster (never starts one) and returns its address.

    Args:
        address: A cluster address, or ``"auto"``/None for RAY_ADDRESS, else the Ray started
            last on this machine.
        probe_s: How long the address may take to accept a TCP connection.

    Raises:
        ConfigError: no running cluster was found, or nothing answers at its address.
    """
    from reach import _ray

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
    from reach import _ray
    from reach.security.guard import SecurityConfig

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


# -- building rows and trees (pure) ----------------------------------------------------------


def short_host(name: str) -> str:
    """A host's name without the ``reach.`` prefix every host name has."""
    return name.removeprefix("reach.")


def agent_rows(records: Iterable[AgentRecord], loads: Mapping[str, int]) -> list[AgentRow]:
    """Rows of registry records, sorted by ID; ``loads`` (from the hosts) beat the records'."""
    return sorted((AgentRow(agent_id=r.agent_id, node=r.node[:8], host=short_host(r.host),
                            status=r.status, load=loads.get(r.agent_id, r.load), epoch=r.epoch)
                   for r in records), key=lambda row: row.agent_id)


def supervisor_node(status: SupervisorStatus, *, restart: str = "",
                    restarts: int = 0) -> SupervisorNode:
    """The tree of one supervisor's status (its subtree nested)."""
    counts = Counter(r.child for r in status.restarts)
    children: list[ChildRow | SupervisorNode] = []
    for child in status.children:
        sub = status.subtree.get(child.child_id)
        if sub is not None:
            children.append(supervisor_node(sub, restart=child.restart,
                                            restarts=counts[child.child_id]))
        else:
            children.append(ChildRow(child.child_id, child.restart, counts[child.child_id],
                                     short_host(child.host or "")))
    return SupervisorNode(name=status.name, state=status.state, strategy=status.strategy,
                          node=status.node[:8], restart=restart, restarts=restarts,
                          tasks=dict(status.tasks), children=tuple(children),
                          detail=status.detail)


def supervisor_forest(statuses: Mapping[str, SupervisorStatus]) -> list[SupervisorNode]:
    """The trees of every supervisor's status, by root name (a nested one is not a root)."""
    nested: set[str] = set()

    def collect(status: SupervisorStatus) -> None:
        for name, sub in status.subtree.items():
            nested.add(name)
            collect(sub)

    for status in statuses.values():
        collect(status)
    return [supervisor_node(statuses[name]) for name in sorted(statuses) if name not in nested]


def walk(nodes: Iterable[SupervisorNode]) -> Iterable[SupervisorNode]:
    """Every supervisor of the trees, each once, parents first."""
    for node in nodes:
        yield node
        yield from walk(c for c in node.children if isinstance(c, SupervisorNode))


def task_totals(forest: Iterable[SupervisorNode]) -> dict[str, int]:
    """Tasks by state over every supervisor of the trees."""
    total: Counter[str] = Counter()
    for node in walk(forest):
        total.update(node.tasks)
    return dict(sorted(total.items()))


# -- formatting (pure) -----------------------------------------------------------------------


def table(headers: Sequence[str], rows: Iterable[Sequence[object]], *,
          right: Iterable[int] = ()) -> list[str]:
    """Rows as aligned text columns under ``headers``; columns in ``right`` align right."""
    cells = [list(headers)] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    to_right = set(right)
    return ["  ".join(c.rjust(w) if i in to_right else c.ljust(w)
                      for i, (c, w) in enumerate(zip(row, widths, strict=True))).rstrip()
            for row in cells]


def format_agents(rows: Sequence[AgentRow], limit: int = 50) -> list[str]:
    """The agents section: a count by status, then a table (at most ``limit`` rows, 0: all)."""
    by_status = Counter(r.status for r in rows)
    summary = ", ".join(f"{n} {s}" for s, n in sorted(by_status.items()))
    lines = [f"agents: {len(rows)}" + (f" ({summary})" if rows else "")]
    if not rows:
        return lines
    shown = rows if limit <= 0 else rows[:limit]
    lines += ["  " + line for line in table(
        ("ID", "NODE", "HOST", "STATUS", "LOAD", "EPOCH"),
        ((r.agent_id, r.node, r.host, r.status, r.load, r.epoch) for r in shown),
        right=(4, 5))]
    if len(shown) < len(rows):
        lines.append(f"  ... and {len(rows) - len(shown)} more (--limit 0 shows all)")
    return lines


def _counts(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{state} {n}" for state, n in sorted(counts.items())) or "none"


def _supervisor_line(node: SupervisorNode) -> str:
    why = node.detail.strip().splitlines()  # an unreachable one's first line of why
    parts = [node.name, f"{node.state}: {why[0]}" if why else node.state]
    if node.strategy:
        parts.append(node.strategy)
    if node.node:
        parts.append(f"node {node.node}")
    if node.restart:
        parts += [node.restart, f"restarts {node.restarts}"]
    if node.tasks:
        parts.append(f"tasks: {_counts(node.tasks)}")
    return "  ".join(parts)


def format_tree(node: SupervisorNode) -> list[str]:
    """One supervision tree: the supervisor, then each child on its own branch."""
    return ["  " + _supervisor_line(node), *_branches(node, "  ")]


def _branches(node: SupervisorNode, indent: str) -> list[str]:
    lines = []
    width = max((len(c.child_id) for c in node.children if isinstance(c, ChildRow)), default=0)
    for i, child in enumerate(node.children):
        branch, below = ("└─ ", "   ") if i == len(node.children) - 1 else ("├─ ", "│  ")
        if isinstance(child, SupervisorNode):
            lines.append(indent + branch + _supervisor_line(child))
            lines += _branches(child, indent + below)
        else:
            host = f"  on {child.host}" if child.host else ""
            lines.append(f"{indent}{branch}{child.child_id.ljust(width)}  {child.restart}  "
                         f"restarts {child.restarts}{host}")
    return lines


def format_supervisors(forest: Sequence[SupervisorNode]) -> list[str]:
    """The supervisors section: each tree, indented, with restart counts."""
    lines = [f"supervisors: {sum(1 for _ in walk(forest))}"]
    for node in forest:
        lines += format_tree(node)
    return lines


def format_dead_letters(count: int, recent: Sequence[DeadLetter], now: float) -> list[str]:
    """The dead letters section: how many, then the last few with their age and reason."""
    lines = [f"dead letters: {count}" + (f" (last {len(recent)})" if recent else "")]
    for letter in recent:
        age = max(0.0, now - letter.at)
        lines.append(f"  {_age(age):>8} ago  {letter.code}  {letter.sender} -> {letter.receiver}"
                     f"  {letter.msg_type}  {letter.reason}".rstrip())
    return lines


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.0f} h"


def format_status(status: ClusterStatus, *, limit: int = 50) -> str:
    """The whole report, as ``reach status`` prints it."""
    hosts = f"{status.hosts} hosts" + (f" ({len(status.unreachable_hosts)} not answering: "
                                       f"{', '.join(map(short_host, status.unreachable_hosts))})"
                                       if status.unreachable_hosts else "")
    lines = [f"cluster {status.address}: {status.nodes} nodes, {hosts}", ""]
    lines += format_agents(status.agents, limit)
    lines += ["", *format_supervisors(status.supervisors)]
    lines += ["", f"tasks: {_counts(status.tasks)}"]
    lines += ["", *format_dead_letters(status.dead_letters, status.recent_letters,
                                       status.taken_at)]
    return "\n".join(lines)
