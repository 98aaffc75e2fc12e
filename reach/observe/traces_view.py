"""Traces as the observer shows them, built by pure functions from the trace store's answers
(:class:`~reach.ports.traces.TraceStorePort`).

:func:`waterfall` lays one trace's spans out as rows: each at its depth under its parent, its
offset from the trace's start, its agent, host and node, the time its message waited in the
host's inbox (``reach.queued_ms``: before the server span starts) and its handler time (the
span's own), with its events (retries, failovers, restarts) inline. :func:`graph` turns the
store's edges into the message graph: nodes with their traffic, edges weighted by rate, the
erring ones marked.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from reach.spans import Attr, AttrValue, SpanKind, SpanRecord, SpanStatus, TraceEdge

#: The most edges the message graph draws (the heaviest).
MAX_EDGES = 200


@dataclass(frozen=True, slots=True)
class EventView:
    """An event of a span: its name, its offset from the trace's start, its attributes."""

    name: str
    offset_ms: float
    attributes: dict[str, AttrValue]


@dataclass(frozen=True, slots=True)
class SpanRow:
    """One span of a waterfall.

    Attributes:
        span_id: Its ID.
        parent_span_id: Its parent's (None for a root, or when its parent is not held).
        depth: How deep under the trace's roots it is drawn (0 for a root).
        name: Its name (``send order.query``, ``handle cs.question@1.0``...).
        kind: Its kind.
        status: How it ended.
        status_message: What went wrong, for an error.
        agent: The agent that handled it, or that a send chose.
        sender: Who sent the message (server spans).
        capability: The capability it was for.
        host: The host it ran in.
        node: That host's node.
        offset_ms: When it started, from the trace's start.
        duration_ms: How long it lasted (for a handler span: the handler's time).
        queued_ms: How long its message waited in the host's inbox before it started.
        attempt: The task attempt it belongs to (0 when none).
        events: Its events, in order.
    """

    span_id: str
    parent_span_id: str | None
    depth: int
    name: str
    kind: SpanKind
    status: SpanStatus
    status_message: str
    agent: str
    sender: str
    capability: str
    host: str
    node: str
    offset_ms: float
    duration_ms: float
    queued_ms: float
    attempt: int
    events: tuple[EventView, ...]


@dataclass(frozen=True, slots=True)
class Waterfall:
    """One trace laid out: its ID, its duration (queueing included), its rows in tree order."""

    trace_id: str
    duration_ms: float
    errors: int
    rows: tuple[SpanRow, ...]


@dataclass(frozen=True, slots=True)
class GraphNode:
    """An agent (or outside caller) of the message graph, with its messages per second."""

    name: str
    in_per_s: float
    out_per_s: float
    errors: int


@dataclass(frozen=True, slots=True)
class Graph:
    """Who talked to whom over a period: nodes, and edges weighted by rate.

    Attributes:
        window_s: The period's length.
        nodes: Every sender and receiver of the edges kept, by name.
        edges: The heaviest :data:`MAX_EDGES` edges.
        dropped: Edges left out.
    """

    window_s: float
    nodes: tuple[GraphNode, ...]
    edges: tuple[TraceEdge, ...]
    dropped: int


def _text(span: SpanRecord, attr: Attr) -> str:
    value = span.attributes.get(attr)
    return "" if value is None else str(value)


def _number(span: SpanRecord, attr: Attr) -> float:
    value = span.attributes.get(attr)
    return float(value) if isinstance(value, int | float) else 0.0


def _order(spans: Sequence[SpanRecord]) -> list[tuple[SpanRecord, int]]:
    """The spans in tree order (each after its parent, siblings by start), with depths; a span
    whose parent is not held is a root."""
    held = {s.span_id for s in spans}
    children: dict[str | None, list[SpanRecord]] = {}
    for span in sorted(spans, key=lambda s: (s.start_ns, s.span_id)):
        parent = span.parent_span_id if span.parent_span_id in held else None
        children.setdefault(parent, []).append(span)
    ordered: list[tuple[SpanRecord, int]] = []
    stack = [(s, 0) for s in reversed(children.get(None, []))]
    seen: set[str] = set()
    while stack:
        span, depth = stack.pop()
        if span.span_id in seen:  # a cycle of parents (a broken exporter): drawn once
            continue
        seen.add(span.span_id)
        ordered.append((span, depth))
        stack.extend((c, depth + 1) for c in reversed(children.get(span.span_id, [])))
    return ordered


def waterfall(trace_id: str, spans: Sequence[SpanRecord]) -> Waterfall:
    """One trace's spans as a waterfall (see the module's docstring); empty when none is
    held. The trace starts at its earliest message's arrival (a span's start less its
    queueing)."""
    if not spans:
        return Waterfall(trace_id, 0.0, 0, ())
    start = min(s.start_ns - int(_number(s, Attr.QUEUED_MS) * 1e6) for s in spans)
    end = max(s.end_ns for s in spans)
    rows = []
    for span, depth in _order(spans):
        events = tuple(EventView(e.name, round((e.at_ns - start) / 1e6, 3), dict(e.attributes))
                       for e in span.events)
        rows.append(SpanRow(
            span_id=span.span_id, parent_span_id=span.parent_span_id, depth=depth,
            name=span.name, kind=span.kind, status=span.status,
            status_message=span.status_message, agent=_text(span, Attr.AGENT_ID),
            sender=_text(span, Attr.SENDER), capability=_text(span, Attr.CAPABILITY),
            host=_text(span, Attr.HOST), node=_text(span, Attr.NODE),
            offset_ms=round((span.start_ns - start) / 1e6, 3),
            duration_ms=round(span.duration_ms, 3),
            queued_ms=round(_number(span, Attr.QUEUED_MS), 3),
            attempt=int(_number(span, Attr.ATTEMPT)), events=events))
    errors = sum(1 for s in spans if s.status is SpanStatus.ERROR)
    return Waterfall(trace_id, round((end - start) / 1e6, 3), errors, tuple(rows))


def graph(edges: Iterable[TraceEdge], window_s: float) -> Graph:
    """The message graph of the store's edges over ``window_s`` (heaviest first, at most
    :data:`MAX_EDGES`)."""
    ordered = sorted(edges, key=lambda e: (-e.count, e.source, e.target))
    kept = ordered[:MAX_EDGES]
    inbound: dict[str, float] = {}
    outbound: dict[str, float] = {}
    errors: dict[str, int] = {}
    for edge in kept:
        inbound[edge.target] = inbound.get(edge.target, 0.0) + edge.per_s
        outbound[edge.source] = outbound.get(edge.source, 0.0) + edge.per_s
        errors[edge.target] = errors.get(edge.target, 0) + edge.errors
    names = sorted({*inbound, *outbound})
    nodes = tuple(GraphNode(n, round(inbound.get(n, 0.0), 3), round(outbound.get(n, 0.0), 3),
                            errors.get(n, 0)) for n in names)
    return Graph(window_s, nodes, tuple(kept), len(ordered) - len(kept))


__all__ = ["MAX_EDGES", "EventView", "Graph", "GraphNode", "SpanRow", "Waterfall", "graph",
           "waterfall"]
