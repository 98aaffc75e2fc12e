"""Installing OpenTelemetry's SDK in a reach process, and sending its spans to the cluster's
trace store.

Loaded only where tracing is configured (:func:`reach._runtime.tracing_setup.setup` imports it
then): the SDK is ``reach[otel]``'s, and traces a process that exports to OTLP (one that sends
to the trace store only traces with :mod:`reach._runtime.store_tracer`, lighter). A process's
provider has a parent-based ratio sampler, an ID generator that lets a trace's first span take
reach's trace ID (:class:`SeededIds`), a
:class:`~opentelemetry.sdk.trace.export.BatchSpanProcessor` to OTLP/HTTP where an endpoint is
set, and one to the trace store (:class:`StoreExporter`), which never blocks and drops a batch
the store cannot take.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import SpanKind as OtelKind
from opentelemetry.trace import StatusCode

from reach._runtime.span_sink import STORE_QUEUE, start_send
from reach._runtime.store_tracer import SEED
from reach.spans import AttrValue, SpanBatch, SpanKind, SpanRecord, SpanRow, SpanStatus
from reach.tracing import Tracing

log = logging.getLogger("reach._runtime.span_export")

#: Sends a batch of finished spans to the trace store (its result is awaited on the process's
#: event loop, and a failure only logged).
SendSpans = Callable[[Sequence[SpanRecord]], Awaitable[None]]

_KINDS = {OtelKind.INTERNAL: SpanKind.INTERNAL.value, OtelKind.SERVER: SpanKind.SERVER.value,
          OtelKind.CLIENT: SpanKind.CLIENT.value, OtelKind.PRODUCER: SpanKind.PRODUCER.value,
          OtelKind.CONSUMER: SpanKind.CONSUMER.value}
_STATUSES = {StatusCode.UNSET: SpanStatus.UNSET.value, StatusCode.OK: SpanStatus.OK.value,
             StatusCode.ERROR: SpanStatus.ERROR.value}


class SeededIds(RandomIdGenerator):
    """Random IDs, except that a span starting a trace while
    :data:`~reach._runtime.store_tracer.SEED` is set takes that trace ID (reach's, of the
    envelope or task it is about)."""

    def generate_trace_id(self) -> int:
        """The seeded trace ID, or a random one."""
        return SEED.get() or super().generate_trace_id()


def to_row(span: ReadableSpan) -> SpanRow:
    """A finished span as a batch to the trace store packs it (on the batch processor's thread:
    every span of a process passes here, so it does no more than it must)."""
    ctx = span.context
    assert ctx is not None
    parent = span.parent
    status = span.status
    events, links = span.events, span.links
    start = span.start_time or 0
    return [f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}",
            None if parent is None else f"{parent.span_id:016x}",
            span.name, _KINDS.get(span.kind, "internal"), start, span.end_time or start,
            _STATUSES.get(status.status_code, "unset"), status.description or "",
            _attributes(span.attributes),
            [[e.name, e.timestamp, _attributes(e.attributes)] for e in events] if events else (),
            [[f"{link.context.trace_id:032x}", f"{link.context.span_id:016x}"] for link in links]
            if links else ()]


def to_record(span: ReadableSpan, process: str) -> SpanRecord:
    """A finished span as the trace store keeps it."""
    return SpanBatch.pack(process, [to_row(span)])[0]


def _attributes(attributes: object) -> dict[str, AttrValue]:
    """The attributes (reach sets scalars only; another library's sequence value is kept as
    its text)."""
    if not attributes:
        return {}
    out: dict[str, AttrValue] = dict(attributes)  # type: ignore[call-overload]
    for key, value in out.items():
        if not isinstance(value, str | bool | int | float):
            out[key] = str(value)
    return out


class StoreExporter(SpanExporter):
    """Sends finished spans to the cluster's trace store, from the process's event loop.

    ``export`` runs on the batch processor's thread: it converts the spans and hands the send
    to the loop (never waiting for it); without a loop yet, or when the send cannot start, the
    batch is dropped.

    Args:
        send: Sends a batch to the store.
        process: This process's name (each record's ``process``).
        loop: Where sends are made (see :class:`LoopFinder`, which sets it).
    """

    def __init__(self, send: SendSpans, process: str) -> None:
        self._send = send
        self.process = process
        self.loop: asyncio.AbstractEventLoop | None = None
        self.dropped = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Hands a batch to the event loop; always SUCCESS (a lost batch is only counted)."""
        loop = self.loop
        if loop is None or loop.is_closed():
            self.dropped += len(spans)
            return SpanExportResult.SUCCESS
        batch = SpanBatch.pack(self.process, [to_row(s) for s in spans])
        try:
            loop.call_soon_threadsafe(self._start, batch, len(spans))
        except RuntimeError:  # the loop closed meanwhile
            self.dropped += len(spans)
        return SpanExportResult.SUCCESS

    def _start(self, batch: SpanBatch, count: int) -> None:
        if not start_send(self._send, batch):
            self.dropped += count

    def shutdown(self) -> None:
        """Nothing to release."""


class LoopFinder(SpanProcessor):
    """Finds the process's event loop for a :class:`StoreExporter`: the loop running where
    spans start (a process's constructor may run before it; a driver may run one loop after
    another)."""

    def __init__(self, exporter: StoreExporter) -> None:
        self._exporter = exporter

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        """Notes the running loop."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        if loop is not self._exporter.loop:
            self._exporter.loop = loop

    def on_end(self, span: ReadableSpan) -> None:
        """Nothing at a span's end."""

    def shutdown(self) -> None:
        """Nothing to release."""

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Nothing held."""
        return True


def provider(tracing: Tracing, process: str, send: SendSpans | None) -> TracerProvider:
    """A tracer provider for a process called ``process``, as ``tracing`` says: sampled by
    ratio (parent-based), to OTLP/HTTP when an endpoint is set, and to the trace store through
    ``send`` when ``tracing.store`` and a ``send`` is given."""
    made = TracerProvider(
        sampler=ParentBased(TraceIdRatioBased(tracing.ratio)),
        resource=Resource.create({"service.name": tracing.service_name or "reach",
                                  "service.instance.id": process}),
        id_generator=SeededIds())
    if tracing.store and send is not None:
        exporter = StoreExporter(send, process)
        made.add_span_processor(LoopFinder(exporter))
        # Batches of up to 1,024 spans twice a second; a queue that holds some seconds of a busy
        # process's spans (past it, spans are dropped, not waited for).
        made.add_span_processor(BatchSpanProcessor(
            exporter, max_queue_size=STORE_QUEUE, schedule_delay_millis=500,
            max_export_batch_size=1024))
    url = tracing.traces_url
    if url is not None:
        made.add_span_processor(BatchSpanProcessor(_otlp(url)))
    return made


def _otlp(url: str) -> SpanExporter:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # noqa: PLC0415 - the exporter loads where an endpoint is set
        OTLPSpanExporter,
    )

    return OTLPSpanExporter(endpoint=url)


__all__ = ["LoopFinder", "SeededIds", "SendSpans", "StoreExporter", "provider", "to_record",
           "to_row"]
