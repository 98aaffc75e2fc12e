"""The observer's views as pure functions: the cluster at a glance, agents paged, searched and
aggregated, supervision trees joined with the registry, new restarts, waterfalls, the message
graph, and what a watching page is sent."""

from __future__ import annotations

import dataclasses
import json

from reach.observe.sampler import RateMeter
from reach.observe.snapshot import Inputs, build, delta, sse
from reach.observe.traces_view import MAX_EDGES, graph, waterfall
from reach.observe.trees import CHILDREN_SHOWN, ChildView, TreeView, forest, new_restarts
from reach.observe.views import (
    GroupBy,
    HostKind,
    agent_groups,
    agents_page,
    cluster_view,
    host_kind,
    rates_of,
)
from reach.ports.cluster import NodeInfo
from reach.records import (
    A2ATaskSummary,
    AgentRecord,
    AgentStatus,
    ChildKind,
    ChildStatus,
    RestartPlacement,
    RestartRecord,
    SupervisorState,
    SupervisorStatus,
)
from reach.spans import Attr, SpanEvent, SpanKind, SpanRecord, SpanStatus, TraceEdge

POOL = "reach.pool.cs.0"
OWN = "reach.host.a1b2c3"


def record(agent_id: str, *caps: str, host: str = POOL, status: AgentStatus = AgentStatus.ONLINE,
           description: str = "", load: int = 0, priorities: tuple[int, ...] = ()) -> AgentRecord:
    return AgentRecord(agent_id, caps, description, host, "node-a", status, load, 1, priorities)


def test_hosts_are_told_apart_by_name_and_a_spare_by_the_registry() -> None:
    assert host_kind(OWN) is HostKind.DEDICATED
    assert host_kind(POOL) is HostKind.POOL
    assert host_kind("reach.remote.r1") is HostKind.REMOTE
    assert host_kind(OWN, {OWN}) is HostKind.SPARE
    assert host_kind("elsewhere") is HostKind.OTHER


def test_the_cluster_view_counts_nodes_hosts_pools_and_agents_by_status() -> None:
    records = [record("a", "x"), record("b", "x", status=AgentStatus.RESTARTING),
               record("c", "y", host=OWN)]
    view = cluster_view([NodeInfo("n1", True, {}), NodeInfo("n2", False, {})], records,
                        [POOL, OWN], {"n1 cpu1": ["reach.host.spare"]}, messages_per_s=2.5,
                        dead_letters=3)
    assert (view.nodes, view.nodes_dead) == (1, 1)
    assert view.hosts == {"dedicated": 1, "pool": 1, "spare": 1, "remote": 0, "other": 0}
    assert view.pools == {"cs": 2}
    assert view.agents == {"online": 2, "restarting": 1, "recovering": 0, "offline": 0}
    assert (view.messages_per_s, view.dead_letters) == (2.5, 3)


def test_agents_are_found_by_capability_as_discovery_matches_and_by_description_words() -> None:
    records = [record("order-1", "order.query", description="Knows every order's status"),
               record("logistics-1", "logistics.track", description="Tracks parcels"),
               record("refund-1", "refund.request", description="Opens refunds")]
    assert [r.agent_id for r in agents_page(records, capability="order").rows] == ["order-1"]
    assert [r.agent_id for r in agents_page(records, capability="Order_Query").rows] == [
        "order-1"]
    assert [r.agent_id for r in agents_page(records, text="TRACKS parcels").rows] == [
        "logistics-1"]
    assert agents_page(records, text="parcels refunds").total == 0
    assert [r.agent_id for r in agents_page(records, text="refund").rows] == ["refund-1"]


def test_ten_thousand_agents_come_a_page_at_a_time_with_their_total() -> None:
    records = [record(f"agent-{i:05d}", "bulk.work") for i in range(10_000)]
    page = agents_page(reversed(records), page=3, size=100)
    assert page.total == 10_000
    assert [r.agent_id for r in page.rows][:2] == ["agent-00300", "agent-00301"]
    assert len(page.rows) == 100
    assert agents_page(records, page=100, size=100).rows == ()
    assert agents_page(records, size=100_000).size == 500


def test_a_row_shows_each_capability_with_its_priority_and_the_agents_traffic() -> None:
    records = [record("o-2", "order.query", "order.audit", priorities=(1, 0))]
    rates = rates_of([TraceEdge("router", "o-2", 30, 2, 0.5), TraceEdge("o-2", "db", 6, 0, 0.1)])
    row = agents_page(records, rates=rates).rows[0]
    assert row.capabilities == {"order.query": 1, "order.audit": 0}
    assert (row.in_per_s, row.out_per_s, row.errors) == (0.5, 0.1, 2)


def test_agents_are_aggregated_per_host_and_per_capability_largest_first() -> None:
    records = [record("a", "x", "y"), record("b", "x", load=2),
               record("c", "x", host=OWN, status=AgentStatus.OFFLINE)]
    by_host = agent_groups(records, GroupBy.HOST)
    assert [(g.key, g.agents, g.load) for g in by_host] == [(POOL, 2, 2), (OWN, 1, 0)]
    by_cap = agent_groups(records, GroupBy.CAPABILITY)
    assert [(g.key, g.agents) for g in by_cap] == [("x", 3), ("y", 1)]
    assert by_cap[0].statuses == {"offline": 1, "online": 2}


def supervisor(name: str, *children: str, restarts: tuple[RestartRecord, ...] = (),
               subtree: dict[str, SupervisorStatus] | None = None) -> SupervisorStatus:
    kids = tuple(ChildStatus(c, ChildKind.SUPERVISOR if subtree and c in subtree
                             else ChildKind.AGENT, POOL, "permanent") for c in children)
    return SupervisorStatus(name, SupervisorState.RUNNING, "node-a", "one_for_one", kids,
                            restarts, {}, subtree or {})


def restart(child: str, at: float, reason: str = "host died") -> RestartRecord:
    return RestartRecord(child, at, RestartPlacement.PACKED, 0.012, reason)


def test_a_tree_shows_each_child_with_its_status_restarts_and_last_exit_reason() -> None:
    inner = supervisor("inner", "c")
    root = supervisor("root", "a", "inner",
                      restarts=(restart("a", 1.0, "first"), restart("a", 2.0, "second")),
                      subtree={"inner": inner})
    records = [record("a", "x", status=AgentStatus.RESTARTING), record("c", "y")]
    trees = forest({"root": root, "inner": inner}, records)
    assert [t.name for t in trees] == ["root"]  # the nested one is not a root
    a, sub = trees[0].children
    assert isinstance(a, ChildView)
    assert (a.status, a.restarts, a.last_reason, a.last_restart_at) == (
        "restarting", 2, "second", 2.0)
    assert isinstance(sub, TreeView)
    assert sub.kind is ChildKind.SUPERVISOR
    assert [c.child_id for c in sub.children if isinstance(c, ChildView)] == ["c"]


def test_a_supervisor_of_many_children_draws_some_and_counts_the_rest_by_status() -> None:
    ids = [f"w-{i}" for i in range(CHILDREN_SHOWN + 5)]
    trees = forest({"big": supervisor("big", *ids)}, [record(i, "w") for i in ids])
    assert len(trees[0].children) == CHILDREN_SHOWN
    assert trees[0].hidden == {"online": 5}


def test_only_restarts_new_since_the_last_look_are_news() -> None:
    before = {"root": supervisor("root", "a", "b", restarts=(restart("a", 1.0),))}
    after = {"root": supervisor("root", "a", "b",
                                restarts=(restart("a", 1.0), restart("b", 3.0, "killed"))),
             "new": supervisor("new", "z", restarts=(restart("z", 2.0),))}
    events = new_restarts(before, after)
    assert [(e.supervisor, e.child, e.reason, e.latency_ms) for e in events] == [
        ("root", "b", "killed", 12.0)]
    assert new_restarts(after, after) == []


def span(span_id: str, parent: str | None, start_ms: float, end_ms: float, name: str, *,
         kind: SpanKind = SpanKind.SERVER, **attrs: str | float) -> SpanRecord:
    keys = {"agent": Attr.AGENT_ID, "host": Attr.HOST, "queued": Attr.QUEUED_MS}
    base = 1_700_000_000_000_000_000
    return SpanRecord("ab" * 16, span_id, parent, name, kind, base + int(start_ms * 1e6),
                      base + int(end_ms * 1e6),
                      attributes={keys[k]: v for k, v in attrs.items()})


def test_a_waterfall_nests_spans_under_their_parents_with_queueing_and_handler_time() -> None:
    spans = [
        span("s1", None, 0.0, 10.0, "send cs.route", kind=SpanKind.CLIENT, agent="router-1"),
        span("s2", "s1", 1.0, 9.0, "handle cs.question@1.0", agent="router-1",
             host=OWN, queued=1.0),
        span("s3", "s2", 2.0, 8.0, "send logistics.track", kind=SpanKind.CLIENT),
        span("s4", "s3", 3.5, 7.5, "handle cs.question@1.0", agent="logistics-1", host=POOL,
             queued=0.5),
        span("orphan", "gone", 4.0, 5.0, "handle x@1.0"),
    ]
    retried = SpanRecord(**{**{f: getattr(spans[3], f) for f in SpanRecord.__slots__},
                            "events": (SpanEvent("retry", spans[3].start_ns + 1_000_000,
                                                 {Attr.ATTEMPT: 2}),),
                            "status": SpanStatus.ERROR})
    spans[3] = retried
    fall = waterfall("ab" * 16, list(reversed(spans)))
    assert [(r.span_id, r.depth) for r in fall.rows] == [
        ("s1", 0), ("s2", 1), ("s3", 2), ("s4", 3), ("orphan", 0)]
    s4 = fall.rows[3]
    assert (s4.agent, s4.host, s4.queued_ms, s4.duration_ms) == ("logistics-1", POOL, 0.5, 4.0)
    assert s4.offset_ms == 3.5
    assert [(e.name, e.offset_ms) for e in s4.events] == [("retry", 4.5)]
    assert (fall.duration_ms, fall.errors) == (10.0, 1)
    assert waterfall("cd" * 16, []).rows == ()


def test_the_graph_keeps_the_heaviest_edges_and_sums_each_nodes_traffic() -> None:
    edges = [TraceEdge(f"s{i}", "hub", i + 1, 0, (i + 1) / 60) for i in range(MAX_EDGES + 3)]
    drawn = graph(edges, 60.0)
    assert len(drawn.edges) == MAX_EDGES
    assert drawn.dropped == 3
    assert drawn.edges[0].source == f"s{MAX_EDGES + 2}"
    hub = next(n for n in drawn.nodes if n.name == "hub")
    assert hub.in_per_s == round(sum(e.per_s for e in drawn.edges), 3)


def inputs(at: float, records: list[AgentRecord]) -> Inputs:
    return Inputs(at=at, nodes=[NodeInfo("n1", True, {})], records=records, hosts=[POOL],
                  spares={}, statuses={"root": supervisor("root", "a")}, letters=[],
                  dead_letters=0)


def test_a_page_is_sent_every_part_first_then_only_the_parts_that_changed() -> None:
    first = build(1, inputs(1.0, [record("a", "x")]))
    message, held = delta(first, {})
    assert {"cluster", "trees", "groups", "graph", "letters", "traces", "tasks"} <= set(message)
    assert message["tasks"] == {"available": False}  # a gateway that gave no task source
    same = build(2, inputs(2.0, [record("a", "x")]))
    quiet, held = delta(same, held)
    assert set(quiet) == {"seq", "at", "restarts"}
    moved = build(3, inputs(3.0, [record("a", "x", status=AgentStatus.RESTARTING)]))
    news, _ = delta(moved, held)
    assert {"cluster", "trees", "groups"} <= set(news)
    assert "letters" not in news
    frame = sse(news, event_id=3).decode()
    assert frame.startswith("id: 3\nevent: snapshot\ndata: ")
    assert frame.endswith("\n\n")
    assert json.loads(frame.split("data: ", 1)[1])["seq"] == 3


def test_a2a_tasks_are_shown_newest_first_with_a_count_per_state() -> None:
    tasks = [A2ATaskSummary(f"t{n}", "gateway:partner", "c1", state, 10.0 - n, "orders-1")
             for n, state in enumerate(("working", "completed", "completed", "failed"))]
    part = build(1, dataclasses.replace(inputs(1.0, []), tasks=tasks)).parts["tasks"]
    assert part["available"] is True
    assert part["states"] == {"completed": 2, "failed": 1, "working": 1}
    assert [t["task_id"] for t in part["recent"]] == ["t0", "t1", "t2", "t3"]
    assert part["recent"][0]["owner"] == "gateway:partner"


def test_the_message_rate_is_the_hosts_counters_over_time_and_a_restarted_host_starts_anew(
) -> None:
    meter = RateMeter()
    meter.update("h1", 100, 10.0)
    assert meter.total() is None
    meter.update("h1", 150, 12.0)
    meter.update("h2", 10, 10.0)
    meter.update("h2", 20, 11.0)
    assert meter.total() == 35.0
    meter.update("h1", 5, 13.0)  # its process restarted: no rate until the next count
    assert meter.total() == 10.0
    meter.keep(["h1"])
    assert meter.total() is None
