"""The tracer of a process whose spans go to the cluster's trace store only (no OTLP endpoint).

OpenTelemetry's SDK makes a span of some twenty objects and copies it again as it ends, for
exporters this process does not have; here a span is one object on the OpenTelemetry API
(:class:`StoreSpan`: a handler's ``trace.get_current_span()`` is one, and takes attributes and
events as any span does), and a finished one is a row of a :class:`~reach.spans.SpanBatch`,
which a :class:`SpanSink` sends to the store from the process's event loop, in batches, never
waiting for it. Its decisions are the SDK's with reach's settings: a parent-based sampler by
trace ID ratio (the same decisions as ``ParentBased(TraceIdRatioBased(ratio))``), the trace IDs
of :data:`SEED`, the same trace flags, the same status rules.

Where an OTLP endpoint is set, or a test installs an SDK provider, the SDK traces instead
(:mod:`reach._runtime.span_export`): OTLP gets the SDK's spans.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import random
import traceback
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from time import time_ns
from types import TracebackType
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    Tracer,
    TracerProvider,
)
from opentelemetry.util import types
from opentelemetry.util._decorator import _agnosticcontextmanager  # as the SDK: a decorator too

from reach.spans import AttrValue, SpanBatch, SpanRow

log = logging.getLogger("reach._runtime.store_tracer")

#: A trace ID (as an int) that the next span to start a trace takes, when set: read by this
#: module's tracer and by the SDK's ID generator of :mod:`reach._runtime.span_export` (a span
#: with a parent keeps its parent's).
SEED: ContextVar[int | None] = ContextVar("reach_trace_seed", default=None)

#: Sends a batch of finished spans to the trace store (awaited on the process's event loop; a
#: failure is only logged).
SendBatch = Callable[[SpanBatch], Awaitable[None]]

#: How many finished spans a process holds for the trace store before it drops them.
STORE_QUEUE = 32_768
#: Spans a batch holds at most, and how long a span waits for its batch to leave (seconds).
BATCH_SPANS, BATCH_DELAY_S = 1024, 0.5

_ID_SPACE = 1 << 64
_SAMPLED, _RANDOM = TraceFlags.SAMPLED, TraceFlags.RANDOM_TRACE_ID
_KINDS = {SpanKind.INTERNAL: "internal", SpanKind.SERVER: "server", SpanKind.CLIENT: "client",
          SpanKind.PRODUCER: "producer", SpanKind.CONSUMER: "consumer"}
_STATUSES = {StatusCode.UNSET: "unset", StatusCode.OK: "ok", StatusCode.ERROR: "error"}
_FLAGS = tuple(TraceFlags(flags) for flags in range(4))
_UNSET = Status(StatusCode.UNSET)
#: The loop running in this thread, or None (asyncio's low-level getter: it never raises).
_running_loop = asyncio._get_running_loop


def _clean(attributes: types.Attributes) -> dict[str, AttrValue]:
    """Attributes as the trace store keeps them: a scalar as it is, any other value as the text
    of what the SDK would keep of it (a sequence as a tuple, None as None...)."""
    out: dict[str, AttrValue] = {}
    for key, value in (attributes or {}).items():
        if not key or not isinstance(key, str):
            continue  # the SDK drops it too
        kept = _sdk_value(value)
        out[key] = kept if isinstance(kept, str | bool | int | float) else str(kept)
    return out


def _sdk_value(value: object) -> object:
    """What OpenTelemetry's SDK keeps of an attribute's value (its cleaning, with no limits)."""
    if value is None or isinstance(value, str | bool | int | float | bytes):
        return value
    if isinstance(value, Sequence):
        return tuple(_sdk_value(v) for v in value)
    if isinstance(value, Mapping):
        return {str(k): _sdk_value(v) for k, v in value.items() if k}
    kind = type(value)
    return str(value) if kind.__str__ is not object.__str__ or \
        kind.__repr__ is not object.__repr__ else None


class SpanSink:
    """Finished spans on their way to the trace store: each batch leaves from the event loop
    when it holds :data:`BATCH_SPANS` spans or its first has waited :data:`BATCH_DELAY_S`.
    Past :data:`STORE_QUEUE` spans held, or with no event loop to send from, spans are dropped
    (counted), never waited for.

    Args:
        send: Sends a batch to the store.
        process: This process's name (its spans' ``process``).
    """

    def __init__(self, send: SendBatch, process: str) -> None:
        self._send = send
        self.process = process
        self.loop: asyncio.AbstractEventLoop | None = None
        self.dropped = 0
        self._rows: collections.deque[SpanRow] = collections.deque()
        self._due: asyncio.TimerHandle | asyncio.Handle | None = None
        self._soon = False

    def add(self, row: SpanRow) -> None:
        """Holds one finished span (from any thread; the loop's is the usual one)."""
        rows = self._rows
        if len(rows) >= STORE_QUEUE:
            self.dropped += 1
            return
        rows.append(row)
        full = len(rows) >= BATCH_SPANS
        if (self._due is None or (full and not self._soon)
                or _running_loop() is not self.loop):
            self._schedule(full)

    def _schedule(self, now: bool) -> None:
        """Has the spans held sent soon (``now``: as soon as the loop is free), from the loop
        running here (the one of a driver's latest ``asyncio.run``), or from this process's
        loop when no loop runs in this thread."""
        loop = _running_loop()
        if loop is None:  # another thread: the loop this process sends from
            loop = self.loop
            if loop is not None and not loop.is_closed():
                with contextlib.suppress(RuntimeError):  # closed meanwhile
                    loop.call_soon_threadsafe(self._schedule, now)
            return
        if loop is not self.loop:  # a new loop: what was due on the last one never runs
            if self._due is not None:
                self._due.cancel()
            self.loop, self._due, self._soon = loop, None, False
        if now and not self._soon:
            if self._due is not None:
                self._due.cancel()
            self._soon = True
            self._due = loop.call_soon(self.flush)
        elif self._due is None:
            self._due = loop.call_later(BATCH_DELAY_S, self.flush)

    def flush(self) -> None:
        """Sends what is held now, in batches (on the event loop's thread)."""
        if self._due is not None:
            self._due.cancel()
        self._due, self._soon = None, False
        rows = self._rows
        while rows:
            batch = [rows.popleft() for _ in range(min(len(rows), BATCH_SPANS))]
            self._start(SpanBatch.pack(self.process, batch), len(batch))

    def _start(self, batch: SpanBatch, count: int) -> None:
        try:
            sent = asyncio.ensure_future(self._send(batch))
        except Exception as exc:  # no store (yet): these spans are not kept
            self.dropped += count
            log.debug("spans not sent to the trace store: %s", exc)
            return
        sent.add_done_callback(_sent)

    def force_flush(self) -> None:
        """Sends what is held now, from the loop (from any thread: without waiting for it)."""
        if _running_loop() is not None:
            self.flush()
            return
        loop = self.loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # closed meanwhile
                loop.call_soon_threadsafe(self.flush)


def _sent(sent: asyncio.Future[None]) -> None:
    if not sent.cancelled() and sent.exception() is not None:
        log.debug("the trace store did not take spans: %s", sent.exception())


class StoreSpan(Span):
    """A span that records into a :class:`SpanSink` as it ends (see the module's docstring).

    Args:
        sink: Where it goes as it ends (None: nowhere).
        name: Its name.
        context: Its context.
        parent: Its parent's, or None for a trace's root.
        kind: Its kind.
        attributes: Its attributes (kept as given: reach's own, scalars).
        links: Its links.
        start_ns: When it started (None: now).
        record_exception: Whether an exception leaving its ``with`` block is an event.
        set_status_on_exception: Whether such an exception sets status ERROR.
    """

    # What most spans keep as it is, kept by the class until a span changes it.
    _events: list[list[Any]] | None = None
    _links: list[list[str]] | None = None
    _status = _UNSET
    _end_ns: int | None = None
    _record_exception = True
    _set_status_on_exception = True

    def __init__(self, sink: SpanSink | None, name: str, context: SpanContext,  # noqa: PLR0917 - the API's span arguments
                 parent: SpanContext | None, kind: SpanKind,
                 attributes: dict[str, AttrValue], links: Sequence[Link] | None = None,
                 start_ns: int | None = None, record_exception: bool = True,
                 set_status_on_exception: bool = True) -> None:
        self._sink = sink
        self._name = name
        self._context = context
        self._parent = parent
        self._kind = kind
        self._attributes = attributes
        self._start_ns = time_ns() if start_ns is None else start_ns
        if links:
            self._links = [[f"{link.context.trace_id:032x}", f"{link.context.span_id:016x}"]
                           for link in links if link.context.is_valid]
        if not record_exception:
            self._record_exception = False
        if not set_status_on_exception:
            self._set_status_on_exception = False

    def get_span_context(self) -> SpanContext:
        """Its context."""
        return self._context

    def is_recording(self) -> bool:
        """Until it ends."""
        return self._end_ns is None

    def set_attributes(self, attributes: Mapping[str, types.AnyValue]) -> None:
        """Sets attributes (ignored once ended)."""
        if self._ended("an attribute"):
            return
        self._attributes.update(_clean(attributes))

    def set_attribute(self, key: str, value: types.AnyValue) -> None:
        """Sets one attribute (ignored once ended)."""
        self.set_attributes({key: value})

    def add_event(self, name: str, attributes: types.Attributes = None,
                  timestamp: int | None = None) -> None:
        """Adds an event (ignored once ended)."""
        if self._ended("an event"):
            return
        if self._events is None:
            self._events = []
        self._events.append([name, time_ns() if timestamp is None else timestamp,
                             _clean(attributes)])

    def add_link(self, context: SpanContext, attributes: types.Attributes = None) -> None:
        """Links it to another span (ignored once ended, or for an invalid context)."""
        if self._ended("a link") or not context.is_valid:
            return
        if self._links is None:
            self._links = []
        self._links.append([f"{context.trace_id:032x}", f"{context.span_id:016x}"])

    def update_name(self, name: str) -> None:
        """Renames it (ignored once ended)."""
        if not self._ended("a name"):
            self._name = name

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        """Sets its status, as the SDK does: OK is final, UNSET is ignored."""
        if self._ended("a status") or self._status.status_code is StatusCode.OK:
            return
        if isinstance(status, StatusCode):
            status = Status(status, description)
        if status.status_code is not StatusCode.UNSET:
            self._status = status

    def record_exception(self, exception: BaseException, attributes: types.Attributes = None,
                         timestamp: int | None = None, escaped: bool = False) -> None:
        """Records an exception as an ``exception`` event (as the SDK does)."""
        kind = type(exception)
        module = kind.__module__
        event: dict[str, types.AnyValue] = {
            "exception.type": f"{module}.{kind.__qualname__}"
                              if module and module != "builtins" else kind.__qualname__,
            "exception.message": str(exception),
            "exception.stacktrace": "".join(traceback.format_exception(exception)),
            "exception.escaped": str(escaped)}
        event.update(attributes or {})
        self.add_event("exception", event, timestamp)

    def end(self, end_time: int | None = None) -> None:
        """Ends it: its row goes to the sink (once)."""
        if self._ended("an end"):
            return
        end = self._end_ns = time_ns() if end_time is None else end_time
        sink = self._sink
        if sink is None:
            return
        ctx, parent, status = self._context, self._parent, self._status
        sink.add([f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}",
                  None if parent is None else f"{parent.span_id:016x}", self._name,
                  _KINDS[self._kind], self._start_ns, end, _STATUSES[status.status_code],
                  status.description or "", self._attributes, self._events, self._links])

    def _ended(self, what: str) -> bool:
        if self._end_ns is None:
            return False
        log.warning("setting %s on ended span %s", what, self._name)
        return True

    def __exit__(self, exc_type: type[BaseException] | None, exc_val: BaseException | None,
                 exc_tb: TracebackType | None) -> None:
        """Ends it; an exception leaving the block is recorded as its settings say."""
        if exc_val is not None and self.is_recording():
            if self._record_exception:
                self.record_exception(exc_val, escaped=True)
            if self._set_status_on_exception:
                self.set_status(Status(StatusCode.ERROR, f"{type(exc_val).__name__}: {exc_val}"))
        self.end()


class StoreTracer(Tracer):
    """Starts :class:`StoreSpan` spans: sampled by a parent-based trace ID ratio.

    Args:
        sink: Where its spans go as they end (None: nowhere).
        ratio: The share of new traces kept.
    """

    def __init__(self, sink: SpanSink | None, ratio: float) -> None:
        self._sink = sink
        self._bound = round(ratio * _ID_SPACE)

    def start_span(self, name: str, context: Context | None = None,  # noqa: PLR0917 - the API's
                   kind: SpanKind = SpanKind.INTERNAL, attributes: types.Attributes = None,
                   links: Sequence[Link] | None = (), start_time: int | None = None,
                   record_exception: bool = True,
                   set_status_on_exception: bool = True) -> Span:
        """A span, the child of the span of ``context`` (None: the current one)."""
        parent = trace.get_current_span(context).get_span_context()
        return self.open(name, kind, parent if parent.is_valid else None, SEED.get() or 0,
                         dict(attributes) if attributes else {},  # type: ignore[arg-type]
                         links, start_time, record_exception, set_status_on_exception)

    def open(self, name: str, kind: SpanKind, parent: SpanContext | None, seed: int,  # noqa: PLR0917 - start_span's
             attributes: dict[str, AttrValue], links: Sequence[Link] | None = None,
             start_time: int | None = None, record_exception: bool = True,
             set_status_on_exception: bool = True) -> Span:
        """:meth:`start_span`'s work for reach's own spans, given the parent's span context
        (None: a new trace, of ``seed`` when it is not 0) and attributes it may keep."""
        if parent is not None:
            trace_id, state = parent.trace_id, parent.trace_state
            flags = parent.trace_flags & (_SAMPLED | _RANDOM)
        else:
            state = None
            trace_id = seed or random.getrandbits(128) or 1
            flags = _RANDOM | (_SAMPLED if trace_id & (_ID_SPACE - 1) < self._bound else 0)
        span_id = random.getrandbits(64) or 1
        ctx = SpanContext(trace_id, span_id, False, _FLAGS[flags], state)
        if not flags & _SAMPLED:
            return NonRecordingSpan(ctx)
        return StoreSpan(self._sink, name, ctx, parent, kind, attributes, links, start_time,
                         record_exception, set_status_on_exception)

    @_agnosticcontextmanager
    def start_as_current_span(self, name: str, context: Context | None = None,  # noqa: PLR0917 - the API's
                              kind: SpanKind = SpanKind.INTERNAL,
                              attributes: types.Attributes = None,
                              links: Sequence[Link] | None = (), start_time: int | None = None,
                              record_exception: bool = True,
                              set_status_on_exception: bool = True,
                              end_on_exit: bool = True) -> Iterator[Span]:
        """A span (see :meth:`start_span`), current while the block runs."""
        span = self.start_span(name, context, kind, attributes, links, start_time,
                               record_exception, set_status_on_exception)
        with trace.use_span(span, end_on_exit=end_on_exit, record_exception=record_exception,
                            set_status_on_exception=set_status_on_exception) as current:
            yield current


class StoreTracerProvider(TracerProvider):
    """A process's :class:`StoreTracer` (one, whatever the instrumentation scope asked).

    Args:
        ratio: The share of new traces kept.
        sink: Where its spans go (None: nowhere).
    """

    def __init__(self, ratio: float, sink: SpanSink | None) -> None:
        self.sink = sink
        self._tracer = StoreTracer(sink, ratio)

    def get_tracer(self, instrumenting_module_name: str,
                   instrumenting_library_version: str | None = None,
                   schema_url: str | None = None,
                   attributes: types.Attributes | None = None) -> Tracer:
        """The tracer."""
        return self._tracer

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Sends the spans held (from the event loop: not waited for)."""
        if self.sink is not None:
            self.sink.force_flush()
        return True

    def shutdown(self) -> None:
        """Sends the spans held."""
        self.force_flush()


__all__ = ["BATCH_DELAY_S", "BATCH_SPANS", "SEED", "STORE_QUEUE", "SendBatch", "SpanSink",
           "StoreSpan", "StoreTracer", "StoreTracerProvider"]
