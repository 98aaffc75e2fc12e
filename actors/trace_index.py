"""The trace store's index: recent finished spans by trace, agent, capability and task, within a
memory bound.

Pure (no I/O, no clock: the time a batch arrives is passed in), so every rule is a unit test:

- Spans are held in the order they arrived; past the bound (:attr:`TraceIndex.max_bytes`, an
  estimate of their size in memory, :func:`span_bytes`) the oldest to arrive are dropped first,
  one span at a time. A trace may so be held in part: its earliest spans go first, its root
  (which ends, and so arrives, last) last.
- Each held span is in its trace's list and in the postings of every value it names (an agent as
  ``reach.agent_id`` or ``reach.sender``, a capability, a task ID); dropping a span takes it out
  of all of them, and a trace, or a posting, with no span left goes.
- The server spans of handler runs (``handle ...``) are kept apart too, in arrival order, for the
  message graph (:meth:`TraceIndex.edges`), which reads back only as far as its period reaches.
"""

from __future__ import annotations

import heapq
import sys
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from reach.errors import ConfigError
from reach.spans import (
    Attr,
    AttrValue,
    SpanKind,
    SpanName,
    SpanRecord,
    SpanStatus,
    TraceEdge,
    TraceStoreStats,
    TraceSummary,
)

#: The memory bound of a store none was given for: 64 MiB of spans (estimated).
DEFAULT_MAX_BYTES = 64 * 2**20
#: How much earlier than the start of the period a handler span may have arrived and still be
#: in it: the clocks of two nodes differ by up to this much (nanoseconds).
CLOCK_SKEW_NS = 5_000_000_000

#: What a held span costs beyond its fields' objects: the record itself (13 slots), its places
#: in the arrival queue and its trace's list, and its postings (measured: ``bench/trace_store.py``).
SPAN_OVERHEAD = 440
#: What a held trace costs beyond its spans: its entry and its bookkeeping.
TRACE_OVERHEAD = 560
_EVENT_OVERHEAD = 120
_LINK_OVERHEAD = 80
_getsizeof = sys.getsizeof

_HANDLE = str(SpanName.HANDLE)


def span_bytes(span: SpanRecord) -> int:
    """The estimated size in memory of one held span (its strings, attributes, events, links,
    and :data:`SPAN_OVERHEAD`)."""
    size = (SPAN_OVERHEAD + _getsizeof(span.trace_id) + _getsizeof(span.span_id)
            + _getsizeof(span.name) + _getsizeof(span.status_message) + _getsizeof(span.process)
            + _attrs_bytes(span.attributes))
    if span.parent_span_id is not None:
        size += _getsizeof(span.parent_span_id)
    for event in span.events:
        size += _EVENT_OVERHEAD + _getsizeof(event.name) + _attrs_bytes(event.attributes)
    for link in span.links:
        size += _LINK_OVERHEAD + _getsizeof(link.trace_id) + _getsizeof(link.span_id)
    return size


def _attrs_bytes(attributes: Mapping[str, AttrValue]) -> int:
    if not attributes:
        return _getsizeof(attributes)
    return _getsizeof(attributes) + sum(_getsizeof(k) + _getsizeof(v)
                                        for k, v in attributes.items())


def _is_handler_run(span: SpanRecord) -> bool:
    return span.kind == SpanKind.SERVER and span.name.partition(" ")[0] == _HANDLE


def _keys(span: SpanRecord, names: tuple[str, ...]) -> set[str]:
    attrs = span.attributes
    return {str(attrs[n]) for n in names if n in attrs}


_AGENT_ATTRS = (str(Attr.AGENT_ID), str(Attr.SENDER))
_CAPABILITY_ATTRS = (str(Attr.CAPABILITY),)
_TASK_ATTRS = (str(Attr.TASK_ID),)


@dataclass(slots=True)
class _Held:
    """A held span: the record, its estimated size and when it arrived."""

    span: SpanRecord
    size: int
    received_ns: int


@dataclass(slots=True)
class _Trace:
    """A trace's held spans, in arrival order, and what its summary needs without reading them.

    Invariant: ``start_ns``/``end_ns`` are the least start and greatest end of ``spans``, and
    ``errors`` how many of them ended in error.
    """

    spans: deque[SpanRecord] = field(default_factory=deque)
    start_ns: int = 0
    end_ns: int = 0
    errors: int = 0

    def add(self, span: SpanRecord) -> None:
        if not self.spans:
            self.start_ns, self.end_ns = span.start_ns, span.end_ns
        else:
            self.start_ns = min(self.start_ns, span.start_ns)
            self.end_ns = max(self.end_ns, span.end_ns)
        self.spans.append(span)
        self.errors += span.status == SpanStatus.ERROR

    def drop_oldest(self, span: SpanRecord) -> None:
        gone = self.spans.popleft()
        assert gone is span, "a trace's spans are in arrival order"
        self.errors -= span.status == SpanStatus.ERROR
        if self.spans and (span.start_ns == self.start_ns or span.end_ns == self.end_ns):
            self.start_ns = min(s.start_ns for s in self.spans)
            self.end_ns = max(s.end_ns for s in self.spans)

    def summary(self, trace_id: str) -> TraceSummary:
        root = next((s for s in self.spans if s.parent_span_id is None), None)
        if root is None:
            root = min(self.spans, key=lambda s: s.start_ns)
        agents = {str(s.attributes[Attr.AGENT_ID]) for s in self.spans
                  if Attr.AGENT_ID in s.attributes}
        return TraceSummary(trace_id, root.name, self.start_ns,
                            (self.end_ns - self.start_ns) / 1e6, len(self.spans), self.errors,
                            tuple(sorted(agents)))


class _Postings:
    """Value -> the traces with a held span naming it, each with how many of its spans do."""

    __slots__ = ("by_key",)

    def __init__(self) -> None:
        self.by_key: dict[str, dict[str, int]] = {}

    def add(self, keys: Iterable[str], trace_id: str) -> None:
        for key in keys:
            traces = self.by_key.setdefault(key, {})
            traces[trace_id] = traces.get(trace_id, 0) + 1

    def remove(self, keys: Iterable[str], trace_id: str) -> None:
        for key in keys:
            traces = self.by_key[key]
            left = traces[trace_id] - 1
            if left:
                traces[trace_id] = left
            else:
                del traces[trace_id]
                if not traces:
                    del self.by_key[key]


class TraceIndex:
    """Recent spans, bounded by their estimated size, and the queries the store answers.

    Args:
        max_bytes: The bound on the held spans' estimated size (:func:`span_bytes`, plus
            :data:`TRACE_OVERHEAD` a trace).

    Attributes:
        bytes: The held spans' estimated size.
        received: Spans added since it was made.
        dropped: Spans dropped for the bound since.

    Raises:
        ConfigError: ``max_bytes`` is not positive.
    """

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        if max_bytes <= 0:
            raise ConfigError(f"the trace store's bound must be positive, got {max_bytes} bytes",
                              details={"setting": "trace_store_bytes"})
        self.max_bytes = max_bytes
        self.bytes = 0
        self.received = 0
        self.dropped = 0
        # Invariant: _arrived holds every held span once, oldest arrival first; _traces holds
        # exactly the traces of those spans, each with its spans in the same order; _handled
        # holds, in the same order, exactly the held handler runs; and every posting counts
        # the held spans of its trace that name its value.
        self._arrived: deque[_Held] = deque()
        self._traces: dict[str, _Trace] = {}
        self._handled: deque[_Held] = deque()
        self.agents = _Postings()
        self.capabilities = _Postings()
        self.tasks = _Postings()

    def __len__(self) -> int:
        return len(self._arrived)

    # -- adding and dropping ---------------------------------------------------------------

    def add(self, spans: Sequence[SpanRecord], received_ns: int) -> int:
        """Holds ``spans`` (arrived at ``received_ns``), then drops the oldest held spans until
        the bound is kept; how many it dropped."""
        for span in spans:
            held = _Held(span, span_bytes(span), received_ns)
            trace = self._traces.get(span.trace_id)
            if trace is None:
                trace = self._traces[span.trace_id] = _Trace()
                self.bytes += TRACE_OVERHEAD
            trace.add(span)
            self._arrived.append(held)
            if _is_handler_run(span):
                self._handled.append(held)
            self.agents.add(_keys(span, _AGENT_ATTRS), span.trace_id)
            self.capabilities.add(_keys(span, _CAPABILITY_ATTRS), span.trace_id)
            self.tasks.add(_keys(span, _TASK_ATTRS), span.trace_id)
            self.bytes += held.size
        self.received += len(spans)
        dropped = 0
        while self.bytes > self.max_bytes and self._arrived:
            self._drop_oldest()
            dropped += 1
        self.dropped += dropped
        return dropped

    def _drop_oldest(self) -> None:
        held = self._arrived.popleft()
        span = held.span
        if self._handled and self._handled[0] is held:
            self._handled.popleft()
        trace = self._traces[span.trace_id]
        trace.drop_oldest(span)
        if not trace.spans:
            del self._traces[span.trace_id]
            self.bytes -= TRACE_OVERHEAD
        self.agents.remove(_keys(span, _AGENT_ATTRS), span.trace_id)
        self.capabilities.remove(_keys(span, _CAPABILITY_ATTRS), span.trace_id)
        self.tasks.remove(_keys(span, _TASK_ATTRS), span.trace_id)
        self.bytes -= held.size

    # -- queries -----------------------------------------------------------------------------

    def held(self) -> list[SpanRecord]:
        """Every held span, oldest arrival first."""
        return [h.span for h in self._arrived]

    def trace(self, trace_id: str) -> list[SpanRecord]:
        """The held spans of one trace, by start time (empty when none is held)."""
        trace = self._traces.get(trace_id)
        return [] if trace is None else sorted(trace.spans, key=lambda s: s.start_ns)

    def find_traces(self, *, agent: str | None = None, capability: str | None = None,
                    task_id: str | None = None, status: SpanStatus | None = None,
                    since_ns: int | None = None, until_ns: int | None = None,
                    slowest: bool = False, limit: int = 50) -> list[TraceSummary]:
        """Summaries of the traces that pass every filter given: a held span names ``agent``
        (as ``reach.agent_id`` or ``reach.sender``), one ``capability``, one ``task_id``; with
        an error span when ``status`` is ERROR, with none when it is OK or UNSET; started
        (earliest held span) within [``since_ns``, ``until_ns``]. The most recent first (by
        start), or the slowest first; at most ``limit``."""
        if limit <= 0:
            return []
        wanted = [p.by_key.get(key, {}) for p, key in ((self.agents, agent),
                                                       (self.capabilities, capability),
                                                       (self.tasks, task_id))
                  if key is not None]
        ids: Iterable[str]
        if wanted:
            wanted.sort(key=len)
            ids = (t for t in wanted[0] if all(t in other for other in wanted[1:]))
        else:
            ids = self._traces
        lo = since_ns if since_ns is not None else -1 << 63
        hi = until_ns if until_ns is not None else 1 << 63
        errors = None if status is None else status == SpanStatus.ERROR
        found = [(tid, t) for tid in ids if lo <= (t := self._traces[tid]).start_ns <= hi
                 and (errors is None or (t.errors > 0) == errors)]
        if slowest:
            top = heapq.nlargest(limit, found, key=lambda p: (p[1].end_ns - p[1].start_ns,
                                                              p[1].start_ns, p[0]))
        else:
            top = heapq.nlargest(limit, found, key=lambda p: (p[1].start_ns, p[0]))
        return [t.summary(tid) for tid, t in top]

    def edges(self, since_ns: int, now_ns: int) -> list[TraceEdge]:
        """Who sent to whom since ``since_ns`` (``now_ns`` being now): the held handler runs
        (server spans named ``handle ...``) started since then that name their sender and
        agent, by pair; the heaviest first (then by sender and agent)."""
        counts: dict[tuple[str, str], list[int]] = {}
        oldest = since_ns - CLOCK_SKEW_NS
        for held in reversed(self._handled):
            if held.received_ns < oldest:
                break  # arrived before the period began: so did everything older
            span = held.span
            attrs = span.attributes
            if span.start_ns < since_ns or Attr.SENDER not in attrs or Attr.AGENT_ID not in attrs:
                continue
            tally = counts.setdefault((str(attrs[Attr.SENDER]), str(attrs[Attr.AGENT_ID])), [0, 0])
            tally[0] += 1
            tally[1] += span.status == SpanStatus.ERROR
        period_s = max(now_ns - since_ns, 1) / 1e9
        edges = [TraceEdge(src, dst, n, err, n / period_s) for (src, dst), (n, err)
                 in counts.items()]
        edges.sort(key=lambda e: (-e.count, e.source, e.target))
        return edges

    def stats(self) -> TraceStoreStats:
        """What it holds and what it dropped."""
        return TraceStoreStats(spans=len(self._arrived), traces=len(self._traces),
                               bytes=self.bytes, max_bytes=self.max_bytes,
                               received=self.received, dropped=self.dropped)


__all__ = ["CLOCK_SKEW_NS", "DEFAULT_MAX_BYTES", "SPAN_OVERHEAD", "TRACE_OVERHEAD", "TraceIndex",
           "span_bytes"]
