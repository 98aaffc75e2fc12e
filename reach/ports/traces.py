"""The port of the cluster's trace store: the recent finished spans, bounded, queryable.

Every reach process batches the spans it finishes to the store (fire and forget: a process never
waits for it); the observer and ``reach`` tools read traces back. The store keeps to a memory
bound, dropping the oldest spans first.
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
        """Traces with a span naming ``agent`` (``reach.agent_id``), ``capability`` and
        ``task_id``, with an error span when ``status`` is ERROR, started within
        [``since_ns``, ``until_ns``]; the most recent first, or the slowest first; at most
        ``limit``."""
        ...

    def edges(self, since_ns: int) -> Awaitable[list[TraceEdge]]:
        """Who sent to whom since ``since_ns`` (from the server spans of handler runs: their
        ``reach.sender`` and ``reach.agent_id``), heaviest first."""
        ...

    def trace_stats(self) -> Awaitable[TraceStoreStats]:
        """What the store holds and what it dropped."""
        ...
