"""What ``reach status`` shows: agents, supervisors, tasks and dead letters of a running cluster.

:func:`connect` joins a running Ray without ever starting one; :func:`gather` asks the registry,
every host and every supervisor, each call bounded by a timeout. Everything else is pure:
building rows and trees from their answers (:func:`agent_rows`, :func:`supervisor_forest`) and
formatting them as text (:func:`format_status`).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import ray

from reach.errors import AgentUnavailable, ConfigError
from reach.names import NAMESPACE, REGISTRY_NAME, supervisor_name

#: How long to wait for a TCP connection to the cluster's address before calling it unreachable.
PROBE_S = 2.0
#: The registry keeps at most this many dead letters; all of them are counted.
DEAD_LETTERS_KEPT = 10_000
SUPERVISOR_PREFIX = supervisor_name("")


@dataclass(frozen=True)
class AgentRow:
    """One agent as the registry and its host see it.

    Attributes:
        agent_id: The agent's ID.
        node: The first 8 characters of its Ray node's ID.
        host: Its host's actor name, without the ``reach.`` prefix.
        status: ``online``, ``offline``, ``restarting``...
        load: Requests in flight (from its host when it answered, else the last heartbeat).
        epoch: Incarnation number, larger after each restart.
    """

    agent_id: str
    node: str
    host: str
    status: str
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
    kind: str = "agent"


@dataclass(frozen=True)
class SupervisorNode:
    """A supervisor and its children in start order, sub-supervisors nested.

    Attributes:
        name: The supervisor's name.
        state: ``running``, ``stopped``, ``failed``... or ``unreachable: <why>``.
        strategy: one_for_one, one_for_all or rest_for_one.
        node: The first 8 characters of its Ray node's ID (empty if unknown).
        restart: How its parent treats it (empty for a root).
        restarts: How many times its parent restarted it.
        tasks: Its tasks by state.
        children: Its children, agents and supervisors.
        kind: Always ``supervisor``.
    """

    name: str
    state: str
    strategy: str = ""
    node: str = ""
    restart: str = ""
    restarts: int = 0
    tasks: dict[str, int] = field(default_factory=dict)
    children: tuple[ChildRow | SupervisorNode, ...] = ()
    kind: str = "supervisor"


@dataclass(frozen=True)
class ClusterStatus:
    """Everything ``reach status`` reports.

    Attributes:
        address: The cluster's address.
        taken_at: When it was gathered (seconds since the epoch).
        nodes: Ray nodes alive.
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
    recent_letters: tuple[dict[str, Any], ...]
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
    from ray._private.services import canonicalize_bootstrap_address_or_die

    suggestion = "start one (`ray start --head`, or a driver calling reach.init()), " \
                 "or pass --address / set RAY_ADDRESS"
    try:  # Ray's own resolution: RAY_ADDRESS, the last `ray start`, a Ray process on this machine
        where = address if address and address.startswith("ray://") else \
            canonicalize_bootstrap_address_or_die(address)  # type: ignore[arg-type] # None: auto
    except (ConnectionError, ValueError) as exc:
        raise ConfigError(f"no running Ray cluster found: {exc}", suggestion=suggestion,
                          details={"setting": "address"}) from exc
    host, _, port = where.removeprefix("ray://").rpartition(":")
    try:  # ray.init would retry an address where nothing listens for minutes
        with socket.create_connection((host, int(port)), timeout=probe_s):
            pass
    except (OSError, ValueError) as exc:
        raise ConfigError(f"no Ray cluster answers at {where} ({exc})", suggestion=suggestion,
                          details={"setting": "address", "address": where}) from exc
    ray.init(address=where, namespace=NAMESPACE, log_to_driver=False,
             logging_level=logging.ERROR)
    return where


def find_registry() -> Any:
    """The registry actor of the cluster this process is connected to.

    Raises:
        ConfigError: reach has never run on this cluster (it has no registry).
    """
    try:
        return ray.get_actor(REGISTRY_NAME, namespace=NAMESPACE)
    except ValueError as exc:
        raise ConfigError("Ray is running, but reach has not been started on it (no registry)",
                          suggestion="start agents from a driver that calls reach.init()",
                          details={"setting": "address"}) from exc


async def gather(registry: Any, *, address: str = "", letters: int = 5,
                 timeout_s: float = 5.0) -> ClusterStatus:
    """Asks the registry, the hosts and the supervisors for their state.

    Args:
        registry: Handle of the Registry actor.
        address: The cluster's address, to show.
        letters: How many of the last dead letters to keep.
        timeout_s: How long each call may take.

    Raises:
        AgentUnavailable: the registry did not answer within ``timeout_s``.
    """
    try:
        records, dead = await asyncio.wait_for(asyncio.gather(
            registry.agents.remote(), registry.dead_letters.remote(DEAD_LETTERS_KEPT)),
            timeout_s)
    except (TimeoutError, ray.exceptions.RayError) as exc:
        raise AgentUnavailable(f"the registry did not answer within {timeout_s} s: {exc}",
                               suggestion="try again; the registry may be restarting") from exc
    host_names = sorted({r["host"] for r in records})
    infos = await asyncio.gather(*(_ask(h, "info", timeout_s) for h in host_names))
    loads: dict[str, int] = {}
    for info in infos:
        if info is not None:
            loads.update(info["agents"])
    sup_names = sorted(n["name"].removeprefix(SUPERVISOR_PREFIX)
                       for n in ray.util.list_named_actors(all_namespaces=True)
                       if n["namespace"] == NAMESPACE and n["name"].startswith(SUPERVISOR_PREFIX))
    answers = await asyncio.gather(
        *(_ask(supervisor_name(n), "status", timeout_s) for n in sup_names))
    statuses = {n: a if a is not None else {"name": n, "state": "unreachable"}
                for n, a in zip(sup_names, answers, strict=True)}
    forest = supervisor_forest(statuses)
    return ClusterStatus(
        address=address, taken_at=time.time(),
        nodes=len([n for n in ray.nodes() if n.get("Alive")]),  # type: ignore[no-untyped-call]
        hosts=len(host_names),
        agents=tuple(agent_rows(records, loads)), supervisors=tuple(forest),
        tasks=task_totals(forest), dead_letters=len(dead),
        recent_letters=tuple(dead[-letters:] if letters > 0 else ()),
        unreachable_hosts=tuple(h for h, i in zip(host_names, infos, strict=True) if i is None))


async def _ask(actor_name: str, method: str, timeout_s: float) -> Any:
    """Calls ``method`` of a named actor; None if it is gone or does not answer in time."""
    try:
        handle = ray.get_actor(actor_name, namespace=NAMESPACE)
        return await asyncio.wait_for(getattr(handle, method).remote(), timeout_s)
    except (ValueError, TimeoutError, ray.exceptions.RayError):
        return None


# -- building rows and trees (pure) ----------------------------------------------------------


def short_host(name: str) -> str:
    """A host's actor name without the ``reach.`` prefix every host name has."""
    return name.removeprefix("reach.")


def agent_rows(records: Iterable[Mapping[str, Any]], loads: Mapping[str, int]) -> list[AgentRow]:
    """Rows of registry records, sorted by ID; ``loads`` (from the hosts) beat the records'."""
    return sorted((AgentRow(agent_id=r["agent_id"], node=str(r.get("node", ""))[:8],
                            host=short_host(r["host"]), status=r["status"],
                            load=int(loads.get(r["agent_id"], r.get("load", 0))),
                            epoch=int(r.get("epoch", 0)))
                   for r in records), key=lambda row: row.agent_id)


def supervisor_node(status: Mapping[str, Any], *, restart: str = "",
                    restarts: int = 0) -> SupervisorNode:
    """The tree of one supervisor's ``status()`` answer (its subtree nested)."""
    counts = Counter(str(r.get("child")) for r in status.get("restarts", ()))
    subtree: Mapping[str, Any] = status.get("subtree", {})
    children: list[ChildRow | SupervisorNode] = []
    for child in status.get("children", ()):
        child_id, child_restart = str(child["id"]), str(child.get("restart", ""))
        if child_id in subtree:
            children.append(supervisor_node(subtree[child_id], restart=child_restart,
                                            restarts=counts[child_id]))
        else:
            children.append(ChildRow(child_id, child_restart, counts[child_id],
                                     short_host(child.get("host") or "")))
    return SupervisorNode(name=str(status.get("name", "?")), state=str(status.get("state", "?")),
                          strategy=str(status.get("strategy", "")),
                          node=str(status.get("node") or "")[:8], restart=restart,
                          restarts=restarts, tasks=dict(status.get("tasks", {})),
                          children=tuple(children))


def supervisor_forest(statuses: Mapping[str, Mapping[str, Any]]) -> list[SupervisorNode]:
    """The trees of every supervisor's status, by root name (a nested one is not a root)."""
    nested: set[str] = set()

    def collect(status: Mapping[str, Any]) -> None:
        for name, sub in status.get("subtree", {}).items():
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
    parts = [node.name, node.state]
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


def format_dead_letters(count: int, recent: Sequence[Mapping[str, Any]], now: float) -> list[str]:
    """The dead letters section: how many, then the last few with their age and reason."""
    lines = [f"dead letters: {count}" + (f" (last {len(recent)})" if recent else "")]
    for letter in recent:
        age = max(0.0, now - float(letter.get("at", now)))
        lines.append(f"  {_age(age):>8} ago  {letter.get('code', '?')}  "
                     f"{letter.get('sender', '?')} -> {letter.get('receiver', '?')}  "
                     f"{letter.get('msg_type', '')}  {letter.get('reason', '')}".rstrip())
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
