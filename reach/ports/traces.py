"""The port of the cluster's trace store: the recent finished spans, bounded, queryable.

Every reach process batches the spans it finishes to the store (fire and forget: a process never
waits for it); the observer and ``reach`` tools read traces back. The store keeps to a memory
bound (``reach.init(trace_store_bytes=...)``), dropping the oldest spans to arrive first, one by
one: a trace may be held in part. It starts empty after a restart.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import Protocol

from reach.spans import SpanRecord, SpanStatus, TraceEdge, TraceStoreStats, TraceSummary


class TraceStorePort(Protocol):
    """The cluster's store of recent spans (one process)."""

    def add_spans(self, spans: Sequence[SpanRecord]) -> Awaitable[None]:
        """Adds finished spans (callers need not await it)."""
        ...

    def trace(self, trace_id: str) -> Awaitable[list[SpanRecord]]:
        """The spans held of one trace, by start time (empty when none is held)."""
        ...

    def find_traces(self, *, agent: str | None = None, capability: str | None = None,
                    task_id: str | None = None, status: SpanStatus | None = None,
                    since_ns: int | None = None, until_ns: int | None = None,
                    slowest: bool = False, limit: int = 50) -> Awaitable[list[TraceSummary]]:
        """Traces with a span naming ``agent`` (as ``reach.agent_id`` or ``reach.sender``, so
        that a driver's or a gateway caller's traces are found too), ``capability`` and
        ``task_id``; with an error span when ``status`` is ERROR, with none when it is OK or
        UNSET; started (their earliest span held) within [``since_ns``, ``until_ns``], bounds
        included; the most recent first (by start), or the slowest first; at most ``limit``."""
        ...

    def edges(self, since_ns: int) -> Awaitable[list[TraceEdge]]:
        """Who sent to whom since ``since_ns`` (from the server spans of handler runs,
        ``handle ...``, started since then: their ``reach.sender`` and ``reach.agent_id``),
        heaviest first; ``per_s`` over the time from ``since_ns`` to now, on the store's
        clock."""
        ...

    def trace_stats(self) -> Awaitable[TraceStoreStats]:
        """What the store holds and what it dropped."""
        ...
