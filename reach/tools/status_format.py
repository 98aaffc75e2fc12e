"""``reach status`` as text: the agents' table, the supervision trees, tasks and dead letters
(pure: from the values of :mod:`reach.tools.status_rows`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from reach.records import DeadLetter
from reach.tools.status_rows import (
    AgentRow,
    ChildRow,
    ClusterStatus,
    SupervisorNode,
    short_host,
    walk,
)


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
    """The agents section: a count by status, then a table (at most ``limit`` rows, 0: all)
    whose last column lists each agent's capabilities, a backup's with its priority after a
    colon (``refund.issue,refund.status:1``)."""
    by_status = Counter(r.status for r in rows)
    summary = ", ".join(f"{n} {s}" for s, n in sorted(by_status.items()))
    lines = [f"agents: {len(rows)}" + (f" ({summary})" if rows else "")]
    if not rows:
        return lines
    shown = rows if limit <= 0 else rows[:limit]
    lines += ["  " + line for line in table(
        ("ID", "NODE", "HOST", "STATUS", "LOAD", "EPOCH", "CAPABILITIES"),
        ((r.agent_id, r.node, r.host, r.status, r.load, r.epoch, _capabilities(r))
         for r in shown),
        right=(4, 5))]
    if len(shown) < len(rows):
        lines.append(f"  ... and {len(rows) - len(shown)} more (--limit 0 shows all)")
    return lines


def _capabilities(row: AgentRow) -> str:
    return ",".join(tag if priority == 0 else f"{tag}:{priority}"
                    for tag, priority in row.capabilities.items())


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
