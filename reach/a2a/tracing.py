"""A2A calls in reach's traces: the W3C ``traceparent`` header, both ways.

The gateway continues a caller's trace: each JSON-RPC call is a server span
(:data:`SpanName.A2A <reach.spans.SpanName>`, subject the method, with the caller's principal),
the child of the span its ``traceparent`` names, current while the call is handled (so the task
it starts, and what that task sends, belong to the caller's trace). The outbound proxy sends
one: each call to a remote A2A agent is a client span, and every request of the proxy's HTTP
client carries the current span as its ``traceparent``. Where the process does not trace,
nothing is read, made or sent.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager

import httpx
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from reach._runtime.tracer import TRACING, failed, start
from reach.errors import ReachError
from reach.spans import Attr, SpanName

_W3C = TraceContextTextMapPropagator()


@contextmanager
def a2a_span(name: str, kind: SpanKind, *, headers: Mapping[str, str] | None = None,
             attributes: Mapping[str, str] | None = None) -> Iterator[Span | None]:
    """A span of an A2A call, current while the block runs (None when this process does not
    trace): a server span continuing the ``traceparent`` of ``headers`` when they are given,
    else a child of the current span. A ReachError raised in the block marks it failed."""
    tracer = TRACING.tracer
    if tracer is None:
        yield None
        return
    context = _W3C.extract(headers) if headers is not None else None
    span = start(tracer, f"{SpanName.A2A} {name}", kind, context=context)
    if span.is_recording() and attributes:
        span.set_attributes(dict(attributes))
    with trace.use_span(span, end_on_exit=True, record_exception=False,
                        set_status_on_exception=False):
        try:
            yield span
        except ReachError as exc:
            failed(span, exc)
            raise


def served(method: str, headers: Mapping[str, str],
           principal: str) -> AbstractContextManager[Span | None]:
    """The gateway's server span of one call of ``method`` (see :func:`a2a_span`)."""
    return a2a_span(method, SpanKind.SERVER, headers=headers,
                    attributes={Attr.PRINCIPAL: principal})


def current_trace_id(default: str) -> str:
    """The trace of the current span (an A2A caller's), or ``default`` outside any."""
    ctx = trace.get_current_span().get_span_context()
    return f"{ctx.trace_id:032x}" if ctx.is_valid else default


async def send_traceparent(request: httpx.Request) -> None:
    """An httpx request hook: the current span (if any) as the request's ``traceparent``."""
    if TRACING.tracer is not None:
        _W3C.inject(request.headers)


__all__ = ["a2a_span", "current_trace_id", "send_traceparent", "served"]
