"""A process that sends spans to the cluster's trace store as every reach process will: through
the cluster handle it was started with, never waiting for the store (imported by Ray's workers
by module name)."""

from __future__ import annotations

from reach.ports.cluster import Cluster
from reach.spans import SpanRecord


class SpanSender:
    """Sends the spans it is given to the trace store, and does not wait for it."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    async def send(self, spans: list[SpanRecord]) -> int:
        """Sends ``spans`` (the store's call left running); how many it sent."""
        self.cluster.trace_store().add_spans(spans)
        return len(spans)
