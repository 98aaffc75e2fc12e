"""The current span as reach reads and sets it (on every traced send and handler run) is the
one OpenTelemetry's API reads and sets: either way round, with the context's other values kept,
restored on leaving, and the API's own functions where another runtime context is in use."""

from __future__ import annotations

import asyncio
from contextvars import ContextVar, copy_context

import pytest
from opentelemetry import baggage, trace
from opentelemetry import context as otel_context
from opentelemetry.context import Context
from opentelemetry.trace import INVALID_SPAN, NonRecordingSpan, Span, SpanContext

from reach._runtime import current_span as cs


def span(n: int) -> Span:
    return NonRecordingSpan(SpanContext(n, n, is_remote=False))


@pytest.mark.parametrize("var", [cs.runtime_variable(), None], ids=["direct", "api"])
def test_a_span_entered_is_the_api_s_current_span_until_left(
        var: ContextVar[Context] | None) -> None:
    current, enter, leave = cs.operations(var)

    def scenario() -> None:
        assert current() is trace.get_current_span() is INVALID_SPAN
        token = otel_context.attach(baggage.set_baggage("tenant", "acme"))
        outer, inner = span(1), span(2)
        outer_token = enter(outer)
        assert current() is trace.get_current_span() is outer
        with trace.use_span(inner):  # the API's, inside reach's
            assert current() is inner
        inner_token = enter(inner)
        assert trace.get_current_span() is inner
        assert baggage.get_baggage("tenant") == "acme"  # the context's other values kept
        leave(inner_token)
        assert trace.get_current_span() is outer
        leave(outer_token)
        assert current() is trace.get_current_span() is INVALID_SPAN
        assert baggage.get_baggage("tenant") == "acme"
        otel_context.detach(token)

    copy_context().run(scenario)


def test_the_direct_way_is_the_one_in_use_with_the_default_runtime_context() -> None:
    assert cs.runtime_variable() is not None
    assert cs.current_span is not trace.get_current_span
    assert cs.SPAN_KEY in trace.set_span_in_context(span(3), Context())


def test_a_span_entered_in_a_task_is_not_current_in_another() -> None:
    seen: list[Span] = []

    async def handler(n: int, entered: asyncio.Event, other: asyncio.Event) -> None:
        token = cs.enter(span(n))
        entered.set()
        await other.wait()
        seen.append(cs.current_span())
        cs.leave(token)

    async def scenario() -> None:
        first, second = asyncio.Event(), asyncio.Event()
        await asyncio.gather(handler(1, first, second), handler(2, second, first))
        seen.append(cs.current_span())

    asyncio.run(scenario())
    assert sorted(s.get_span_context().span_id for s in seen[:2]) == [1, 2]
    assert seen[2] is INVALID_SPAN
