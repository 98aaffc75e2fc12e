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
- A packed batch (:class:`~reach.spans.SpanBatch`, what processes send) may be held as it came
  (:meth:`TraceIndex.hold`) and indexed only when a query first needs it, so that a store nobody
  reads costs a list append per batch: its spans are newer than every indexed one, and count
  towards the bound by an estimate from their packed size (:data:`PACKED_EXPANSION`) until they
  are read. Past the bound the oldest go first as ever: indexed spans, then whole waiting
  batches, oldest first.
- The handler runs are counted in the message graph too (:mod:`actors.trace_graph`), and leave
  it as they are dropped.
- The attribute values that repeat from span to span (agents, capabilities, schemas, hosts...)
  are interned as they arrive, so that a held span does not keep a copy of each: the estimate
  counts what a span holds of its own.
"""

from __future__ import annotations

import heapq
import sys
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from actors.trace_graph import MessageGraph
from reach.errors import ConfigError
from reach.spans import (
    Attr,
    AttrValue,
    SpanBatch,
    SpanRecord,
    SpanStatus,
    TraceEdge,
    TraceStoreStats,
    TraceSummary,
)

#: The memory bound of a store none was given for: 64 MiB of spans (estimated).
DEFAULT_MAX_BYTES = 64 * 2**20
#: How far ahead of the store's clock a process's may be (nanoseconds): a span arrives no earlier
#: than this before it started, by the store's clock (what a listing of the most recent traces
#: relies on to stop reading early).
CLOCK_SKEW_NS = 5_000_000_000

#: What a held span costs beyond its fields' objects: the record itself (13 slots), its places
#: in the arrival queue, its trace's list and the message graph, its postings, and what the
#: estimate does not see (set so that it matches what ``tracemalloc`` counts for the spans of
#: ``bench/trace_store.py``, within a few percent).
SPAN_OVERHEAD = 680
#: What a held trace costs beyond its spans: its entry and its bookkeeping.
TRACE_OVERHEAD = 560
#: A packed span's estimated size in memory once read, per byte of it packed: what
#: :func:`span_bytes` and :data:`TRACE_OVERHEAD` give reach's send and handler spans, over
#: their packed rows' size (9.9: the attributes many spans share are packed once a batch),
#: rounded up.
PACKED_EXPANSION = 10
_EVENT_OVERHEAD = 120
_LINK_OVERHEAD = 80
_getsizeof = sys.getsizeof
_intern = sys.intern
_ERROR = SpanStatus.ERROR

#: The attributes whose values repeat from span to span: interned as they arrive.
_SHARED_ATTRS = frozenset(str(a) for a in (
    Attr.AGENT_ID, Attr.SENDER, Attr.RECEIVER, Attr.CAPABILITY, Attr.PAYLOAD_SCHEMA,
    Attr.MSG_TYPE, Attr.HOST, Attr.NODE, Attr.SUPERVISOR, Attr.CHILD, Attr.DECISION,
    Attr.REASON, Attr.ERROR_CODE, Attr.ERROR_SEVERITY, Attr.PRINCIPAL))


def span_bytes(span: SpanRecord) -> int:
    """The estimated size in memory of one held span (its strings, attributes, events, links,
    and :data:`SPAN_OVERHEAD`; an interned attribute value is shared, and not counted)."""
    size = (SPAN_OVERHEAD + _getsizeof(span.trace_id) + _getsizeof(span.span_id)
            + _getsizeof(span.name) + _getsizeof(span.process) + _attrs_bytes(span.attributes))
    if span.status_message:
        size += _getsizeof(span.status_message)
    if span.parent_span_id is not None:
        size += _getsizeof(span.parent_span_id)
    if span.events:
        for event in span.events:
            size += _EVENT_OVERHEAD + _getsizeof(event.name) + _attrs_bytes(event.attributes)
    if span.links:
        for link in span.links:
            size += _LINK_OVERHEAD + _getsizeof(link.trace_id) + _getsizeof(link.span_id)
    return size


def _attrs_bytes(attributes: Mapping[str, AttrValue]) -> int:
    # Keys are shared: a batch carries each once, and reach's are constants.
    size = _getsizeof(attributes)
    for key, value in attributes.items():
        if key not in _SHARED_ATTRS:
            size += _getsizeof(value)
    return size


def _intern_values(attrs: dict[str, AttrValue]) -> None:
    # Replacing a key's value while going through them is safe: the dict keeps its size.
    for key, value in attrs.items():
        if key in _SHARED_ATTRS and type(value) is str:
            attrs[key] = _intern(value)


def _keys(span: SpanRecord, names: tuple[str, ...]) -> set[str]:
    attrs = span.attributes
    return {str(attrs[n]) for n in names if n in attrs}


_AGENT, _SENDER = str(Attr.AGENT_ID), str(Attr.SENDER)
_CAPABILITY, _TASK = str(Attr.CAPABILITY), str(Attr.TASK_ID)
_AGENT_ATTRS = (_AGENT, _SENDER)
_CAPABILITY_ATTRS = (_CAPABILITY,)
_TASK_ATTRS = (_TASK,)


@dataclass(slots=True)
class _Trace:
    """A trace's held spans, in arrival order, and what its summary needs without reading them.

    Invariant: ``start_ns``/``end_ns`` are the least start and greatest end of ``spans``, and
    ``errors`` how many of them ended in error; one of ``spans`` arrived by ``received_ns``, so
    ``start_ns`` is at most ``received_ns + CLOCK_SKEW_NS``.
    """

    received_ns: int
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
        if span.status == _ERROR:
            self.errors += 1

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
        agents = {str(s.attributes[_AGENT]) for s in self.spans if _AGENT in s.attributes}
        return TraceSummary(trace_id, root.name, self.start_ns,
                            (self.end_ns - self.start_ns) / 1e6, len(self.spans), self.errors,
                            tuple(sorted(agents)))


class _Postings:
    """Value -> the traces with a held span naming it, each with how many of its spans do."""

    __slots__ = ("by_key",)

    def __init__(self) -> None:
        self.by_key: dict[str, dict[str, int]] = {}

    def add_one(self, key: str, trace_id: str) -> None:
        traces = self.by_key.get(key)
        if traces is None:
            self.by_key[key] = {trace_id: 1}
        else:
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
        # Invariant: _arrived holds every held span once, oldest arrival first, and _sizes
        # their estimated sizes (apart: an int costs less, and is no work for the garbage
        # collector, which a record per span would be); _traces holds
        # exactly the traces of those spans, each with its spans in the same order, in the
        # order of their received_ns; the graph counts exactly the held handler runs; and
        # every posting counts the held spans of its trace that name its value.
        self._arrived: deque[SpanRecord] = deque()
        self._sizes: deque[int] = deque()
        self._traces: dict[str, _Trace] = {}
        self.graph = MessageGraph()
        self.agents = _Postings()
        self.capabilities = _Postings()
        self.tasks = _Postings()
        # Batches held as they came, not read yet, oldest first, each with when it arrived,
        # its estimated size (in ``bytes`` too) and its spans' count (in ``received`` too);
        # every one of them arrived after every span of _arrived.
        self._waiting: deque[tuple[SpanBatch, int, int, int]] = deque()

    def __len__(self) -> int:
        self.read_waiting()
        return len(self._arrived)

    # -- adding and dropping ---------------------------------------------------------------

    def add(self, spans: Sequence[SpanRecord], received_ns: int) -> int:
        """Holds ``spans`` (arrived at ``received_ns``), then drops the oldest held spans until
        the bound is kept; how many it dropped."""
        self.received += len(spans)
        return self._index(spans, received_ns)

    def _index(self, spans: Sequence[SpanRecord], received_ns: int) -> int:
        """:meth:`add`, its spans counted as received already."""
        traces, arrived, sizes, graph = self._traces, self._arrived, self._sizes, self.graph
        agents, capabilities, tasks = self.agents, self.capabilities, self.tasks
        for span in spans:
            attrs = span.attributes
            _intern_values(attrs)
            size = span_bytes(span)
            trace_id = span.trace_id
            trace = traces.get(trace_id)
            if trace is None:
                trace = traces[trace_id] = _Trace(received_ns)
                self.bytes += TRACE_OVERHEAD
            trace.add(span)
            arrived.append(span)
            sizes.append(size)
            graph.add(span)
            # The postings of _keys(span, ...), without a set for each.
            agent, sender = attrs.get(_AGENT), attrs.get(_SENDER)
            if agent is not None:
                agents.add_one(str(agent), trace_id)
            if sender is not None and (agent is None or str(sender) != str(agent)):
                agents.add_one(str(sender), trace_id)
            if _CAPABILITY in attrs:
                capabilities.add_one(str(attrs[_CAPABILITY]), trace_id)
            if _TASK in attrs:
                tasks.add_one(str(attrs[_TASK]), trace_id)
            self.bytes += size
        dropped = 0
        while self.bytes > self.max_bytes and self._arrived:
            self._drop_oldest(received_ns)
            dropped += 1
        self.dropped += dropped
        return dropped

    def hold(self, batch: SpanBatch, received_ns: int) -> int:
        """Holds a packed ``batch`` (arrived at ``received_ns``) unread, until a query needs
        it; then drops the oldest held spans, and then the oldest batches waiting (never the
        newest: its own size is kept when it is read), until the bound is kept; how many spans
        it dropped."""
        size, count = len(batch.data) * PACKED_EXPANSION, batch.span_count()
        self._waiting.append((batch, received_ns, size, count))
        self.bytes += size
        self.received += count
        dropped = 0
        while self.bytes > self.max_bytes and (self._arrived or len(self._waiting) > 1):
            if self._arrived:
                self._drop_oldest(received_ns)
                dropped += 1
            else:
                _, _, gone_size, gone_count = self._waiting.popleft()
                self.bytes -= gone_size
                dropped += gone_count
        self.dropped += dropped
        return dropped

    def read_waiting(self) -> None:
        """Indexes the batches held unread, oldest first (as :meth:`add` would have)."""
        waiting = self._waiting
        while waiting:
            batch, received_ns, size, _ = waiting.popleft()
            self.bytes -= size
            self._index(batch, received_ns)  # its spans were counted as it came

    def _drop_oldest(self, now_ns: int) -> None:
        span = self._arrived.popleft()
        self.bytes -= self._sizes.popleft()
        self.graph.drop(span)
        trace = self._traces.pop(span.trace_id)
        trace.drop_oldest(span)
        if trace.spans:  # its spans left arrived later: it moves to the end, as of now
            trace.received_ns = now_ns
            self._traces[span.trace_id] = trace
        else:
            self.bytes -= TRACE_OVERHEAD
        self.agents.remove(_keys(span, _AGENT_ATTRS), span.trace_id)
        self.capabilities.remove(_keys(span, _CAPABILITY_ATTRS), span.trace_id)
        self.tasks.remove(_keys(span, _TASK_ATTRS), span.trace_id)

    # -- queries -----------------------------------------------------------------------------

    def held(self) -> list[SpanRecord]:
        """Every held span, oldest arrival first."""
        self.read_waiting()
        return list(self._arrived)

    def trace(self, trace_id: str) -> list[SpanRecord]:
        """The held spans of one trace, by start time (empty when none is held)."""
        self.read_waiting()
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
        self.read_waiting()
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
        if not wanted and not slowest:
            return self._most_recent(limit, lo, hi, errors)
        traces = self._traces
        # A generator, not a list: what a query makes per trace dies young (a list's items
        # would live long enough to cost the garbage collector a full pass over the spans).
        found = (tid for tid in ids if lo <= (t := traces[tid]).start_ns <= hi
                 and (errors is None or (t.errors > 0) == errors))
        if slowest:
            top = heapq.nlargest(limit, found, key=lambda tid: (
                traces[tid].end_ns - traces[tid].start_ns, traces[tid].start_ns, tid))
        else:
            top = heapq.nlargest(limit, found, key=lambda tid: (traces[tid].start_ns, tid))
        return [traces[tid].summary(tid) for tid in top]

    def _most_recent(self, limit: int, lo: int, hi: int,
                     errors: bool | None) -> list[TraceSummary]:
        """The ``limit`` traces that started last within [lo, hi], with errors or not: read
        from the last to arrive back, only until the traces left arrived too early to have
        started after those found (their order and ``received_ns`` say)."""
        best: list[tuple[int, str]] = []  # a min-heap of (start, trace ID): the best so far
        for tid, t in reversed(self._traces.items()):
            if len(best) == limit and t.received_ns + CLOCK_SKEW_NS < best[0][0]:
                break
            if lo <= t.start_ns <= hi and (errors is None or (t.errors > 0) == errors):
                if len(best) < limit:
                    heapq.heappush(best, (t.start_ns, tid))
                elif (t.start_ns, tid) > best[0]:
                    heapq.heapreplace(best, (t.start_ns, tid))
        best.sort(reverse=True)
        return [self._traces[tid].summary(tid) for _, tid in best]

    def edges(self, since_ns: int, now_ns: int) -> list[TraceEdge]:
        """Who sent to whom since ``since_ns`` (``now_ns`` being now): the held handler runs
        (server spans named ``handle ...``) started since then that name their sender and
        agent, by pair; the heaviest first (then by sender and agent)."""
        self.read_waiting()
        return self.graph.edges(since_ns, now_ns)

    def stats(self) -> TraceStoreStats:
        """What it holds and what it dropped."""
        self.read_waiting()
        return TraceStoreStats(spans=len(self._arrived), traces=len(self._traces),
                               bytes=self.bytes, max_bytes=self.max_bytes,
                               received=self.received, dropped=self.dropped)


__all__ = ["CLOCK_SKEW_NS", "DEFAULT_MAX_BYTES", "PACKED_EXPANSION", "SPAN_OVERHEAD",
           "TRACE_OVERHEAD", "TraceIndex", "span_bytes"]
