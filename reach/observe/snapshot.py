"""One look at the cluster, and what of it a watching page has not been sent yet.

A :class:`Snapshot` is what the observer's sampler (:mod:`reach.observe.sampler`) sees on one
tick, as JSON-ready parts (the cluster at a glance, the supervision trees, the agents
aggregated per host and per capability, the message graph, the recent dead letters, the trace
store's figures, the A2A gateway's recent tasks); :func:`build` makes one from the typed
answers of the cluster's ports.
Each page's stream is sent a part only when it changed since that page last got it
(:func:`delta`, by a digest of each part), and every restart event once, so that a quiet
cluster costs a page a few bytes a second and a page that falls behind skips to the newest
look. :func:`sse` frames a message as a server-sent event. All of it is pure.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from reach.observe.traces_view import graph
from reach.observe.trees import RestartEvent, forest
from reach.observe.views import GroupBy, agent_groups, cluster_view, spare_names
from reach.ports.cluster import NodeInfo
from reach.records import A2ATaskSummary, AgentRecord, DeadLetter, SupervisorStatus
from reach.spans import TraceEdge, TraceStoreStats

#: The dead letters a snapshot carries (the newest).
LETTERS_SHOWN = 100
#: The A2A tasks a snapshot carries (the most recently updated).
TASKS_SHOWN = 100
#: The groups per host and per capability a snapshot carries (the largest).
GROUPS_SHOWN = 50

#: What a JSON part is (an object decoded from JSON: ``json.loads``' own type).
Json = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Inputs:
    """What the sampler gathered on one tick, typed as the ports answer it.

    Attributes:
        at: When (epoch seconds).
        nodes: The cluster's nodes.
        records: The registry's records.
        hosts: Live hosts by their heartbeats.
        spares: The registry's spares (``{"<node> <shape>": [names]}``).
        statuses: Each supervisor's status, by name.
        letters: The most recent dead letters, oldest first.
        dead_letters: How many dead letters the registry holds.
        messages_per_s: The hosts' sampled message rate (None before two samples).
        edges: The trace store's edges over the graph's window (None: no trace store).
        window_s: That window's length.
        trace_stats: The trace store's figures (None: no trace store).
        tasks: The A2A gateway's most recently updated tasks, newest first (None: none to
            show).
    """

    at: float
    nodes: Sequence[NodeInfo]
    records: Sequence[AgentRecord]
    hosts: Sequence[str]
    spares: Mapping[str, Sequence[str]]
    statuses: Mapping[str, SupervisorStatus]
    letters: Sequence[DeadLetter]
    dead_letters: int
    messages_per_s: float | None = None
    edges: Sequence[TraceEdge] | None = None
    window_s: float = 60.0
    trace_stats: TraceStoreStats | None = None
    tasks: Sequence[A2ATaskSummary] | None = None


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One look, as named JSON-ready parts, with the restarts seen since the previous look.

    Attributes:
        seq: Its number (one more on each tick).
        at: When it was taken (epoch seconds).
        parts: ``cluster``, ``trees``, ``groups``, ``graph``, ``letters``, ``traces``,
            ``tasks``.
        restarts: Restarts new since the previous snapshot, oldest first.
    """

    seq: int
    at: float
    parts: Mapping[str, Json]
    restarts: tuple[RestartEvent, ...] = ()
    digests: Mapping[str, str] = field(default_factory=dict)


def _digest(part: Json) -> str:
    return hashlib.blake2b(json.dumps(part, sort_keys=True).encode(), digest_size=12).hexdigest()


def _tasks_part(tasks: Sequence[A2ATaskSummary] | None) -> Json:
    """The A2A tasks part: the newest tasks, and how many of them are in each state."""
    if tasks is None:
        return {"available": False}
    shown = tasks[:TASKS_SHOWN]
    states: dict[str, int] = {}
    for task in shown:
        states[task.state] = states.get(task.state, 0) + 1
    return {"available": True, "recent": [asdict(t) for t in shown],
            "states": dict(sorted(states.items()))}


def build(seq: int, inputs: Inputs, restarts: Sequence[RestartEvent] = ()) -> Snapshot:
    """The snapshot of one tick's inputs."""
    spare = spare_names(inputs.spares)
    parts: dict[str, Json] = {
        "cluster": asdict(cluster_view(inputs.nodes, inputs.records, inputs.hosts,
                                       inputs.spares, messages_per_s=inputs.messages_per_s,
                                       dead_letters=inputs.dead_letters)),
        "trees": {"roots": [asdict(t) for t in forest(inputs.statuses, inputs.records, spare)]},
        "groups": {"total": len(inputs.records),
                   "by_host": [asdict(g) for g in agent_groups(inputs.records, GroupBy.HOST,
                                                               GROUPS_SHOWN)],
                   "by_capability": [asdict(g) for g in agent_groups(
                       inputs.records, GroupBy.CAPABILITY, GROUPS_SHOWN)]},
        "letters": {"total": inputs.dead_letters,
                    "recent": [asdict(d) for d in inputs.letters[-LETTERS_SHOWN:]]},
        "graph": ({"available": False} if inputs.edges is None else
                  {"available": True, **asdict(graph(inputs.edges, inputs.window_s))}),
        "traces": ({"available": False} if inputs.trace_stats is None else
                   {"available": True, **asdict(inputs.trace_stats)}),
        "tasks": _tasks_part(inputs.tasks),
    }
    # The message rate moves on every tick; the cluster part is small, and sent each time.
    digests = {name: _digest(part) for name, part in parts.items()}
    return Snapshot(seq, inputs.at, parts, tuple(restarts), digests)


def delta(snapshot: Snapshot, sent: Mapping[str, str]) -> tuple[Json, dict[str, str]]:
    """The message to send a page that was last sent the parts of digests ``sent`` (empty for
    a new page: every part), and the digests it holds once sent. The message always holds
    ``seq``, ``at`` and ``restarts`` (the snapshot's own)."""
    message: Json = {"seq": snapshot.seq, "at": snapshot.at,
                     "restarts": [asdict(r) for r in snapshot.restarts]}
    held = dict(sent)
    for name, part in snapshot.parts.items():
        digest = snapshot.digests.get(name) or _digest(part)
        if held.get(name) != digest:
            message[name] = part
            held[name] = digest
    return message, held


def sse(data: Json, event: str = "snapshot", event_id: int | None = None) -> bytes:
    """A server-sent event of ``data`` as one line of JSON."""
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


__all__ = ["GROUPS_SHOWN", "LETTERS_SHOWN", "TASKS_SHOWN", "Inputs", "Json", "Snapshot", "build",
           "delta", "sse"]
