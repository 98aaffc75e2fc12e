"""The TraceStore actor: the cluster's recent finished spans, bounded, queryable.

A named actor like the registry (one per cluster, started by :func:`reach.init`): every reach
process sends it the spans it finishes, in batches, and never waits for it; the observer and
``reach`` tools read traces back. Its memory is kept within a bound by its index
(:mod:`actors.trace_index`), which holds every rule; this class only stamps each batch with the
time it arrived. The packed batches processes send are read only when a query first needs
them: a store nobody looks at costs a list append per batch. A restart starts it empty: what
it holds is recent history, not state.
"""

from __future__ import annotations

from collections.abc import Sequence

from actors.trace_index import DEFAULT_MAX_BYTES, TraceIndex
from reach import clock
from reach.spans import SpanBatch, SpanRecord, SpanStatus, TraceEdge, TraceStoreStats, TraceSummary


def _now_ns() -> int:
    return int(clock.now() * 1e9)


class TraceStore:
    """The recent spans of the whole cluster (see :class:`reach.ports.traces.TraceStorePort`).

    Args:
        max_bytes: The bound on the spans' estimated size in memory.

    Raises:
        ConfigError: ``max_bytes`` is not positive.
    """

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.index = TraceIndex(max_bytes)

    async def add_spans(self, spans: Sequence[SpanRecord]) -> None:
        """See :meth:`reach.ports.traces.TraceStorePort.add_spans`: a packed batch is held as
        it came, and read when a query first needs it."""
        if isinstance(spans, SpanBatch):
            self.index.hold(spans, _now_ns())
        else:
            self.index.add(spans, _now_ns())

    async def trace(self, trace_id: str) -> list[SpanRecord]:
        """See :meth:`reach.ports.traces.TraceStorePort.trace`."""
        return self.index.trace(trace_id)

    async def find_traces(self, *, agent: str | None = None, capability: str | None = None,
                          task_id: str | None = None, status: SpanStatus | None = None,
                          since_ns: int | None = None, until_ns: int | None = None,
                          slowest: bool = False, limit: int = 50) -> list[TraceSummary]:
        """See :meth:`reach.ports.traces.TraceStorePort.find_traces`."""
        return self.index.find_traces(agent=agent, capability=capability, task_id=task_id,
                                      status=status, since_ns=since_ns, until_ns=until_ns,
                                      slowest=slowest, limit=limit)

    async def edges(self, since_ns: int) -> list[TraceEdge]:
        """See :meth:`reach.ports.traces.TraceStorePort.edges`."""
        return self.index.edges(since_ns, _now_ns())

    async def trace_stats(self) -> TraceStoreStats:
        """See :meth:`reach.ports.traces.TraceStorePort.trace_stats`."""
        return self.index.stats()
