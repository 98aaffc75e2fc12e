"""The trace store's index: what it holds within its bound, what it drops first, and its queries."""

from __future__ import annotations

import random

import pytest

from actors.trace_index import (
    PACKED_EXPANSION,
    TRACE_OVERHEAD,
    TraceIndex,
    span_bytes,
)
from reach.errors import ConfigError
from reach.spans import (
    Attr,
    AttrValue,
    SpanBatch,
    SpanEvent,
    SpanKind,
    SpanLink,
    SpanRecord,
    SpanStatus,
    TraceEdge,
)

S = 1_000_000_000  # a second, in nanoseconds


def span(trace: str, sid: str, *, parent: str | None = None, name: str = "handle ts.ask@1.0",
         kind: SpanKind = SpanKind.SERVER, start: int = 0, end: int | None = None,
         status: SpanStatus = SpanStatus.UNSET, process: str = "",
         **attrs: AttrValue) -> SpanRecord:
    """A span; ``attrs`` by the short names of :class:`Attr` (``agent_id="a"``)."""
    return SpanRecord(trace, sid, parent, name, kind, start, start + 1000 if end is None else end,
                      status=status, process=process,
                      attributes={str(Attr[k.upper()]): v for k, v in attrs.items()})


def rebuilt(index: TraceIndex) -> TraceIndex:
    """An index given only what ``index`` holds, in the same order, with no bound to keep."""
    fresh = TraceIndex(max_bytes=1 << 60)
    fresh.add(index.held(), 0)
    return fresh


def assert_consistent(index: TraceIndex) -> None:
    """Its postings and summaries are those of an index made from its held spans alone."""
    fresh = rebuilt(index)
    for name in ("agents", "capabilities", "tasks"):
        assert getattr(index, name).by_key == getattr(fresh, name).by_key, name
    everything = fresh.find_traces(slowest=True, limit=10**9)
    by_start = sorted(everything, key=lambda t: (t.start_ns, t.trace_id), reverse=True)
    for limit in (1, 3, 10, 10**9):  # read back from the last to arrive, but all the same
        assert index.find_traces(limit=limit) == by_start[:limit]
        assert index.find_traces(slowest=True, limit=limit) == everything[:limit]
    assert index.stats().traces == fresh.stats().traces
    assert len(index.graph) == len(fresh.graph)
    assert index.edges(0, S) == fresh.edges(0, S)
    assert index.bytes == fresh.bytes
    assert index.bytes <= index.max_bytes


# -- a trace ---------------------------------------------------------------------------------


def test_a_trace_is_its_spans_by_start_time_whatever_order_they_arrived_in() -> None:
    index = TraceIndex()
    index.add([span("t1", "c", parent="b", start=30), span("t1", "a", start=10)], 0)
    index.add([span("t1", "b", parent="a", start=20), span("t2", "x", start=5)], 0)
    assert [s.span_id for s in index.trace("t1")] == ["a", "b", "c"]
    assert index.trace("unknown") == []


def test_a_summary_names_its_root_its_length_errors_and_agents() -> None:
    index = TraceIndex()
    index.add([
        span("t1", "b", parent="a", start=2 * S, end=3 * S, status=SpanStatus.ERROR,
             agent_id="logistics", name="handle ts.ship@1.0"),
        span("t1", "a", start=1 * S, end=4 * S, agent_id="router", name="send ts.ask"),
        span("t1", "c", parent="a", start=2 * S, end=2 * S + 10, agent_id="router"),
    ], 0)
    [summary] = index.find_traces()
    assert summary.trace_id == "t1"
    assert summary.root == "send ts.ask"
    assert summary.start_ns == 1 * S
    assert summary.duration_ms == 3000.0
    assert (summary.spans, summary.errors) == (3, 1)
    assert summary.agents == ("logistics", "router")


def test_the_most_recent_are_found_with_a_clock_ahead_of_the_stores() -> None:
    index = TraceIndex()
    index.add([span("t1", "a", start=14 * S)], 10 * S)  # its process's clock 4 s ahead
    index.add([span(f"t{i}", "a", start=11 * S) for i in range(2, 12)], 12 * S)
    assert ids(index, limit=1) == ["t1"]
    index.add([span("t1", "r", start=1 * S, end=20 * S)], 20 * S)  # its root, late and early
    assert ids(index, limit=1) == ["t9"]
    assert ids(index, limit=12)[-1] == "t1"


def test_a_trace_whose_root_is_not_held_is_named_by_its_earliest_span() -> None:
    index = TraceIndex()
    index.add([span("t1", "c", parent="a", start=20, name="handle late"),
               span("t1", "b", parent="a", start=10, name="handle early")], 0)
    assert index.find_traces()[0].root == "handle early"


# -- filters ---------------------------------------------------------------------------------


@pytest.fixture
def traces() -> TraceIndex:
    """Four traces: t1 router -> logistics (an error), t2 a driver -> billing on a task, t3
    router alone, later, t4 slow and earliest."""
    index = TraceIndex()
    index.add([
        span("t1", "a", start=10 * S, end=11 * S, agent_id="router", capability="ts.ask",
             sender="driver:d1"),
        span("t1", "b", parent="a", start=10 * S, end=10 * S + 5, agent_id="logistics",
             capability="ts.ship", sender="router", status=SpanStatus.ERROR),
        span("t2", "a", start=20 * S, end=20 * S + 100, agent_id="billing",
             capability="ts.bill", sender="driver:d1", task_id="task-7"),
        span("t3", "a", start=30 * S, end=30 * S + 100, agent_id="router",
             capability="ts.ask", status=SpanStatus.OK),
        span("t4", "a", start=5 * S, end=25 * S, agent_id="billing", capability="ts.bill"),
    ], 31 * S)
    return index


def ids(index: TraceIndex, **filters: object) -> list[str]:
    return [t.trace_id for t in index.find_traces(**filters)]  # type: ignore[arg-type]


def test_traces_are_found_most_recent_first_or_slowest_first(traces: TraceIndex) -> None:
    assert ids(traces) == ["t3", "t2", "t1", "t4"]
    assert ids(traces, slowest=True) == ["t4", "t1", "t3", "t2"]  # t3, t2 tie: later first


def test_a_limit_keeps_the_first_of_the_order(traces: TraceIndex) -> None:
    assert ids(traces, limit=2) == ["t3", "t2"]
    assert ids(traces, slowest=True, limit=1) == ["t4"]
    assert ids(traces, limit=0) == []


def test_traces_are_found_by_the_agent_that_handled_or_sent(traces: TraceIndex) -> None:
    assert ids(traces, agent="router") == ["t3", "t1"]  # handled in t1 and t3, sent in t1
    assert ids(traces, agent="logistics") == ["t1"]
    assert ids(traces, agent="driver:d1") == ["t2", "t1"]
    assert ids(traces, agent="nobody") == []


def test_traces_are_found_by_capability_and_by_task(traces: TraceIndex) -> None:
    assert ids(traces, capability="ts.bill") == ["t2", "t4"]
    assert ids(traces, capability="ts.ship") == ["t1"]
    assert ids(traces, task_id="task-7") == ["t2"]
    assert ids(traces, task_id="task-8") == []


def test_traces_are_found_by_status(traces: TraceIndex) -> None:
    assert ids(traces, status=SpanStatus.ERROR) == ["t1"]
    assert ids(traces, status=SpanStatus.OK) == ["t3", "t2", "t4"]
    assert ids(traces, status=SpanStatus.UNSET) == ["t3", "t2", "t4"]


def test_traces_are_found_by_when_they_started_bounds_included(traces: TraceIndex) -> None:
    assert ids(traces, since_ns=10 * S) == ["t3", "t2", "t1"]
    assert ids(traces, until_ns=20 * S) == ["t2", "t1", "t4"]
    assert ids(traces, since_ns=10 * S + 1, until_ns=29 * S) == ["t2"]


def test_filters_combine(traces: TraceIndex) -> None:
    assert ids(traces, agent="router", capability="ts.ship") == ["t1"]
    assert ids(traces, agent="router", status=SpanStatus.ERROR) == ["t1"]
    assert ids(traces, agent="billing", capability="ts.bill", task_id="task-7") == ["t2"]
    assert ids(traces, agent="billing", since_ns=21 * S) == []
    assert ids(traces, agent="router", capability="ts.bill") == []


# -- the bound -------------------------------------------------------------------------------


def test_a_span_costs_more_the_more_it_carries() -> None:
    bare = span("t1", "a")
    rich = SpanRecord("t1", "a", "p", "handle ts.ask@1.0", SpanKind.SERVER, 0, 1,
                      status=SpanStatus.ERROR, status_message="it broke", process="reach.host.x",
                      attributes={str(Attr.AGENT_ID): "router", str(Attr.EPOCH): 3},
                      events=(SpanEvent("retry", 0, {str(Attr.REASON): "timeout"}),),
                      links=(SpanLink("t0", "b"),))
    assert 0 < span_bytes(bare) < span_bytes(rich)


def test_the_bound_must_be_positive() -> None:
    with pytest.raises(ConfigError) as caught:
        TraceIndex(max_bytes=0)
    assert caught.value.details["setting"] == "trace_store_bytes"


def test_past_its_bound_the_oldest_spans_to_arrive_are_dropped_first() -> None:
    one = span_bytes(span("t00", "s00"))
    index = TraceIndex(max_bytes=5 * (one + TRACE_OVERHEAD))
    for i in range(12):  # each its own trace; started in the reverse order of their arrival
        dropped = index.add([span(f"t{i:02d}", f"s{i:02d}", start=(100 - i) * S)], 0)
        assert index.bytes <= index.max_bytes
        assert dropped == (1 if i >= 5 else 0)
    assert [s.span_id for s in index.held()] == ["s07", "s08", "s09", "s10", "s11"]
    assert index.trace("t06") == []
    stats = index.stats()
    assert (stats.spans, stats.traces, stats.received, stats.dropped) == (5, 5, 12, 7)
    assert (stats.bytes, stats.max_bytes) == (index.bytes, index.max_bytes)


def test_a_trace_held_in_part_is_summarised_from_what_is_left() -> None:
    index = TraceIndex()
    index.add([span("t1", "b", parent="a", start=1 * S, end=2 * S, status=SpanStatus.ERROR,
                    agent_id="logistics", task_id="task-1"),
               span("t1", "a", start=3 * S, end=9 * S, agent_id="router")], 0)
    index.max_bytes = index.bytes - 1  # room for all but the oldest span
    index.add([], 0)
    [summary] = index.find_traces()
    assert (summary.start_ns, summary.duration_ms) == (3 * S, 6000.0)
    assert (summary.spans, summary.errors, summary.agents) == (1, 0, ("router",))
    assert index.find_traces(agent="logistics") == []
    assert index.find_traces(task_id="task-1") == []
    assert index.find_traces(agent="router")[0].trace_id == "t1"
    assert_consistent(index)


def test_a_span_larger_than_the_bound_is_not_kept() -> None:
    index = TraceIndex(max_bytes=100)
    assert index.add([span("t1", "a")], 0) == 1
    assert (len(index), index.bytes, index.find_traces()) == (0, 0, [])


def test_dropping_keeps_every_index_right() -> None:
    rng = random.Random(7)
    agents = [f"agent-{i}" for i in range(6)]
    one = span_bytes(span("t000", "s00000", agent_id="agent-0", sender="agent-1",
                          capability="ts.c0", task_id="task-0"))
    index = TraceIndex(max_bytes=40 * one)
    for batch in range(60):
        now = (100 + batch) * S
        spans = []
        for j in range(rng.randrange(1, 8)):
            attrs: dict[str, AttrValue] = {"agent_id": rng.choice(agents)}
            if rng.random() < 0.7:
                attrs["sender"] = rng.choice(agents)
            if rng.random() < 0.5:
                attrs["capability"] = f"ts.c{rng.randrange(4)}"
            if rng.random() < 0.3:
                attrs["task_id"] = f"task-{rng.randrange(5)}"
            status = SpanStatus.ERROR if rng.random() < 0.2 else SpanStatus.OK
            spans.append(span(f"t{rng.randrange(30):03d}", f"s{batch:03d}{j:02d}",
                              start=now - rng.randrange(-4, 100) * S, status=status, **attrs))
        index.add(spans, now)
        assert_consistent(index)
    assert index.stats().dropped > 100


# -- the message graph -----------------------------------------------------------------------


def test_edges_count_handler_runs_by_sender_and_agent_heaviest_first() -> None:
    index = TraceIndex()
    index.add([
        span("t1", "a", start=10 * S, sender="router", agent_id="logistics"),
        span("t2", "a", start=11 * S, sender="router", agent_id="logistics",
             status=SpanStatus.ERROR),
        span("t3", "a", start=12 * S, sender="driver:d1", agent_id="router"),
        span("t4", "a", start=12 * S, sender="a2a:web", agent_id="router"),
        # not handler runs: a client span, an attempt, and a run that names no sender
        span("t5", "a", start=12 * S, sender="router", agent_id="logistics",
             kind=SpanKind.CLIENT, name="send logistics"),
        span("t6", "a", start=12 * S, sender="router", agent_id="logistics",
             kind=SpanKind.SERVER, name="attempt ts.ask@1.0"),
        span("t7", "a", start=12 * S, agent_id="logistics"),
    ], received_ns=13 * S)
    assert index.edges(since_ns=10 * S, now_ns=20 * S) == [
        TraceEdge("router", "logistics", 2, 1, 0.2),
        TraceEdge("a2a:web", "router", 1, 0, 0.1),
        TraceEdge("driver:d1", "router", 1, 0, 0.1),
    ]


def test_edges_count_only_the_runs_started_in_their_period() -> None:
    index = TraceIndex()
    index.add([span("t1", "a", start=5 * S, sender="router", agent_id="logistics")], 6 * S)
    index.add([span("t2", "a", start=9 * S, sender="router", agent_id="logistics"),
               span("t3", "a", start=11 * S, sender="router", agent_id="logistics")], 12 * S)
    assert index.edges(since_ns=10 * S, now_ns=12 * S) == [
        TraceEdge("router", "logistics", 1, 0, 0.5)]
    assert index.edges(since_ns=13 * S, now_ns=14 * S) == []


def test_edges_count_the_first_second_of_their_period_run_by_run() -> None:
    index = TraceIndex()
    index.add([span(f"t{i}", "a", start=10 * S + i * S // 10, sender="router",
                    agent_id="logistics") for i in range(20)], 13 * S)
    assert index.edges(since_ns=10 * S + S // 2, now_ns=13 * S)[0].count == 15
    assert index.edges(since_ns=11 * S + 1, now_ns=13 * S)[0].count == 9


def test_the_handler_runs_dropped_for_the_bound_leave_the_graph() -> None:
    one = span_bytes(span("t0", "a", sender="caller-0", agent_id="logistics"))
    index = TraceIndex(max_bytes=2 * (one + TRACE_OVERHEAD))
    for i in range(4):
        index.add([span(f"t{i}", "a", start=i * S, sender=f"caller-{i}", agent_id="logistics")],
                  i * S)
    assert [e.source for e in index.edges(since_ns=0, now_ns=4 * S)] == ["caller-2", "caller-3"]
    assert_consistent(index)


# -- batches held unread ---------------------------------------------------------------------


def packed(spans: list[SpanRecord]) -> SpanBatch:
    """``spans`` as a process sends them: one packed batch (recorded by process ``p``)."""
    return SpanBatch.pack("p", [[s.trace_id, s.span_id, s.parent_span_id, s.name, s.kind.value,
                                 s.start_ns, s.end_ns, s.status.value, s.status_message,
                                 dict(s.attributes), [], []] for s in spans])


def random_batches(seed: int, count: int) -> list[list[SpanRecord]]:
    """``count`` batches of 1-7 spans of 30 traces, agents, capabilities and tasks at random."""
    rng = random.Random(seed)
    batches = []
    for b in range(count):
        spans = []
        for j in range(rng.randrange(1, 8)):
            attrs: dict[str, AttrValue] = {"agent_id": f"agent-{rng.randrange(6)}",
                                           "sender": f"agent-{rng.randrange(6)}"}
            if rng.random() < 0.5:
                attrs["capability"] = f"ts.c{rng.randrange(4)}"
            if rng.random() < 0.3:
                attrs["task_id"] = f"task-{rng.randrange(5)}"
            spans.append(span(f"t{rng.randrange(30):03d}", f"s{b:03d}{j:02d}",
                              start=(100 + b - rng.randrange(100)) * S, process="p",
                              status=SpanStatus.ERROR if rng.random() < 0.2 else SpanStatus.OK,
                              **attrs))
        batches.append(spans)
    return batches


def test_a_batch_held_unread_is_read_by_the_first_query_that_needs_it() -> None:
    index = TraceIndex()
    index.hold(packed([span("t1", "b", parent="a", start=2 * S, process="p"),
                       span("t1", "a", start=1 * S, process="p", agent_id="router")]), 5 * S)
    assert (index._waiting[0][2], index.received) == (index.bytes, 2)  # counted, not read
    assert [s.span_id for s in index.trace("t1")] == ["a", "b"]
    assert not index._waiting
    assert index.find_traces(agent="router")[0].trace_id == "t1"
    assert (index.stats().spans, index.stats().received) == (2, 2)
    assert_consistent(index)


def test_batches_held_unread_end_as_the_same_index_as_batches_added() -> None:
    added, held = TraceIndex(), TraceIndex()
    for b, spans in enumerate(random_batches(3, 40)):
        added.add(spans, (100 + b) * S)
        held.hold(packed(spans), (100 + b) * S)
        if b % 7 == 0:  # a query now and then reads what waits
            assert held.find_traces(limit=5) == added.find_traces(limit=5)
    assert held.held() == added.held()
    assert held.stats() == added.stats()
    for name in ("agents", "capabilities", "tasks"):
        assert getattr(held, name).by_key == getattr(added, name).by_key
    assert held.edges(0, 200 * S) == added.edges(0, 200 * S)


def test_past_its_bound_held_spans_go_first_then_the_oldest_batches_waiting() -> None:
    batches = random_batches(5, 12)
    first = packed(batches[0])
    waiting = len(first.data) * PACKED_EXPANSION
    index = TraceIndex(max_bytes=3 * waiting)
    index.add(batches[0], 100 * S)  # indexed: older than anything held unread
    for b in range(1, 12):
        dropped = index.hold(packed(batches[b]), (100 + b) * S)
        assert index.bytes <= index.max_bytes or len(index._waiting) == 1
        assert dropped == 0 or b > 1
    assert not index._arrived  # the indexed spans went before any batch waiting
    assert 0 < len(index._waiting) < 11
    waited = [s for spans in batches[-len(index._waiting):] for s in spans]
    held = index.held()  # read now, within the bound by their own sizes: the newest of them
    assert held
    assert held == waited[len(waited) - len(held):]
    assert index.stats().received == sum(map(len, batches))
    assert index.stats().dropped == sum(map(len, batches)) - len(held)
    assert_consistent(index)


def test_a_batch_larger_than_the_bound_waits_alone_and_is_bounded_when_read() -> None:
    spans = [span(f"t{i}", f"s{i}", process="p") for i in range(20)]
    index = TraceIndex(max_bytes=span_bytes(spans[0]) * 5)
    index.hold(packed(spans[:2]), 0)
    assert index.hold(packed(spans), S) == 2  # the older batch makes room; this one waits
    assert len(index) <= 5
    assert index.bytes <= index.max_bytes
    assert index.stats().dropped == 2 + 20 - len(index)
