"""What the observer shows of the cluster and its agents, as values built by pure functions.

:func:`cluster_view` sums up the nodes, hosts (by :class:`HostKind`), agents by status and the
message rate; :func:`agents_page` filters the registry's records by capability and by text and
cuts one page of them, and :func:`agent_groups` aggregates them per host or per capability, so
that a cluster of 10,000 agents is shown in pages and totals, never in one table. Every value
is a frozen dataclass that :func:`dataclasses.asdict` turns into the JSON the page reads.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from policies.discovery import match_kind
from reach._runtime.names import DEDICATED_PREFIX, POOL_PREFIX, REMOTE_PREFIX
from reach.ports.cluster import NodeInfo
from reach.records import AgentRecord, AgentStatus
from reach.spans import TraceEdge

#: The most agents one page holds.
MAX_PAGE = 500


class HostKind(StrEnum):
    """What a host is, by its name and the registry's spares."""

    DEDICATED = "dedicated"
    """A host of its own (``reach.host.``), no longer offered as a spare: a dedicated agent's,
    or a warm spare a pool took when all its hosts were dead (then holding several of the
    pool's agents)."""
    POOL = "pool"
    """A host of a pool of packed agents."""
    SPARE = "spare"
    """A warm spare, empty, waiting for a restart to take it."""
    REMOTE = "remote"
    """The host of the remote agents that dialled in through a gateway replica."""
    OTHER = "other"


class GroupBy(StrEnum):
    """What :func:`agent_groups` aggregates by."""

    HOST = "host"
    CAPABILITY = "capability"


@dataclass(frozen=True, slots=True)
class ClusterView:
    """The cluster at a glance.

    Attributes:
        nodes: Nodes alive.
        nodes_dead: Nodes known but dead.
        hosts: Live hosts by :class:`HostKind` (a spare counted as a spare only).
        pools: Agents per pool (by the pool's name).
        agents: Agents by status (every :class:`~reach.records.AgentStatus`, zeros included).
        messages_per_s: Envelopes sent per second by the hosts sampled (None before a second
            sample).
        dead_letters: Dead letters the registry holds.
    """

    nodes: int
    nodes_dead: int
    hosts: dict[str, int]
    pools: dict[str, int]
    agents: dict[str, int]
    messages_per_s: float | None
    dead_letters: int


@dataclass(frozen=True, slots=True)
class AgentRow:
    """One agent as the observer's table shows it.

    Attributes:
        agent_id: Its ID.
        capabilities: Its tags, each with its priority (0 the primary), in declared order.
        description: What it says it is good at.
        host: Its host's name.
        host_kind: What that host is.
        node: Its node's ID.
        status: Where it is in its life.
        epoch: Its incarnation.
        load: Requests in flight, as of the last heartbeat.
        in_per_s: Messages it handled per second over the last minute (from traces).
        out_per_s: Messages it sent per second over the last minute (from traces).
        errors: Messages it handled that ended in error over the last minute.
    """

    agent_id: str
    capabilities: dict[str, int]
    description: str
    host: str
    host_kind: HostKind
    node: str
    status: AgentStatus
    epoch: int
    load: int
    in_per_s: float = 0.0
    out_per_s: float = 0.0
    errors: int = 0


@dataclass(frozen=True, slots=True)
class AgentPage:
    """One page of the agents that pass a filter.

    Attributes:
        total: How many agents pass the filter.
        page: This page's number, from 0.
        size: The most agents a page holds.
        rows: This page's agents, sorted by ID.
    """

    total: int
    page: int
    size: int
    rows: tuple[AgentRow, ...]


@dataclass(frozen=True, slots=True)
class AgentGroup:
    """Agents aggregated under one host or one capability.

    Attributes:
        key: The host's name or the capability.
        agents: How many.
        statuses: How many in each status (only those with some).
        load: Their summed load.
    """

    key: str
    agents: int
    statuses: dict[str, int]
    load: int


@dataclass(frozen=True, slots=True)
class Rates:
    """Messages per agent over a period, from the trace store's edges.

    Attributes:
        inbound: Messages handled per second, by agent.
        outbound: Messages sent per second, by agent.
        errors: Messages handled that ended in error, by agent.
    """

    inbound: Mapping[str, float] = field(default_factory=dict)
    outbound: Mapping[str, float] = field(default_factory=dict)
    errors: Mapping[str, int] = field(default_factory=dict)


def host_kind(name: str, spares: Iterable[str] = ()) -> HostKind:
    """What the host called ``name`` is (``spares``: the names the registry offers as spares)."""
    if name in spares:
        return HostKind.SPARE
    if name.startswith(DEDICATED_PREFIX):
        return HostKind.DEDICATED
    if name.startswith(POOL_PREFIX):
        return HostKind.POOL
    if name.startswith(REMOTE_PREFIX):
        return HostKind.REMOTE
    return HostKind.OTHER


def pool_of(host: str) -> str | None:
    """The pool a pool host belongs to (``reach.pool.<pool>.<index>``), else None."""
    if not host.startswith(POOL_PREFIX):
        return None
    return host.removeprefix(POOL_PREFIX).rpartition(".")[0] or None


def spare_names(spares: Mapping[str, Sequence[str]]) -> set[str]:
    """Every host name of the registry's spares (``{"<node> <shape>": [names]}``)."""
    return {name for names in spares.values() for name in names}


def cluster_view(nodes: Sequence[NodeInfo], records: Sequence[AgentRecord],
                 hosts: Sequence[str], spares: Mapping[str, Sequence[str]], *,
                 messages_per_s: float | None, dead_letters: int) -> ClusterView:
    """The cluster at a glance, from the nodes, the registry's records, its live hosts and
    spares, the sampled message rate and the number of dead letters."""
    spare = spare_names(spares)
    kinds = Counter(host_kind(h, spare) for h in {*hosts, *spare})
    statuses = Counter(r.status for r in records)
    pools = Counter(p for p in (pool_of(r.host) for r in records) if p is not None)
    return ClusterView(
        nodes=sum(1 for n in nodes if n.alive), nodes_dead=sum(1 for n in nodes if not n.alive),
        hosts={k.value: kinds[k] for k in HostKind},
        pools=dict(sorted(pools.items())),
        agents={s.value: statuses[s] for s in AgentStatus},
        messages_per_s=messages_per_s, dead_letters=dead_letters)


def rates_of(edges: Iterable[TraceEdge]) -> Rates:
    """Each agent's messages in and out per second, and errors, from the message graph."""
    inbound: dict[str, float] = {}
    outbound: dict[str, float] = {}
    errors: Counter[str] = Counter()
    for edge in edges:
        inbound[edge.target] = inbound.get(edge.target, 0.0) + edge.per_s
        outbound[edge.source] = outbound.get(edge.source, 0.0) + edge.per_s
        errors[edge.target] += edge.errors
    return Rates(inbound, outbound, dict(errors))


def matches(record: AgentRecord, capability: str = "", text: str = "",
            status: AgentStatus | None = None) -> bool:
    """Whether an agent passes the filter: it holds ``capability`` (exactly, by hierarchy, or
    separator-normalised, as discovery matches), its ID or description holds every word of
    ``text`` (any case), and it is in ``status``; an empty part passes every agent."""
    if status is not None and record.status is not status:
        return False
    if capability and not any(match_kind(capability, t) is not None
                              for t in record.capabilities):
        return False
    haystack = f"{record.agent_id} {record.description}".casefold()
    return all(word in haystack for word in text.casefold().split())


def agent_row(record: AgentRecord, spares: Iterable[str] = (), rates: Rates = Rates()) -> AgentRow:
    """The table's row of one registry record."""
    return AgentRow(
        agent_id=record.agent_id,
        capabilities={t: record.priority_of(t) for t in record.capabilities},
        description=record.description, host=record.host,
        host_kind=host_kind(record.host, spares), node=record.node, status=record.status,
        epoch=record.epoch, load=record.load,
        in_per_s=round(rates.inbound.get(record.agent_id, 0.0), 3),
        out_per_s=round(rates.outbound.get(record.agent_id, 0.0), 3),
        errors=rates.errors.get(record.agent_id, 0))


def agents_page(records: Iterable[AgentRecord], *, capability: str = "", text: str = "",
                status: AgentStatus | None = None, page: int = 0, size: int = 50,
                spares: Iterable[str] = (), rates: Rates = Rates()) -> AgentPage:
    """One page (from 0) of the agents that pass the filter (see :func:`matches`), by ID;
    ``size`` is kept within 1 and :data:`MAX_PAGE`, and a page past the end is empty."""
    size = max(1, min(size, MAX_PAGE))
    page = max(0, page)
    passing = sorted((r for r in records if matches(r, capability, text, status)),
                     key=lambda r: r.agent_id)
    spare = set(spares)
    rows = tuple(agent_row(r, spare, rates) for r in passing[page * size:(page + 1) * size])
    return AgentPage(total=len(passing), page=page, size=size, rows=rows)


def agent_groups(records: Iterable[AgentRecord], by: GroupBy,
                 limit: int = 100) -> list[AgentGroup]:
    """The agents aggregated per host or per capability (an agent counts under each of its
    tags), the largest groups first (then by key); at most ``limit`` groups."""
    counts: Counter[str] = Counter()
    loads: Counter[str] = Counter()
    statuses: dict[str, Counter[str]] = {}
    for record in records:
        keys = [record.host or "(none)"] if by is GroupBy.HOST else list(record.capabilities)
        for key in keys:
            counts[key] += 1
            loads[key] += record.load
            statuses.setdefault(key, Counter())[record.status.value] += 1
    ordered = sorted(counts, key=lambda k: (-counts[k], k))[:limit]
    return [AgentGroup(key=k, agents=counts[k], statuses=dict(sorted(statuses[k].items())),
                       load=loads[k]) for k in ordered]


__all__ = ["MAX_PAGE", "AgentGroup", "AgentPage", "AgentRow", "ClusterView", "GroupBy",
           "HostKind", "Rates", "agent_groups", "agent_row", "agents_page", "cluster_view",
           "host_kind", "matches", "pool_of", "rates_of", "spare_names"]
