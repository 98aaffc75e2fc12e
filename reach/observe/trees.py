"""Supervision trees as the observer draws them, and the restarts that happened between two
looks, built by pure functions.

:func:`forest` joins what each supervisor reports (:class:`~reach.records.SupervisorStatus`:
its children, the restarts it made) with the registry's records (each agent child's status,
host and epoch): every child with its status, restarts and last exit reason. A supervisor with
many children shows the first :data:`CHILDREN_SHOWN` and counts the rest by status.
:func:`new_restarts` tells which restarts are new since the last look, so that the page makes
each flash where it happened.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from reach.observe.views import HostKind, host_kind
from reach.records import (
    AgentRecord,
    ChildKind,
    RestartRecord,
    SupervisorState,
    SupervisorStatus,
)

#: The most children of one supervisor drawn one by one (the rest are counted by status).
CHILDREN_SHOWN = 200


@dataclass(frozen=True, slots=True)
class ChildView:
    """An agent child of a supervisor.

    Attributes:
        child_id: The agent's ID.
        restart: Its restart type (permanent, transient, temporary).
        status: Its status in the registry (empty when the registry does not know it).
        host: Its host (empty while it restarts).
        host_kind: What that host is.
        epoch: Its incarnation.
        restarts: How many times its supervisor restarted it.
        last_reason: Why it exited the last time it was restarted (empty when never).
        last_restart_at: When that restart was (epoch seconds; 0 when never).
        kind: Always ``agent``.
    """

    child_id: str
    restart: str
    status: str
    host: str
    host_kind: HostKind
    epoch: int
    restarts: int
    last_reason: str = ""
    last_restart_at: float = 0.0
    kind: ChildKind = ChildKind.AGENT


@dataclass(frozen=True, slots=True)
class TreeView:
    """A supervisor, and its children in start order (sub-supervisors nested).

    Attributes:
        name: Its name.
        state: Where it is in its life.
        strategy: one_for_one, one_for_all or rest_for_one.
        node: Its node's ID.
        restart: How its parent treats it (empty for a root).
        restarts: How many times its parent restarted it.
        last_reason: Why it exited when its parent last restarted it.
        tasks: Its tasks by state.
        children: The children drawn (the first :data:`CHILDREN_SHOWN`).
        hidden: Children not drawn, by status.
        detail: Why it is unreachable, for an unreachable one.
        kind: Always ``supervisor``.
    """

    name: str
    state: SupervisorState
    strategy: str = ""
    node: str = ""
    restart: str = ""
    restarts: int = 0
    last_reason: str = ""
    tasks: dict[str, int] = field(default_factory=dict)
    children: tuple[ChildView | TreeView, ...] = ()
    hidden: dict[str, int] = field(default_factory=dict)
    detail: str = ""
    kind: ChildKind = ChildKind.SUPERVISOR


@dataclass(frozen=True, slots=True)
class RestartEvent:
    """A restart a supervisor made since the last look.

    Attributes:
        supervisor: The supervisor that made it.
        child: The child restarted.
        at: When (epoch seconds).
        placement: Where the child went.
        latency_ms: From the exit's detection to the child running again.
        reason: Why it exited.
    """

    supervisor: str
    child: str
    at: float
    placement: str
    latency_ms: float
    reason: str


def flatten(statuses: Mapping[str, SupervisorStatus]) -> dict[str, SupervisorStatus]:
    """Every supervisor's status by name, those nested in a subtree included."""
    found: dict[str, SupervisorStatus] = {}

    def visit(status: SupervisorStatus) -> None:
        found.setdefault(status.name, status)
        for sub in status.subtree.values():
            visit(sub)

    for status in statuses.values():
        visit(status)
    return found


def _last(restarts: Iterable[RestartRecord]) -> dict[str, RestartRecord]:
    last: dict[str, RestartRecord] = {}
    for record in restarts:
        if record.child not in last or record.at >= last[record.child].at:
            last[record.child] = record
    return last


def tree(status: SupervisorStatus, records: Mapping[str, AgentRecord], *, restart: str = "",
         restarts: int = 0, last_reason: str = "",
         spares: Iterable[str] = ()) -> TreeView:
    """The tree of one supervisor's status, its agent children joined with their registry
    ``records`` (by agent ID), its subtree nested."""
    counts = Counter(r.child for r in status.restarts)
    last = _last(status.restarts)
    spare = set(spares)
    children: list[ChildView | TreeView] = []
    hidden: Counter[str] = Counter()
    for child in status.children:
        reason = last[child.child_id].reason if child.child_id in last else ""
        sub = status.subtree.get(child.child_id)
        if sub is not None or child.kind is ChildKind.SUPERVISOR:
            sub = sub or SupervisorStatus(child.child_id, SupervisorState.UNREACHABLE)
            children.append(tree(sub, records, restart=child.restart,
                                 restarts=counts[child.child_id], last_reason=reason,
                                 spares=spare))
            continue
        record = records.get(child.child_id)
        agent_status = record.status.value if record is not None else ""
        if len(children) >= CHILDREN_SHOWN:
            hidden[agent_status or "unknown"] += 1
            continue
        host = child.host or (record.host if record is not None else "")
        at = last[child.child_id].at if child.child_id in last else 0.0
        children.append(ChildView(
            child_id=child.child_id, restart=child.restart, status=agent_status, host=host,
            host_kind=host_kind(host, spare), epoch=record.epoch if record is not None else 0,
            restarts=counts[child.child_id], last_reason=reason, last_restart_at=at))
    return TreeView(name=status.name, state=status.state, strategy=status.strategy,
                    node=status.node, restart=restart, restarts=restarts,
                    last_reason=last_reason, tasks=dict(status.tasks), children=tuple(children),
                    hidden=dict(sorted(hidden.items())), detail=status.detail)


def forest(statuses: Mapping[str, SupervisorStatus], records: Iterable[AgentRecord],
           spares: Iterable[str] = ()) -> list[TreeView]:
    """The trees of every root supervisor (one nested in another's subtree is not a root), by
    name."""
    by_id = {r.agent_id: r for r in records}
    nested = {name for s in statuses.values() for name in flatten(s.subtree)}
    spare = set(spares)
    return [tree(statuses[name], by_id, spares=spare) for name in sorted(statuses)
            if name not in nested]


def new_restarts(before: Mapping[str, SupervisorStatus],
                 after: Mapping[str, SupervisorStatus]) -> list[RestartEvent]:
    """The restarts in ``after`` that ``before`` did not hold, oldest first; only of
    supervisors both hold (one seen for the first time has no news: its past restarts are not
    news)."""
    old, new = flatten(before), flatten(after)
    events: list[RestartEvent] = []
    for name, status in new.items():
        if name not in old:
            continue
        seen = {(r.child, r.at) for r in old[name].restarts}
        events.extend(RestartEvent(supervisor=name, child=r.child, at=r.at,
                                   placement=r.placement.value,
                                   latency_ms=round(r.latency_s * 1000, 1), reason=r.reason)
                      for r in status.restarts if (r.child, r.at) not in seen)
    return sorted(events, key=lambda e: e.at)


__all__ = ["CHILDREN_SHOWN", "ChildView", "RestartEvent", "TreeView", "flatten", "forest",
           "new_restarts", "tree"]
