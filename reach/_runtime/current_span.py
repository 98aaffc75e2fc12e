"""The current span, read and made current as OpenTelemetry's API does it
(``trace.get_current_span()``, ``context.attach(trace.set_span_in_context(span))`` and
``context.detach(token)``), at a third of the cost: every traced send reads it and every traced
handler run sets it.

The API goes through layers of calls to one context variable: the one of its default runtime
context (``contextvars``). Where that is the runtime context in use, these functions use that
variable directly, with the API's own key for the current span; where another one was chosen
(``OTEL_PYTHON_CONTEXT``), they are the API's own functions.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import INVALID_SPAN, Span

#: The key under which a context holds its current span (the API's own, read from a context
#: the API made: its name is not public).
(SPAN_KEY,) = trace.set_span_in_context(INVALID_SPAN, Context()).keys()

#: What :func:`enter` returns and :func:`leave` takes.
Token = Any


def runtime_variable() -> ContextVar[Context] | None:
    """The context variable that holds OpenTelemetry's current context, when its runtime
    context is the default one; None for any other."""
    var = getattr(getattr(otel_context, "_RUNTIME_CONTEXT", None), "_current_context", None)
    return var if isinstance(var, ContextVar) else None


def operations(var: ContextVar[Context] | None) -> tuple[
        Callable[[], Span], Callable[[Span], Token], Callable[[Token], None]]:
    """:func:`current_span`, :func:`enter` and :func:`leave` for the runtime context whose
    variable is ``var`` (None: the API's own functions)."""
    if var is None:
        def enter_api(span: Span) -> Token:
            return otel_context.attach(trace.set_span_in_context(span))

        return trace.get_current_span, enter_api, otel_context.detach
    get, key = var.get, SPAN_KEY

    def current() -> Span:
        span = get().get(key)
        return INVALID_SPAN if span is None else span  # type: ignore[return-value]

    def enter(span: Span) -> Token:
        context = get()
        return var.set(Context({**context, key: span}) if context else Context({key: span}))

    return current, enter, var.reset


#: This process's current span (``trace.get_current_span()``): INVALID_SPAN when there is none.
#: ``enter(span)`` makes ``span`` current until ``leave`` is given what it returned (in the same
#: task or thread).
current_span, enter, leave = operations(runtime_variable())
#: The current context (``context.get_current()``), which holds the current span under
#: :data:`SPAN_KEY`: empty, and so false, where no span is current and nothing else was set (a
#: question some four times quicker than :func:`current_span`'s).
context_now: Callable[[], Context] = getattr(runtime_variable(), "get", otel_context.get_current)

__all__ = ["SPAN_KEY", "Token", "context_now", "current_span", "enter", "leave", "operations",
           "runtime_variable"]
