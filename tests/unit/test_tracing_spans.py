"""reach's spans on the fake cluster, caught by the SDK's in-memory exporter: the parent links of
a request -> handler -> nested request -> handler chain, a routed send's chosen holder, errors,
notifications, restarts and task attempts, sampling, and a process that does not trace."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import SpanKind, StatusCode
from pydantic import BaseModel

import reach
from policies.tasks import SeverityPolicy, TaskState
from reach._runtime.span_export import SeededIds
from reach._runtime.tracer import TRACING, start_handle, use
from reach.errors import Severity
from reach.spans import Attr
from reach.testing import FakeCluster, eventually, run


@reach.schema("tru.ask@1.0")
class Ask(BaseModel):
    text: str
    fail: str = ""


@reach.schema("tru.answer@1.0")
class Answer(BaseModel):
    text: str
    by: str
    span_id: str | None = None


class Echo(reach.Agent):
    """Answers with what it got, and the span ID its request carried."""

    capabilities = ("tru.echo",)

    @reach.handler(Ask, returns=Answer)
    async def say(self, ctx: reach.Context, m: Ask) -> Answer:
        if m.fail:
            raise reach.ReachError(f"asked to fail {m.fail}", severity=Severity(m.fail))
        return Answer(text=m.text, by=self.id, span_id=ctx.parent.span_id)

    @reach.handler(Answer)
    async def heard(self, ctx: reach.Context, m: Answer) -> None:
        return None


class Relay(reach.Agent):
    """Asks a holder of tru.echo, by capability, and answers with its answer."""

    capabilities = ("tru.relay",)

    @reach.handler(Ask, returns=Answer)
    async def say(self, ctx: reach.Context, m: Ask) -> Answer:
        return (await ctx.request_capability("tru.echo", m, returns=Answer)).value


@contextmanager
def traced(ratio: float = 1.0) -> Iterator[InMemorySpanExporter]:
    """This process traces into an in-memory exporter while the block runs."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=ParentBased(TraceIdRatioBased(ratio)),
                              id_generator=SeededIds())
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    use(provider)
    try:
        yield exporter
    finally:
        use(None)


def hexed(span: ReadableSpan) -> tuple[str, str]:
    ctx = span.get_span_context()
    return f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"


def parent_of(span: ReadableSpan) -> str | None:
    return None if span.parent is None else f"{span.parent.span_id:016x}"


def named(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def test_a_request_a_handler_a_nested_request_and_its_handler_are_one_trace_of_parents() -> None:
    async def scenario(fake: FakeCluster) -> tuple[reach.Reply[Answer], reach.AgentRecord]:
        rt = fake.runtime()
        await rt.spawn(Relay, "tru-relay-1")
        await rt.spawn(Echo, "tru-echo-1", placement=reach.Packed(pool="tru-p", size=1))
        reply = await rt.client.request("tru-relay-1", Ask(text="hi"), returns=Answer)
        return reply, await rt.cluster.registry().lookup("tru-echo-1")

    with traced() as caught:
        reply, record = run(scenario)
    spans = caught.get_finished_spans()
    (send_relay,) = named(spans, "send tru-relay-1")
    (handle_relay,) = [s for s in named(spans, "handle tru.ask@1.0")
                       if s.attributes[Attr.AGENT_ID] == "tru-relay-1"]
    (send_echo,) = named(spans, "send tru.echo")
    (handle_echo,) = [s for s in named(spans, "handle tru.ask@1.0")
                      if s.attributes[Attr.AGENT_ID] == "tru-echo-1"]
    trace_id = reply.envelope.trace_id
    assert {hexed(s)[0] for s in (send_relay, handle_relay, send_echo, handle_echo)} == {trace_id}
    assert parent_of(send_relay) is None
    assert parent_of(handle_relay) == hexed(send_relay)[1]
    assert parent_of(send_echo) == hexed(handle_relay)[1]
    assert parent_of(handle_echo) == hexed(send_echo)[1]
    assert reply.value.span_id == hexed(send_echo)[1]  # what the envelope carried
    assert (send_relay.kind, handle_relay.kind) == (SpanKind.CLIENT, SpanKind.SERVER)
    # the routed send names its capability and the holder chosen
    assert send_echo.attributes[Attr.RECEIVER] == "tru.echo"
    assert send_echo.attributes[Attr.CAPABILITY] == "tru.echo"
    assert send_echo.attributes[Attr.AGENT_ID] == "tru-echo-1"
    assert handle_echo.attributes[Attr.SENDER] == "tru-relay-1"
    assert handle_echo.attributes[Attr.CAPABILITY] == "tru.echo"
    assert handle_echo.attributes[Attr.HOST] == record.host
    assert handle_echo.attributes[Attr.NODE] == record.node
    assert handle_echo.attributes[Attr.EPOCH] == record.epoch == 1
    assert float(handle_echo.attributes[Attr.QUEUED_MS]) >= 0  # type: ignore[arg-type]


def test_a_handler_s_span_names_the_epoch_and_node_its_agent_has_when_it_runs() -> None:
    async def scenario(fake: FakeCluster) -> str:
        rt = fake.runtime()
        await rt.spawn(Echo, "tru-echo-e", placement=reach.Packed(pool="tru-e", size=1))
        await rt.client.request("tru-echo-e", Ask(text="first"), returns=Answer)
        record = await rt.cluster.registry().lookup("tru-echo-e")
        runner = fake.process(record.host).runners["tru-echo-e"]
        runner.epoch, runner.node = 7, "node-z"  # as its host registers it again
        await rt.client.request("tru-echo-e", Ask(text="second"), returns=Answer)
        return record.node

    with traced() as caught:
        node = run(scenario)
    handled = [s for s in caught.get_finished_spans() if s.name == "handle tru.ask@1.0"]
    assert [(s.attributes[Attr.EPOCH], s.attributes[Attr.NODE]) for s in handled] == [
        (1, node), (7, "node-z")]
    assert all(s.attributes[Attr.CAPABILITY] == "tru.echo" for s in handled)


def test_a_handler_s_error_ends_its_span_and_the_send_s_in_error_with_code_and_severity() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        await rt.spawn(Echo, "tru-echo-2")
        with pytest.raises(reach.ReachError) as caught:
            await rt.client.request("tru-echo-2", Ask(text="x", fail="fatal"))
        assert caught.value.severity is Severity.FATAL

    with traced() as exported:
        run(scenario)
    spans = exported.get_finished_spans()
    for span in (*named(spans, "handle tru.ask@1.0"), *named(spans, "send tru-echo-2")):
        assert span.status.status_code is StatusCode.ERROR
        assert span.status.description == "asked to fail fatal"
        assert span.attributes[Attr.ERROR_CODE] == "reach_error"
        assert span.attributes[Attr.ERROR_SEVERITY] == "fatal"


def test_a_notification_is_a_client_span_parent_of_its_handler_s() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        await rt.spawn(Echo, "tru-echo-3")
        await rt.client.notify("tru-echo-3", Answer(text="n", by="me"))

        async def handled() -> bool:
            return any(s.name == "handle tru.answer@1.0" for s in caught.get_finished_spans())
        await eventually(handled)

    with traced() as caught:
        run(scenario)
    spans = caught.get_finished_spans()
    (send,) = named(spans, "send tru-echo-3")
    (handle,) = named(spans, "handle tru.answer@1.0")
    assert send.attributes[Attr.MSG_TYPE] == "notification"
    assert parent_of(handle) == hexed(send)[1]


def test_with_sampling_off_nothing_is_recorded_and_the_decision_travels() -> None:
    async def scenario(fake: FakeCluster) -> reach.Reply[Answer]:
        rt = fake.runtime()
        await rt.spawn(Relay, "tru-relay-4")
        await rt.spawn(Echo, "tru-echo-4")
        return await rt.client.request("tru-relay-4", Ask(text="hi"), returns=Answer)

    with traced(ratio=0.0) as caught:
        reply = run(scenario)
    assert caught.get_finished_spans() == ()
    assert reply.value.span_id is not None  # the context went on, marked not sampled


def test_a_process_that_does_not_trace_sends_no_trace_context() -> None:
    async def scenario(fake: FakeCluster) -> reach.Reply[Answer]:
        rt = fake.runtime()
        await rt.spawn(Echo, "tru-echo-5")
        return await rt.client.request("tru-echo-5", Ask(text="hi"), returns=Answer)

    assert TRACING.tracer is None
    reply = run(scenario)
    assert reply.value.span_id is None


def test_an_envelope_without_a_span_id_starts_a_trace_of_its_own_trace_id() -> None:
    old = reach.Envelope.request("tru-old-peer", "tru-echo-6", {"text": "x"}, "tru.ask@1.0")
    with traced() as caught:
        assert TRACING.tracer is not None
        start_handle(TRACING.tracer, old, {}).end()
    (span,) = caught.get_finished_spans()
    assert span.parent is None
    assert hexed(span)[0] == old.trace_id


def test_a_restart_is_a_span_with_the_supervisor_s_decision_and_the_exit_reason() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        sup = await rt.supervise(reach.SupervisorSpec("tru-s", children=[
            reach.ChildSpec(Echo, "tru-echo-7", placement=reach.Packed(pool="tru-q", size=1))]))
        fake.crash((await rt.cluster.registry().lookup("tru-echo-7")).host)

        async def restarted() -> bool:
            return bool((await sup.status()).restarts)
        await eventually(restarted)

    with traced() as caught:
        run(scenario)
    (span,) = named(caught.get_finished_spans(), "restart tru-echo-7")
    assert span.attributes[Attr.SUPERVISOR] == "tru-s"
    assert span.attributes[Attr.CHILD] == "tru-echo-7"
    assert span.attributes[Attr.DECISION] == "restart"
    assert span.attributes[Attr.REASON]
    assert span.parent is None
    assert span.status.status_code is StatusCode.UNSET


def test_task_attempts_are_spans_linked_to_the_first_with_their_decisions() -> None:
    async def scenario(fake: FakeCluster) -> reach.TaskResult:
        rt = fake.runtime()
        sup = await rt.supervise(reach.SupervisorSpec("tru-t", seed=7, task_policy=SeverityPolicy(),
                                                      children=[
            reach.ChildSpec(Echo, "tru-echo-8a", placement=reach.Packed(pool="tru-r", size=2)),
            reach.ChildSpec(Echo, "tru-echo-8b", placement=reach.Packed(pool="tru-r", size=2))]))
        task = await sup.submit("tru.echo", Ask(text="x", fail="retryable"),
                                by_capability=True, retry_limit=1)
        return await task.result()

    with traced() as caught:
        result = run(scenario)
    assert result.state is TaskState.FAILED
    spans = caught.get_finished_spans()
    first, second = sorted(named(spans, "attempt tru.ask@1.0"),
                           key=lambda s: s.attributes[Attr.ATTEMPT])
    assert {hexed(first)[0], hexed(second)[0]} == {result.task_id}
    assert (first.parent, second.parent) == (None, None)
    assert [f"{link.context.span_id:016x}" for link in second.links] == [hexed(first)[1]]
    assert first.attributes[Attr.DECISION] == "retry"
    assert [e.name for e in first.events] == ["failover"]
    assert second.attributes[Attr.DECISION] == "fail"
    assert {first.attributes[Attr.AGENT_ID], second.attributes[Attr.AGENT_ID]} == {
        "tru-echo-8a", "tru-echo-8b"}
    for attempt in (first, second):
        assert attempt.status.status_code is StatusCode.ERROR
        assert attempt.attributes[Attr.TASK_ID] == result.task_id
        (send,) = [s for s in spans if parent_of(s) == hexed(attempt)[1]]
        (handle,) = [s for s in spans if parent_of(s) == hexed(send)[1]]
        assert handle.attributes[Attr.AGENT_ID] == attempt.attributes[Attr.AGENT_ID]
