"""reach's lighter tracer, for a process whose spans go to the trace store only: the same work
makes the same spans as with the SDK (names, kinds, parents, attributes, statuses, events,
links), its sampling decisions and trace flags are the SDK's, a span takes what the API gives it
as the SDK's does, and its batches reach the store (full at once, else after a delay, from a
driver's next loop, from another thread), dropped past the bound, packed as one blob."""

from __future__ import annotations

import asyncio
import os
import pickle
import random
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import msgpack
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    Tracer,
)
from pydantic import BaseModel

import reach
from policies.tasks import SeverityPolicy
from reach import clock
from reach._runtime import store_tracer
from reach._runtime.span_export import SeededIds, to_record
from reach._runtime.span_sink import BATCH_DELAY_S, BATCH_SPANS, STORE_QUEUE, SpanSink
from reach._runtime.store_tracer import StoreTracer, StoreTracerProvider, new_span_hex
from reach._runtime.trace_setup import install
from reach._runtime.tracer import SHARED_KEPT, TRACING, start, start_handle, start_send, use
from reach.errors import Severity
from reach.spans import (
    Attr,
    AttrValue,
    SpanBatch,
    SpanEvent,
    SpanLink,
    SpanRecord,
    SpanRow,
    SpanStatus,
)
from reach.spans import SpanKind as RecordKind
from reach.testing import FakeCluster, eventually, run
from reach.tracing import Tracing

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


@reach.schema("stt.ask@1.0")
class Ask(BaseModel):
    text: str
    fail: str = ""


@reach.schema("stt.answer@1.0")
class Answer(BaseModel):
    text: str
    by: str


class Echo(reach.Agent):
    """Answers with what it got, or fails as asked; sets an attribute of its own on its span."""

    capabilities = ("stt.echo",)

    @reach.handler(Ask, returns=Answer)
    async def say(self, ctx: reach.Context, m: Ask) -> Answer:
        trace.get_current_span().set_attribute("app.words", len(m.text.split()))
        if m.fail:
            raise reach.ReachError(f"asked to fail {m.fail}", severity=Severity(m.fail))
        return Answer(text=m.text, by=self.id)

    @reach.handler(Answer)
    async def heard(self, ctx: reach.Context, m: Answer) -> None:
        return None


class Relay(reach.Agent):
    """Asks a holder of stt.echo, by capability, and answers with its answer."""

    capabilities = ("stt.relay",)

    @reach.handler(Ask, returns=Answer)
    async def say(self, ctx: reach.Context, m: Ask) -> Answer:
        return (await ctx.request_capability("stt.echo", m, returns=Answer)).value


async def work(fake: FakeCluster) -> None:
    """A request through two agents, a failed request, a notification and a task retried once
    on another holder."""
    rt = fake.runtime()
    await rt.spawn(Relay, "stt-relay")
    await rt.spawn(Echo, "stt-echo", placement=reach.Packed(pool="stt-p", size=1))
    await rt.client.request("stt-relay", Ask(text="a few words"), returns=Answer)
    with pytest.raises(reach.ReachError):
        await rt.client.request("stt-echo", Ask(text="x", fail="fatal"))
    await rt.client.notify("stt-echo", Answer(text="n", by="me"))
    sup = await rt.supervise(reach.SupervisorSpec("stt-sup", seed=7,
                                                  task_policy=SeverityPolicy(), children=[
        reach.ChildSpec(Echo, "stt-echo-a", placement=reach.Packed(pool="stt-r", size=2)),
        reach.ChildSpec(Echo, "stt-echo-b", placement=reach.Packed(pool="stt-r", size=2))]))
    task = await sup.submit("stt.echo", Ask(text="x", fail="retryable"), by_capability=True,
                            retry_limit=1)
    await task.result()


Shape = tuple[Any, ...]
_VOLATILE = {str(Attr.QUEUED_MS), str(Attr.TASK_ID)}  # a time, and a task's fresh ID
_STACK = "exception.stacktrace"  # names the frames of each tracer's own code


def shapes(records: list[SpanRecord]) -> list[Shape]:
    """Each span with its IDs and times left out: its parent and links named by their names."""
    by_id = {r.span_id: r for r in records}

    def label(span_id: str) -> tuple[str, object]:
        other = by_id[span_id]
        return other.name, other.attributes.get(str(Attr.AGENT_ID))

    return sorted(
        (r.name, r.kind, r.status, r.status_message,
         tuple(sorted((str(k), _driver(v)) for k, v in r.attributes.items()
                      if k not in _VOLATILE)),
         None if r.parent_span_id is None else label(r.parent_span_id),
         tuple((e.name, tuple(sorted((k, v) for k, v in e.attributes.items()
                                     if k != _STACK))) for e in r.events),
         tuple(label(link.span_id) for link in r.links))
        for r in records)


def _driver(value: object) -> object:
    """A driver's name, and a dedicated host's, are their own each run."""
    if isinstance(value, str):
        for prefix in ("driver:", "reach.host."):
            if value.startswith(prefix):
                return prefix
    return value


def with_sdk(scenario: Callable[[FakeCluster], Awaitable[None]]) -> list[SpanRecord]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=ParentBased(TraceIdRatioBased(1.0)),
                              id_generator=SeededIds())
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    use(provider, 1.0)
    try:
        run(scenario)
    finally:
        use(None)
    return [to_record(s, "stt") for s in exporter.get_finished_spans()]


def with_store_tracer(scenario: Callable[[FakeCluster], Awaitable[None]]) -> list[SpanRecord]:
    async def traced(fake: FakeCluster) -> list[SpanRecord]:
        store = fake.trace_store()
        sent: list[int] = []

        async def send(batch: SpanBatch) -> None:
            sent.append(len(batch))
            await store.add_spans(batch)

        provider = StoreTracerProvider(1.0, SpanSink(send, "stt"))
        use(provider, 1.0)
        try:
            await scenario(fake)
        finally:
            use(None)
        provider.force_flush()

        async def all_held() -> bool:
            return (await store.trace_stats()).received == sum(sent) > 0
        await eventually(all_held)
        found = await store.find_traces(limit=1000)
        return [span for t in found for span in await store.trace(t.trace_id)]

    return run(traced)


# -- the same spans as the SDK's --------------------------------------------------------------


def test_the_same_work_makes_the_same_spans_as_with_the_sdk() -> None:
    sdk, ours = with_sdk(work), with_store_tracer(work)
    assert len(ours) == len(sdk) > 10
    assert shapes(ours) == shapes(sdk)
    echoed = [s for s in ours if s.name == "handle stt.ask@1.0"
              and str(s.attributes[Attr.AGENT_ID]).startswith("stt-echo")]
    assert {s.attributes["app.words"] for s in echoed} == {1, 3}  # the handler's own


def test_a_trace_s_first_span_takes_reach_s_trace_id_and_its_children_the_same() -> None:
    provider = StoreTracerProvider(1.0, None)
    tracer = provider.get_tracer("t")
    root = start(tracer, "a", SpanKind.INTERNAL, context=None, trace_id=TRACE)
    with trace.use_span(root, end_on_exit=True):
        child = start(tracer, "b", SpanKind.INTERNAL, context=None, trace_id="not-w3c")
    assert f"{root.get_span_context().trace_id:032x}" == TRACE
    assert child.get_span_context().trace_id == root.get_span_context().trace_id
    other = start(tracer, "c", SpanKind.INTERNAL, context=None, trace_id="not-w3c")
    assert f"{other.get_span_context().trace_id:032x}" != TRACE


def test_a_send_of_an_envelope_just_built_carries_its_span_in_it_and_others_in_a_copy() -> None:
    tracer = StoreTracerProvider(1.0, None).get_tracer("t")
    built = reach.Envelope.request("stt-a", "stt-b", {"text": "x"}, "stt.ask@1.0",
                                   trace_id=TRACE)
    shared = reach.Envelope.request("stt-a", "stt-b", {"text": "x"}, "stt.ask@1.0",
                                    trace_id=TRACE)
    span, sent = start_send(tracer, built, fresh=True)
    other, copy = start_send(tracer, shared)
    assert sent is built
    assert copy is not shared
    assert (shared.span_id, shared.trace_flags) == (None, 0)  # the one held elsewhere: as it was
    for made, by in ((sent, span), (copy, other)):
        ctx = by.get_span_context()
        assert (made.trace_id, made.span_id, made.trace_flags) == (
            TRACE, f"{ctx.span_id:016x}", int(ctx.trace_flags))


@pytest.mark.parametrize("ratio", [0.0, 0.01, 0.5, 1.0])
def test_its_sampling_decisions_and_trace_flags_are_the_sdk_s(ratio: float) -> None:
    sdk = TracerProvider(sampler=ParentBased(TraceIdRatioBased(ratio)),
                         id_generator=SeededIds()).get_tracer("t")
    ours = StoreTracerProvider(ratio, None).get_tracer("t")
    rng = random.Random(11)

    def flags(tracer: Tracer, trace_id: str, parent: SpanContext | None) -> tuple[bool, int]:
        context = None if parent is None else trace.set_span_in_context(NonRecordingSpan(parent))
        span = start(tracer, "x", SpanKind.SERVER, context=context, trace_id=trace_id)
        return span.is_recording(), int(span.get_span_context().trace_flags)

    for _ in range(500):
        trace_id = f"{rng.getrandbits(128) or 1:032x}"
        assert flags(ours, trace_id, None) == flags(sdk, trace_id, None)
        parent = SpanContext(int(trace_id, 16), rng.getrandbits(64) or 1, is_remote=True,
                             trace_flags=TraceFlags(rng.randrange(4)))
        assert flags(ours, trace_id, parent) == flags(sdk, trace_id, parent)


def test_a_span_takes_what_the_api_gives_it_as_the_sdk_s_does() -> None:
    def exercise(tracer: Tracer) -> None:
        linked = tracer.start_span("linked")
        linked.end()
        with tracer.start_as_current_span("outer", kind=SpanKind.SERVER) as outer:
            outer.set_attributes({"a.int": 1, "a.list": ["x", "y"], "a.none": None})
            outer.set_attribute("a.bool", True)
            outer.add_event("step", {"n": 2})
            outer.add_link(linked.get_span_context())
            outer.update_name("renamed")
            outer.set_status(Status(StatusCode.UNSET))  # ignored
            outer.record_exception(KeyError("k"), {"extra": "y"}, timestamp=5)
            with (pytest.raises(ValueError, match="boom"),
                  tracer.start_as_current_span("inner") as inner):
                assert trace.get_current_span() is inner
                raise ValueError("boom")
        outer.set_attribute("late", 1)  # ended: ignored
        ok = tracer.start_span("ok", links=[Link(linked.get_span_context())])
        ok.set_status(StatusCode.OK)
        ok.set_status(Status(StatusCode.ERROR, "too late"))  # OK is final
        ok.end()
        ok.end()

    exporter = InMemorySpanExporter()
    sdk = TracerProvider(id_generator=SeededIds())
    sdk.add_span_processor(SimpleSpanProcessor(exporter))
    exercise(sdk.get_tracer("t"))
    expected = [to_record(s, "p") for s in exporter.get_finished_spans()]

    async def caught() -> list[SpanRecord]:
        got: list[SpanRecord] = []

        async def send(batch: SpanBatch) -> None:
            got.extend(batch)

        sink = SpanSink(send, "p")
        exercise(StoreTracerProvider(1.0, sink).get_tracer("t"))
        sink.flush()
        sends = asyncio.all_tasks() - {asyncio.current_task()}
        await asyncio.gather(*sends)  # the sends flush started
        return got

    got = asyncio.run(caught())
    assert shapes(got) == shapes(expected)
    assert len(got) == 4
    inner = next(r for r in got if r.name == "inner")
    assert (inner.status, inner.status_message) == (SpanStatus.ERROR, "ValueError: boom")
    [event] = inner.events
    assert (event.name, event.attributes["exception.type"]) == ("exception", "ValueError")
    assert "ValueError: boom" in str(event.attributes["exception.stacktrace"])


# -- its batches to the store -----------------------------------------------------------------


def row(n: int) -> SpanRow:
    return [TRACE, f"{n + 1:016x}", None, "x", "internal", n, n + 1, "unset", "", {}, None, None]


@contextmanager
def sink_to(sent: list[int]) -> Iterator[SpanSink]:
    async def send(batch: SpanBatch) -> None:
        sent.append(len(batch))

    yield SpanSink(send, "stt")


def test_a_full_batch_leaves_at_once_and_the_rest_after_a_delay() -> None:
    sent: list[int] = []

    async def scenario(_fake: FakeCluster) -> None:
        with sink_to(sent) as sink:
            started = clock.monotonic()
            for n in range(BATCH_SPANS + 3):
                sink.add(row(n))
            await eventually(lambda: _true(sent == [BATCH_SPANS, 3]), every_s=0.001)
            assert clock.monotonic() - started < BATCH_DELAY_S  # the first was full
            started = clock.monotonic()
            sink.add(row(0))
            await eventually(lambda: _true(len(sent) == 3), every_s=0.01)
            assert clock.monotonic() - started >= BATCH_DELAY_S

    run(scenario)


async def _true(value: bool) -> bool:
    return value


def test_spans_held_when_a_driver_s_loop_ends_leave_from_its_next_loop() -> None:
    sent: list[int] = []
    with sink_to(sent) as sink:
        async def first(_fake: FakeCluster) -> None:
            sink.add(row(1))  # its batch is due on this loop, which ends first

        async def second(_fake: FakeCluster) -> None:
            sink.add(row(2))
            await eventually(lambda: _true(sent == [2]))

        run(first)
        assert sent == []
        run(second)
    assert sink.dropped == 0


def test_a_span_ended_on_another_thread_leaves_from_the_process_s_loop() -> None:
    sent: list[int] = []

    async def scenario(_fake: FakeCluster) -> None:
        with sink_to(sent) as sink:
            sink.add(row(0))
            await eventually(lambda: _true(sent == [1]))  # the loop is known, nothing is due
            await asyncio.to_thread(sink.add, row(1))
            await eventually(lambda: _true(sent == [1, 1]))

    run(scenario)


def test_past_the_bound_spans_are_dropped_and_counted() -> None:
    with sink_to([]) as sink:
        for n in range(STORE_QUEUE + 5):  # no loop to send from: all held
            sink.add(row(n))
        assert sink.dropped == 5


def test_a_batch_is_one_blob_that_reads_back_as_the_records_it_packed() -> None:
    rich = SpanRecord(TRACE, "00f067aa0ba902b7", "00f067aa0ba902b8", "send stt-x",
                      RecordKind.CLIENT, 10, 20, SpanStatus.ERROR, "it broke", "reach.host.x",
                      {"reach.agent_id": "stt-x", "reach.epoch": 3, "reach.queued_ms": 0.5,
                       "flag": True},
                      (SpanEvent("resend", 15, {"reach.attempt": 1}),),
                      (SpanLink(TRACE, "00f067aa0ba902b9"),))
    bare = SpanRecord(TRACE, "00f067aa0ba902ba", None, "x", RecordKind.INTERNAL, 1, 2,
                      process="reach.host.x")
    rows = [[r.trace_id, r.span_id, r.parent_span_id, r.name, r.kind.value, r.start_ns,
             r.end_ns, r.status.value, r.status_message, r.attributes,
             [[e.name, e.at_ns, e.attributes] for e in r.events],
             [[link.trace_id, link.span_id] for link in r.links]] for r in (rich, bare)]
    batch = SpanBatch.pack("reach.host.x", rows)
    copied = pickle.loads(pickle.dumps(batch))
    assert list(copied) == [rich, bare]
    assert (len(copied), copied[1], copied[:1]) == (2, bare, [rich])
    assert isinstance(copied[0].attributes["flag"], bool)
    assert len(pickle.dumps(batch)) < len(pickle.dumps([rich, bare]))


def test_a_value_msgpack_refuses_goes_as_its_text_and_a_row_with_none_is_lost_alone() -> None:
    batches: list[SpanBatch] = []

    async def scenario(_fake: FakeCluster) -> None:
        async def send(batch: SpanBatch) -> None:
            batches.append(batch)

        sink = SpanSink(send, "stt")
        sink.add(row(0))
        sink.add([*row(1)[:9], {"odd": Odd(), "huge": 1 << 70}, None, None])  # as their text
        sink.add([*row(2)[:9], {"odd": Odd(fails=True)}, None, None])  # not even so
        sink.add(row(3), {"reach.agent_id": "stt-x"})
        # A short row's own attributes too (a send's or a handler's span: reach's own scalars).
        sink.add_short(TRACE, f"{6:016x}", None, "x", "client", 6, 7, ("huge", 1 << 70), None)
        sink.add_short(TRACE, f"{7:016x}", None, "x", "client", 7, 8, ("odd", Odd(fails=True)),
                       {"reach.agent_id": "stt-x"})  # not even so
        sink.flush()
        assert sink.dropped == 2

        sink.add(row(4), {"odd": Odd(fails=True)})  # a shared set not even so: sent empty
        sink.flush()

    run(scenario)
    batch, other = batches
    assert batch.span_count() == 4
    assert [r.span_id for r in batch] == [*(row(n)[1] for n in (0, 1, 3)), f"{6:016x}"]
    assert batch[1].attributes == {"odd": "odd", "huge": str(1 << 70)}
    assert batch[2].attributes == {"reach.agent_id": "stt-x"}
    assert batch[3].attributes == {"huge": str(1 << 70)}
    assert [(r.span_id, r.attributes) for r in other] == [(row(4)[1], {})]


class Odd:
    def __init__(self, fails: bool = False) -> None:
        self.fails = fails

    def __str__(self) -> str:
        if self.fails:
            raise RuntimeError("no text")
        return "odd"


def test_send_and_handler_spans_travel_as_short_rows_and_read_back_as_any_other(
        ) -> None:
    batches: list[SpanBatch] = []

    async def scenario(_fake: FakeCluster) -> None:
        async def send(batch: SpanBatch) -> None:
            batches.append(batch)

        sink = SpanSink(send, "stt")
        tracer = StoreTracer(sink, 1.0)
        env = reach.Envelope.request("stt-caller", "stt-echo", {"text": "x"}, "stt.ask@1.0",
                                     session_id="stt-session")
        span, sent = start_send(tracer, env)
        handler = start_handle(tracer, sent, {Attr.AGENT_ID: "stt-echo"}, 0.25)
        handler.end()
        span.end()
        sink.add([*row(0)[:9], {}, [["an event", 1, {}]], None])  # a full row
        sink.flush()

    run(scenario)
    [batch] = batches
    _process, rows, _shared = msgpack.unpackb(batch.data)
    assert [len(r) for r in rows] == [9, 9, 12]  # two short, with their shared sets' indexes
    handled, sent, other = pickle.loads(pickle.dumps(batch))
    assert (handled.name, handled.kind, handled.status, handled.events) == (
        "handle stt.ask@1.0", RecordKind.SERVER, SpanStatus.UNSET, ())
    assert handled.attributes == {Attr.AGENT_ID: "stt-echo", Attr.SENDER: "stt-caller",
                                  Attr.QUEUED_MS: 0.25, Attr.SESSION_ID: "stt-session"}
    assert (sent.name, sent.kind, sent.parent_span_id, sent.attributes[Attr.SESSION_ID]) == (
        "send stt-echo", RecordKind.CLIENT, None, "stt-session")
    assert handled.parent_span_id == sent.span_id
    assert [e.name for e in other.events] == ["an event"]


def test_attributes_spans_share_travel_once_per_batch_and_read_back_on_every_span() -> None:
    echo = {"reach.agent_id": "stt-echo", "reach.capability": "stt.echo", "reach.epoch": 2}
    relay = {"reach.agent_id": "stt-relay", "reach.capability": "stt.relay", "reach.epoch": 1}
    batches: list[SpanBatch] = []

    async def scenario(_fake: FakeCluster) -> None:
        async def send(batch: SpanBatch) -> None:
            batches.append(batch)

        sink = SpanSink(send, "stt")
        for n in range(6):
            own: dict[str, AttrValue] = {"reach.sender": f"caller-{n}"}
            if n == 5:
                own["reach.epoch"] = 9  # a span's own attribute wins over a shared one
            sink.add([*row(n)[:9], own, None, None], echo if n % 2 else relay)
        await asyncio.to_thread(sink.add, [*row(6)[:9], {}, None, None], echo)  # another thread
        sink.add(row(7))
        sink.flush()
        sink.add([*row(8)[:9], {}, None, None], echo)  # the next batch: its table again
        sink.flush()

    run(scenario)
    first, second = batches
    assert first.data.count(b"stt.relay") == first.data.count(b"stt.echo") == 1
    records = list(pickle.loads(pickle.dumps(first)))
    assert [r.attributes for r in records] == [
        {**relay, "reach.sender": "caller-0"}, {**echo, "reach.sender": "caller-1"},
        {**relay, "reach.sender": "caller-2"}, {**echo, "reach.sender": "caller-3"},
        {**relay, "reach.sender": "caller-4"}, {**echo, "reach.sender": "caller-5",
                                               "reach.epoch": 9},
        echo, {}]
    assert first.span_count() == 8
    assert [r.attributes for r in second] == [echo]


def test_a_send_s_span_names_its_receiver_however_many_receivers_its_sender_had() -> None:
    batches: list[SpanBatch] = []
    sends = SHARED_KEPT + 5  # past what a process keeps of the sets its sends share

    async def scenario(_fake: FakeCluster) -> None:
        async def send(batch: SpanBatch) -> None:
            batches.append(batch)

        sink = SpanSink(send, "stt")
        tracer = StoreTracer(sink, 1.0)
        for n in range(sends):
            env = reach.Envelope.request("stt-caller", f"stt-to-{n}", {"text": "x"},
                                         "stt.ask@1.0")
            span, _ = start_send(tracer, env, "stt.cap" if n % 2 else None)
            span.end()
        sink.flush()

    run(scenario)
    records = [r for batch in batches for r in batch]
    assert [r.attributes[Attr.AGENT_ID] for r in records] == [f"stt-to-{n}" for n in range(sends)]
    assert {r.attributes[Attr.SENDER] for r in records} == {"stt-caller"}
    assert [(r.name, r.attributes.get(Attr.CAPABILITY)) for r in records[:2]] == [
        ("send stt-to-0", None), ("send stt.cap", "stt.cap")]


def test_install_traces_with_the_sdk_only_where_otlp_is_set() -> None:
    try:
        assert isinstance(install(Tracing(1.0), "stt", None), StoreTracerProvider)
        assert TRACING.tracer is not None
        use(None)
        made = install(Tracing(1.0, otlp_endpoint="http://127.0.0.1:9"), "stt", None)
        assert isinstance(made, TracerProvider)
        made.shutdown()
    finally:
        use(None)


def test_span_ids_are_made_ahead_random_and_never_all_zeros(
        monkeypatch: pytest.MonkeyPatch) -> None:
    store_tracer._SPAN_IDS.clear()
    ids = [new_span_hex() for _ in range(3 * 256 + 1)]
    assert len(set(ids)) == len(ids)
    assert all(len(i) == 16 and not i.strip("0123456789abcdef") for i in ids)
    # One random number makes 256 IDs; the all-zero ones among them are skipped.
    store_tracer._SPAN_IDS.clear()
    monkeypatch.setattr(store_tracer.random, "getrandbits", lambda bits: (1 << 64) | 7)
    assert [new_span_hex(), new_span_hex()] == ["0000000000000007", "0000000000000001"]
    assert store_tracer._SPAN_IDS == []


def test_a_forked_process_makes_span_ids_of_its_own() -> None:
    store_tracer._SPAN_IDS.clear()
    new_span_hex()  # the parent holds 255 IDs made ahead
    pid = os.fork()
    if pid == 0:  # the child: none of them
        os._exit(0 if store_tracer._SPAN_IDS == [] else 1)
    assert os.waitpid(pid, 0)[1] == 0
    assert len(store_tracer._SPAN_IDS) == 255
