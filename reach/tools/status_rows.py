"""What ``reach status`` reports, as values: agent rows, supervision trees, the whole status.

Built from the registry's records and the supervisors' typed answers by pure functions
(:func:`agent_rows`, :func:`supervisor_forest`); :mod:`reach.tools.status` gathers the answers
and :mod:`reach.tools.status_format` turns the values into text.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from reach.records import (
    AgentRecord,
    AgentStatus,
    ChildKind,
    DeadLetter,
    SupervisorState,
    SupervisorStatus,
)


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
        capabilities: Its capability tags, each with its priority (0 the primary, 1, 2...
            backups), in the order it declares them.
    """

    agent_id: str
    node: str
    host: str
    status: AgentStatus
    load: int
    epoch: int
    capabilities: dict[str, int] = field(default_factory=dict)


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


def short_host(name: str) -> str:
    """A host's name without the ``reach.`` prefix every host name has."""
    return name.removeprefix("reach.")


def agent_rows(records: Iterable[AgentRecord], loads: Mapping[str, int]) -> list[AgentRow]:
    """Rows of registry records, sorted by ID; ``loads`` (from the hosts) beat the records'."""
    return sorted((AgentRow(agent_id=r.agent_id, node=r.node[:8], host=short_host(r.host),
                            status=r.status, load=loads.get(r.agent_id, r.load), epoch=r.epoch,
                            capabilities={t: r.priority_of(t) for t in r.capabilities})
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
