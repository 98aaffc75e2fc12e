"""Tracing's settings (given, and from the OTEL_* variables), the SDK's installation in a
process (and the clear error without it), and the exporter that sends finished spans to the
cluster's trace store."""

from __future__ import annotations

import asyncio
import random
import sys

import pytest
from opentelemetry import baggage, context, trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import (
    INVALID_SPAN,
    Link,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
)

import reach
import reach._runtime
from reach._runtime.span_export import SeededIds, StoreExporter, to_record
from reach._runtime.store_tracer import StoreSpan, StoreTracerProvider
from reach._runtime.trace_setup import check_installed, install, setup
from reach._runtime.tracer import (
    TRACING,
    dropped,
    dropped_new,
    keeps,
    start,
    start_send,
    trace_int,
    use,
)
from reach.errors import ConfigError
from reach.spans import SpanKind as RecordKind
from reach.spans import SpanStatus
from reach.testing import FakeCluster, eventually, run
from reach.tracing import Tracing, tracing_from

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


# -- settings ---------------------------------------------------------------------------------


def test_tracing_is_off_unless_asked_or_an_endpoint_is_in_the_environment() -> None:
    assert tracing_from(None, {}) is None
    assert tracing_from(False, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}) is None
    assert tracing_from(True, {}) == Tracing(1.0, None, True, "reach")
    on = tracing_from(None, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/",
                             "OTEL_TRACES_SAMPLER_ARG": "0.25", "OTEL_SERVICE_NAME": "shop"})
    assert on == Tracing(0.25, "http://c:4318/v1/traces", True, "shop")


def test_given_settings_win_over_the_environment_and_sdk_disabled_wins_over_all() -> None:
    env = {"OTEL_TRACES_SAMPLER_ARG": "0.5", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://x/t"}
    assert tracing_from(Tracing(sample_ratio=0.01), env) == Tracing(0.01, "http://x/t", True,
                                                                    "reach")
    assert tracing_from(Tracing(), {**env, "OTEL_SDK_DISABLED": "true"}) is None


def test_a_base_endpoint_gets_the_traces_path_and_a_traces_url_is_kept() -> None:
    assert Tracing(otlp_endpoint="http://c:4318").traces_url == "http://c:4318/v1/traces"
    assert Tracing(otlp_endpoint="http://c:4318/v1/traces").traces_url == \
        "http://c:4318/v1/traces"


@pytest.mark.parametrize("bad", [{"sample_ratio": 1.5}, {"sample_ratio": -0.1},
                                 {"sample_ratio": True}, {"otlp_endpoint": "collector:4318"}])
def test_invalid_settings_are_a_config_error_naming_the_setting(bad: dict[str, object]) -> None:
    with pytest.raises(ConfigError) as caught:
        Tracing(**bad)  # type: ignore[arg-type]
    assert caught.value.details["setting"].startswith("tracing.")


def test_an_invalid_sampler_argument_in_the_environment_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as caught:
        tracing_from(True, {"OTEL_TRACES_SAMPLER_ARG": "often"})
    assert caught.value.details["setting"] == "OTEL_TRACES_SAMPLER_ARG"


def test_the_runtime_config_refuses_a_tracing_setting_of_another_type() -> None:
    with pytest.raises(ConfigError):
        reach.RuntimeConfig(tracing="yes")  # type: ignore[arg-type]
    assert reach.RuntimeConfig(tracing=Tracing(sample_ratio=0.1)).tracing == Tracing(0.1)


# -- installing -------------------------------------------------------------------------------


def test_without_the_sdk_tracing_is_a_clear_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "reach._runtime.span_export", None)
    monkeypatch.delattr(reach._runtime, "span_export", raising=False)
    with pytest.raises(ConfigError) as caught:
        check_installed(Tracing())
    assert "reach[otel]" in caught.value.suggestion


def test_without_the_otlp_exporter_an_endpoint_is_a_clear_config_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http", None)
    check_installed(Tracing())  # no endpoint: no exporter needed
    with pytest.raises(ConfigError) as caught:
        check_installed(Tracing(otlp_endpoint="http://c:4318"))
    assert "reach[otel]" in caught.value.suggestion


def test_a_process_of_a_deployment_that_traces_installs_the_sdk_once() -> None:
    fake = FakeCluster()
    fake.tracing = Tracing(sample_ratio=1.0, store=False)
    try:
        assert setup(fake, "tru-proc")
        tracer = TRACING.tracer
        assert tracer is not None
        assert setup(fake, "tru-other")
        assert TRACING.tracer is tracer
    finally:
        use(None)
    fake.tracing = None
    assert not setup(fake, "tru-proc")


def test_a_span_that_starts_a_trace_takes_reach_s_trace_id() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(id_generator=SeededIds())
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    start(tracer, "a", SpanKind.INTERNAL, context=None, trace_id=TRACE).end()
    start(tracer, "b", SpanKind.INTERNAL, context=None, trace_id="not-w3c").end()
    a, b = exporter.get_finished_spans()
    assert f"{a.get_span_context().trace_id:032x}" == TRACE
    assert f"{b.get_span_context().trace_id:032x}" != TRACE


@pytest.mark.parametrize("ratio", [0.0, 0.01, 0.5, 1.0])
def test_reach_s_decision_on_a_new_trace_is_the_sdk_sampler_s(ratio: float) -> None:
    sampler = TraceIdRatioBased(ratio)
    bound = round(ratio * (1 << 64))
    rng = random.Random(7)
    for _ in range(2000):
        trace_id = rng.getrandbits(128) or 1
        sdk = sampler.should_sample(None, trace_id, "x").decision.is_sampled()
        assert keeps(trace_id, bound) is sdk


def test_a_trace_sampled_out_at_its_root_starts_no_span_and_travels_without_context() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=ParentBased(TraceIdRatioBased(0.0)),
                              id_generator=SeededIds())
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    use(provider, 0.0)
    try:
        assert TRACING.tracer is not None
        env = reach.Envelope.request("tru-a", "tru-b", {"text": "x"}, "tru.ask@1.0",
                                     trace_id=TRACE)
        span, sent = start_send(TRACING.tracer, env)
        span.end()
        # Its receiver decides the same from the trace ID: its handler runs in no span.
        assert dropped(sent)
    finally:
        use(None)
    assert exporter.get_finished_spans() == ()
    assert sent is env  # no copy, no span ID, no flags on the wire


@pytest.mark.parametrize(("trace_id", "at_zero"), [
    (TRACE, True), (TRACE.upper(), False), (TRACE[:31], False), ("0" * 32, False),
    (f"0x{TRACE[2:]}", False), (f"{TRACE[:30]}_1", False), ("any-trace-of-an-old-peer", False),
    (f" {TRACE[1:]}", False), (f"{TRACE[:30]} 1", False), (f"+{TRACE[1:]}", False),
    ("\u0663" * 32, False), (f"{TRACE}00", False), (f"{TRACE[:16]}", False)])
def test_only_a_w3c_trace_id_is_ever_dropped_by_reach_s_sampler(trace_id: str,
                                                                at_zero: bool) -> None:
    env = reach.Envelope.request("tru-a", "tru-b", {"text": "x"}, "tru.ask@1.0",
                                 trace_id=trace_id)
    for ratio, expected in ((0.0, at_zero), (1.0, False)):
        use(TracerProvider(sampler=ParentBased(TraceIdRatioBased(ratio))), ratio)
        try:
            assert dropped(env) is expected
            assert trace_int(trace_id) == (int(trace_id, 16) if at_zero else 0)
        finally:
            use(None)


@pytest.mark.parametrize("store", [False, True], ids=["sdk", "store"])
@pytest.mark.parametrize("ratio", [0.0, 1e-9, 0.01, 0.5, 0.999, 1.0])
def test_reach_s_sampler_drops_what_the_sdk_s_ratio_sampler_does_not_keep(ratio: float,
                                                                          store: bool) -> None:
    sampler = TraceIdRatioBased(ratio)
    rng = random.Random(22)
    ids = [rng.getrandbits(128) or 1 for _ in range(2000)]
    bound = sampler.bound  # the edges: just below, at and above the bound, low and high halves
    ids += [(high << 64) | low for high in (1, 2**64 - 1)
            for low in (0, 1, max(bound - 1, 0), bound, min(bound + 1, 2**64 - 1), 2**64 - 1)]
    # (reach's own tracer is used with no ratio given: its sampler's is its own)
    use(StoreTracerProvider(ratio, None) if store else TracerProvider(
        sampler=ParentBased(sampler), id_generator=SeededIds()), None if store else ratio)
    try:
        for trace_id in ids:
            env = reach.Envelope.request("tru-a", "tru-b", {"text": "x"}, "tru.ask@1.0",
                                         trace_id=f"{trace_id:032x}")
            kept = sampler.should_sample(None, trace_id, "x").decision.is_sampled()
            assert dropped(env) is (not kept), f"{trace_id:032x}"
            assert dropped_new(env) is (not kept), f"{trace_id:032x}"  # (a courier's first ask)
            assert keeps(trace_id, bound) is kept
            assert TRACING.tracer is not None
            # The sender decides the same, reading an ID it made as its text or checking it.
            for made in (False, True):
                span, sent = start_send(TRACING.tracer, env, made=made)
                span.end()
                assert (sent.span_id is not None) is kept, f"{trace_id:032x}"
                assert sent.trace_id == env.trace_id
                if kept and store:  # a span of the envelope's trace, sampled, of a random ID
                    assert type(span) is StoreSpan
                    assert span.trace_hex == env.trace_id
                    assert sent.trace_flags == int(TraceFlags.SAMPLED | TraceFlags.RANDOM_TRACE_ID)
    finally:
        use(None)


def test_a_send_of_an_all_zeros_trace_id_reach_made_starts_a_trace_of_its_own() -> None:
    # new_id() could make it (once in 2**128): W3C allows no such ID, as for any other sender.
    use(StoreTracerProvider(1.0, None), 1.0)
    try:
        assert TRACING.tracer is not None
        env = reach.Envelope.request("tru-a", "tru-b", {"text": "x"}, "tru.ask@1.0",
                                     trace_id="0" * 32)
        for made in (False, True):
            span, sent = start_send(TRACING.tracer, env, made=made)
            span.end()
            assert sent.span_id is not None
            assert sent.trace_id != "0" * 32
            assert trace_int(sent.trace_id) != 0
    finally:
        use(None)
    use(StoreTracerProvider(0.0, None), 0.0)  # every trace dropped, but no such ID's to drop
    try:
        assert not dropped(env)
        assert not dropped_new(env)
    finally:
        use(None)


def test_a_send_under_a_current_span_is_of_its_trace_whatever_its_own_id() -> None:
    # A driver's send starts a new trace where no span is current, and goes as it is when the
    # sampler drops that; under a span current where it sends (the application's, sampled out
    # here), it is of that span's trace and carries its context on.
    use(StoreTracerProvider(0.0, None), 0.0)
    try:
        tracer = TRACING.tracer
        assert tracer is not None
        env = reach.Envelope.request("tru-a", "tru-b", {"text": "x"}, "tru.ask@1.0")
        assert dropped_new(env)
        token = context.attach(baggage.set_baggage("tenant", "t-1"))  # a context, no span in it
        try:
            assert dropped_new(env)
            with trace.use_span(INVALID_SPAN):  # the invalid span, current
                assert dropped_new(env)
        finally:
            context.detach(token)
        outer = NonRecordingSpan(SpanContext(int(TRACE, 16), 0x00F067AA0BA902B7, False))
        with trace.use_span(outer):
            assert not dropped_new(env)
            span, sent = start_send(tracer, env, made=True)
        assert span is outer
        assert (sent.trace_id, sent.span_id, sent.trace_flags) == (TRACE, "00f067aa0ba902b7", 0)
    finally:
        use(None)


def test_a_trace_a_caller_sampled_out_carries_its_decision_where_the_ratio_would_keep_it(
) -> None:
    provider = TracerProvider(sampler=ParentBased(TraceIdRatioBased(1.0)),
                              id_generator=SeededIds())
    use(provider, 1.0)
    try:
        assert TRACING.tracer is not None
        caller = reach.Envelope.request("tru-a", "tru-b", {"text": "x"}, "tru.ask@1.0",
                                        trace_id=TRACE).with_trace_context(
                                            TRACE, "00f067aa0ba902b7", 0)
        assert not dropped(caller)
        env = reach.Envelope.request("tru-b", "tru-c", {"text": "x"}, "tru.ask@1.0",
                                     trace_id=TRACE)
        _, sent = start_send(TRACING.tracer, env, parent=caller)
    finally:
        use(None)
    assert (sent.trace_id, sent.span_id, sent.trace_flags) == (TRACE, "00f067aa0ba902b7", 0)


# -- the trace store's exporter ---------------------------------------------------------------


def finished_spans() -> tuple[object, ...]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(id_generator=SeededIds())
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    root = start(tracer, "send tru-x", SpanKind.CLIENT, context=None, trace_id=TRACE)
    root.set_attributes({"reach.agent_id": "tru-x", "reach.attempt": 2})
    root.add_event("resend", {"reach.attempt": 1})
    root.set_status(Status(StatusCode.ERROR, "it broke"))
    root.end()
    linked = tracer.start_span("attempt tru.ask@1.0", links=[Link(root.get_span_context())])
    linked.end()
    return exporter.get_finished_spans()


def test_a_finished_span_becomes_the_store_s_record() -> None:
    root, linked = finished_spans()
    record = to_record(root, "tru-host")  # type: ignore[arg-type]
    assert (record.trace_id, record.parent_span_id, record.kind) == (TRACE, None,
                                                                     RecordKind.CLIENT)
    assert (record.status, record.status_message) == (SpanStatus.ERROR, "it broke")
    assert record.attributes == {"reach.agent_id": "tru-x", "reach.attempt": 2}
    assert [(e.name, e.attributes) for e in record.events] == [("resend", {"reach.attempt": 1})]
    assert record.process == "tru-host"
    assert record.end_ns >= record.start_ns > 0
    other = to_record(linked, "tru-host")  # type: ignore[arg-type]
    assert [(link.trace_id, link.span_id) for link in other.links] == [
        (record.trace_id, record.span_id)]


def test_the_exporter_sends_batches_to_the_cluster_s_trace_store_without_waiting() -> None:
    async def scenario(fake: FakeCluster) -> list[reach.SpanRecord] | None:
        store = fake.trace_store()
        exporter = StoreExporter(store.add_spans, "tru-host")
        exporter.loop = asyncio.get_running_loop()
        spans = finished_spans()
        exporter.export(spans)  # type: ignore[arg-type]

        async def kept() -> list[reach.SpanRecord]:
            return await store.trace(TRACE)
        return await eventually(kept)

    held = run(scenario)
    assert held is not None
    assert [s.name for s in held] == ["send tru-x"]
    assert held[0].process == "tru-host"


def test_the_exporter_drops_a_batch_it_cannot_send_and_never_fails() -> None:
    async def failing(_records: object) -> None:
        raise ConnectionError("no store")

    exporter = StoreExporter(failing, "tru-host")  # type: ignore[arg-type]
    spans = finished_spans()
    assert exporter.export(spans).name == "SUCCESS"  # type: ignore[arg-type]
    assert exporter.dropped == len(spans)  # no loop yet: dropped at once


def test_install_sends_a_process_s_spans_to_the_store_through_its_batches() -> None:
    async def scenario(fake: FakeCluster) -> list[reach.SpanRecord]:
        provider = install(Tracing(sample_ratio=1.0), "tru-batcher", fake)
        try:
            tracer = TRACING.tracer
            assert tracer is not None
            start(tracer, "restart tru-y", SpanKind.INTERNAL, context=None,
                  trace_id=TRACE).end()
            # the batch leaves from the processor's thread, and is sent from the loop
            assert await asyncio.to_thread(provider.force_flush)

            async def kept() -> list[reach.SpanRecord]:
                return await fake.trace_store().trace(TRACE)
            return await eventually(kept)
        finally:
            use(None)
            provider.shutdown()

    held = run(scenario)
    assert [(s.name, s.process) for s in held] == [("restart tru-y", "tru-batcher")]
