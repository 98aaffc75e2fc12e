"""A2A calls in reach's traces: the W3C ``traceparent`` header, both ways.

The gateway continues a caller's trace: each JSON-RPC call is a server span
(:data:`SpanName.A2A <reach.spans.SpanName>`, subject the method, with the caller's principal),
the child of the span its ``traceparent`` names, current while the call is handled (so the task
it starts, and what that task sends, belong to the caller's trace); a call answered with a
stream of server-sent events hands the span's end to its stream, so that the span lasts until the
stream's last event (:func:`end_with_stream`). The outbound proxy sends
one: each call to a remote A2A agent is a client span, and every request of the proxy's HTTP
client carries the current span as its ``traceparent``. Where the process does not trace,
nothing is read, made or sent.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar

import httpx
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from reach._runtime.tracer import TRACING, failed, start
from reach.errors import ReachError
from reach.spans import Attr, SpanName

_W3C = TraceContextTextMapPropagator()


class _Serving:
    """The span of an A2A call being served, and whether its end was handed to a stream."""

    __slots__ = ("ended", "handed", "span")

    def __init__(self, span: Span) -> None:
        self.span = span
        self.handed = False
        self.ended = False

    def end(self) -> None:
        """Ends the span, once."""
        if not self.ended:
            self.ended = True
            self.span.end()


#: The call being served in this context (None outside one, or where the process does not trace).
_SERVING: ContextVar[_Serving | None] = ContextVar("reach_a2a_serving", default=None)


@contextmanager
def a2a_span(name: str, kind: SpanKind, *, headers: Mapping[str, str] | None = None,
             attributes: Mapping[str, str] | None = None,
             end_on_exit: bool = True) -> Iterator[Span | None]:
    """A span of an A2A call, current while the block runs (None when this process does not
    trace): a server span continuing the ``traceparent`` of ``headers`` when they are given,
    else a child of the current span. A ReachError raised in the block marks it failed. With
    ``end_on_exit`` False, the caller ends it."""
    tracer = TRACING.tracer
    if tracer is None:
        yield None
        return
    context = _W3C.extract(headers) if headers is not None else None
    span = start(tracer, f"{SpanName.A2A} {name}", kind, context=context)
    if span.is_recording() and attributes:
        span.set_attributes(dict(attributes))
    with trace.use_span(span, end_on_exit=end_on_exit, record_exception=False,
                        set_status_on_exception=False):
        try:
            yield span
        except ReachError as exc:
            failed(span, exc)
            raise


@contextmanager
def served(method: str, headers: Mapping[str, str], principal: str) -> Iterator[Span | None]:
    """The gateway's server span of one call of ``method`` (see :func:`a2a_span`), ended as
    the block ends unless a stream took its end (:func:`end_with_stream`)."""
    with a2a_span(method, SpanKind.SERVER, headers=headers,
                  attributes={Attr.PRINCIPAL: principal}, end_on_exit=False) as span:
        if span is None:
            yield None
            return
        serving = _Serving(span)
        token = _SERVING.set(serving)
        try:
            yield span
        except BaseException:
            serving.end()  # a call that failed sends no stream
            raise
        finally:
            _SERVING.reset(token)
            if not serving.handed:
                serving.end()


def end_with_stream() -> Callable[[], None] | None:
    """Hands the end of the A2A call being served (its span) to the stream that answers it:
    the function to call once the stream's last event is sent (or the stream is closed); None
    outside a served call, or where this process does not trace."""
    serving = _SERVING.get()
    if serving is None:
        return None
    serving.handed = True
    return serving.end


def current_trace_id(default: str) -> str:
    """The trace of the current span (an A2A caller's), or ``default`` outside any."""
    ctx = trace.get_current_span().get_span_context()
    return f"{ctx.trace_id:032x}" if ctx.is_valid else default


async def send_traceparent(request: httpx.Request) -> None:
    """An httpx request hook: the current span (if any) as the request's ``traceparent``."""
    if TRACING.tracer is not None:
        _W3C.inject(request.headers)


__all__ = ["a2a_span", "current_trace_id", "end_with_stream", "send_traceparent", "served"]
