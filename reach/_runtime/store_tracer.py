"""The tracer of a process whose spans go to the cluster's trace store only (no OTLP endpoint).

OpenTelemetry's SDK makes a span of a score of objects and copies it again as it ends, for
exporters this process does not have; here a span is one object on the OpenTelemetry API
(:class:`StoreSpan`: a handler's ``trace.get_current_span()`` is one, and takes attributes and
events as any span does) that keeps its IDs as the hex text the envelopes and the store use,
and ends as one packed row of a :class:`~reach.spans.SpanBatch`, which a
:class:`~reach._runtime.span_sink.SpanSink` sends to the store. Its decisions are the SDK's with
reach's settings: a parent-based sampler by trace ID ratio (the decisions of
``ParentBased(TraceIdRatioBased(ratio))``), the trace IDs of :data:`SEED`, the same trace
flags, the same rules for attributes and status.

Where an OTLP endpoint is set, or a test installs an SDK provider, the SDK traces instead
(:mod:`reach._runtime.span_export`): OTLP gets the SDK's spans.
"""

from __future__ import annotations

import logging
import os
import random
import traceback
from collections.abc import Iterator, Mapping, Sequence
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
    TraceState,
)
from opentelemetry.util import types
from opentelemetry.util._decorator import _agnosticcontextmanager  # as the SDK: a decorator too

from reach._runtime.span_sink import SpanSink
from reach.spans import AttrValue

log = logging.getLogger("reach._runtime.store_tracer")

#: A trace ID (as an int) that the next span to start a trace takes, when set: read by this
#: module's tracer and by the SDK's ID generator of :mod:`reach._runtime.span_export` (a span
#: with a parent keeps its parent's).
SEED: ContextVar[int | None] = ContextVar("reach_trace_seed", default=None)

#: A span's kind as the store names it.
KINDS = {SpanKind.INTERNAL: "internal", SpanKind.SERVER: "server", SpanKind.CLIENT: "client",
         SpanKind.PRODUCER: "producer", SpanKind.CONSUMER: "consumer"}
_ID_SPACE = 1 << 64
_SAMPLED, _RANDOM = TraceFlags.SAMPLED, TraceFlags.RANDOM_TRACE_ID
_FLAGS = tuple(TraceFlags(flags) for flags in range(4))
#: The W3C trace flags a span passes on to its children (sampled, random trace ID).
KEPT_FLAGS = _SAMPLED | _RANDOM
_STATUSES = {StatusCode.UNSET: "unset", StatusCode.OK: "ok", StatusCode.ERROR: "error"}
_UNSET = Status(StatusCode.UNSET)
#: A span's own attributes: a map, or keys and values in turn in one flat tuple (as reach's send
#: and handler spans start with theirs, which is quicker to make and to pack, see SpanRow).
OwnAttributes = dict[str, AttrValue] | tuple[str | AttrValue, ...]


def own_map(attributes: OwnAttributes) -> dict[str, AttrValue]:
    """Own attributes as a map."""
    if isinstance(attributes, dict):
        return attributes
    return dict(zip(attributes[::2], attributes[1::2], strict=True))  # type: ignore[arg-type]


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


#: Span IDs made ahead, as hex (see new_span_hex); emptied in a forked child, which must not
#: reuse its parent's.
_SPAN_IDS: list[str] = []
_IDS_AHEAD = 256
_ZERO_ID = "0" * 16
os.register_at_fork(after_in_child=_SPAN_IDS.clear)


def new_span_hex() -> str:
    """A random span ID as 16 hex digits, never all zeros: cut from one random number made for
    256 of them at a time, written as hex with a space after each 16 digits and split there
    (some 50 ns an ID, a fifth of the time of making each on its own)."""
    while True:
        try:
            return _SPAN_IDS.pop()
        except IndexError:
            digits = random.getrandbits(64 * _IDS_AHEAD).to_bytes(8 * _IDS_AHEAD).hex(" ", 8)
            ids = digits.split()
            # (16 zeros in a row can only be an ID: a space is between any two)
            _SPAN_IDS.extend([i for i in ids if i != _ZERO_ID] if _ZERO_ID in digits else ids)


class StoreSpan(Span):
    """A span that records into a sink as it ends (see the module's docstring).

    Attributes:
        trace_hex: Its trace ID (32 hex digits).
        span_hex: Its span ID (16 hex digits).
        flags: Its W3C trace flags (sampled, and random when its trace's ID is).

    Args:
        sink: Where it goes as it ends (None: nowhere).
        name: Its name.
        kind: Its kind, as the store names it (:data:`KINDS`).
        trace_hex: Its trace ID.
        parent_hex: Its parent's span ID, or None for a trace's root.
        flags: Its trace flags.
        attributes: Its own attributes (:data:`OwnAttributes`, kept as given: reach's own
            are scalars).
        shared: Attributes it shares with many others (one object for all of them, never
            changed, sent once per batch); its own win over them.
    """

    # What most spans keep as it is, kept by the class until a span changes it.
    _context: SpanContext | None = None
    _state: TraceState | None = None
    _events: list[list[Any]] | None = None
    _links: list[list[str]] | None = None
    _status = _UNSET
    _end_ns: int | None = None
    _shared: Mapping[str, AttrValue] | None = None
    _record_exception = True
    _set_status_on_exception = True

    def __init__(self, sink: SpanSink | None, name: str, kind: str, trace_hex: str,  # noqa: PLR0917 - a span's fields
                 parent_hex: str | None, flags: int, attributes: OwnAttributes,
                 shared: Mapping[str, AttrValue] | None = None) -> None:
        self._sink = sink
        self._name = name
        self._kind = kind
        self.trace_hex = trace_hex
        try:  # (new_span_hex(), inline: every span takes one)
            self.span_hex = _SPAN_IDS.pop()
        except IndexError:
            self.span_hex = new_span_hex()
        self._parent = parent_hex
        self.flags = flags
        self._attributes = attributes
        if shared is not None:
            self._shared = shared
        self._start_ns = time_ns()

    def get_span_context(self) -> SpanContext:
        """Its context (made when first asked for)."""
        ctx = self._context
        if ctx is None:
            ctx = self._context = SpanContext(int(self.trace_hex, 16), int(self.span_hex, 16),
                                              False, _FLAGS[self.flags], self._state)
        return ctx

    def is_recording(self) -> bool:
        """Until it ends."""
        return self._end_ns is None

    def set_attributes(self, attributes: Mapping[str, types.AnyValue]) -> None:
        """Sets attributes (ignored once ended)."""
        if not self._ended("an attribute"):
            own = self._attributes = own_map(self._attributes)  # a map from now on
            own.update(_clean(attributes))

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
        if self._end_ns is not None:  # (_ended(), inline: every span ends)
            self._ended("an end")
            return
        end = self._end_ns = time_ns() if end_time is None else end_time
        sink = self._sink
        if sink is None:
            return
        status, attributes = self._status, self._attributes
        if (type(attributes) is tuple and status is _UNSET and self._events is None
                and self._links is None):  # (a send's, a handler's) a short row
            sink.add_short(self.trace_hex, self.span_hex, self._parent, self._name, self._kind,
                           self._start_ns, end, attributes, self._shared)
            return
        code, text = ("unset", "") if status is _UNSET else (
            _STATUSES[status.status_code], status.description or "")
        sink.add([self.trace_hex, self.span_hex, self._parent, self._name, self._kind,
                  self._start_ns, end, code, text, attributes, self._events, self._links],
                 self._shared)

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

    Attributes:
        sink: Where its spans go as they end (None: nowhere).
        bound: Its ratio's bound: a new trace is kept when its ID's low 64 bits are below it.

    Args:
        sink: Where its spans go as they end (None: nowhere).
        ratio: The share of new traces kept.
    """

    def __init__(self, sink: SpanSink | None, ratio: float) -> None:
        self.sink = sink
        self.bound = round(ratio * _ID_SPACE)

    def start_span(self, name: str, context: Context | None = None,  # noqa: PLR0917 - the API's
                   kind: SpanKind = SpanKind.INTERNAL, attributes: types.Attributes = None,
                   links: Sequence[Link] | None = (), start_time: int | None = None,
                   record_exception: bool = True,
                   set_status_on_exception: bool = True) -> Span:
        """A span, the child of the span of ``context`` (None: the current one)."""
        span = self.under(name, KINDS[kind], trace.get_current_span(context), SEED.get() or 0,
                          None, dict(attributes) if attributes else {})  # type: ignore[arg-type]
        if isinstance(span, StoreSpan):
            if start_time is not None:
                span._start_ns = start_time
            for link in links or ():
                span.add_link(link.context)
            span._record_exception = record_exception
            span._set_status_on_exception = set_status_on_exception
        return span

    def under(self, name: str, kind: str, parent: Span, seed: int,  # noqa: PLR0917 - a span's fields
              trace_hex: str | None, attributes: OwnAttributes,
              shared: Mapping[str, AttrValue] | None = None) -> Span:
        """A span under ``parent`` (the current span, or one carrying a context), or, under an
        invalid one, a span that starts a trace (see :meth:`root`)."""
        if type(parent) is StoreSpan:
            return self.child(name, kind, parent.trace_hex, parent.span_hex, parent.flags,
                              attributes, parent._state, shared)
        ctx = parent.get_span_context()
        if ctx.is_valid:
            return self.child(name, kind, f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}",
                              ctx.trace_flags, attributes, ctx.trace_state or None, shared)
        return self.root(name, kind, seed, trace_hex if seed else None, attributes, shared)

    def child(self, name: str, kind: str, trace_hex: str, parent_hex: str, flags: int,  # noqa: PLR0917 - a span's fields
              attributes: OwnAttributes, state: TraceState | None = None,
              shared: Mapping[str, AttrValue] | None = None) -> StoreSpan | NonRecordingSpan:
        """A span under a parent of ``trace_hex`` and ``parent_hex`` (both W3C) with W3C trace
        ``flags`` (and a trace ``state`` to carry on, attributes ``shared`` with other spans):
        kept when its parent was."""
        flags &= KEPT_FLAGS
        if not flags & _SAMPLED:
            return NonRecordingSpan(SpanContext(int(trace_hex, 16), random.getrandbits(64) or 1,
                                                False, _FLAGS[flags], state))
        span = StoreSpan(self.sink, name, kind, trace_hex, parent_hex, flags, attributes, shared)
        if state is not None:
            span._state = state
        return span

    def root(self, name: str, kind: str, seed: int, trace_hex: str | None,  # noqa: PLR0917 - a span's fields
             attributes: OwnAttributes,
             shared: Mapping[str, AttrValue] | None = None) -> StoreSpan | NonRecordingSpan:
        """A span that starts a trace, of ``seed`` (its hex text ``trace_hex`` when known) or
        with ``seed`` 0, of a random ID: kept by the ratio."""
        trace_id = seed or random.getrandbits(128) or 1
        if trace_id & (_ID_SPACE - 1) >= self.bound:
            return NonRecordingSpan(SpanContext(trace_id, random.getrandbits(64) or 1, False,
                                                _FLAGS[_RANDOM]))
        return StoreSpan(self.sink, name, kind, trace_hex or f"{trace_id:032x}", None,
                         KEPT_FLAGS, attributes, shared)

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


__all__ = ["KEPT_FLAGS", "KINDS", "SEED", "OwnAttributes", "StoreSpan", "StoreTracer",
           "StoreTracerProvider", "new_span_hex", "own_map"]
