"""`reach status`: rows and trees built from what the actors answer, the text report, and the
one-line error when no cluster is reachable."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Awaitable
from dataclasses import asdict
from typing import Any, TypeVar

import pytest

from reach._runtime.names import supervisor_name
from reach.errors import AgentNotFound, AgentUnavailable, ConfigError
from reach.ports.cluster import NodeInfo
from reach.records import (
    AgentRecord,
    AgentStatus,
    ChildKind,
    ChildStatus,
    DeadLetter,
    RestartPlacement,
    RestartRecord,
    SupervisorState,
    SupervisorStatus,
)
from reach.tools import status
from reach.tools.cli import main
from reach.tools.status import AgentRow, ChildRow, ClusterStatus, SupervisorNode

NODE_A = "5c1e0a9b" + "0" * 48
NODE_B = "77aa01ff" + "1" * 48
ONLINE, OFFLINE, RESTARTING = AgentStatus.ONLINE, AgentStatus.OFFLINE, AgentStatus.RESTARTING
RUNNING = SupervisorState.RUNNING
T = TypeVar("T")


def record(agent_id: str, host: str, status_: AgentStatus = ONLINE, *, load: int = 0,
           epoch: int = 1, node: str = NODE_A) -> AgentRecord:
    return AgentRecord(agent_id, ("order.query",), "", host, node, status_, load, epoch)


def agent(child_id: str, host: str, restart: str = "permanent") -> ChildStatus:
    return ChildStatus(child_id, ChildKind.AGENT, host, restart)


def restart(child: str, at: float, reason: str = "host died",
            placement: RestartPlacement = RestartPlacement.DEDICATED) -> RestartRecord:
    return RestartRecord(child, at, placement, 0.5, reason)


REFUNDS = SupervisorStatus(
    "refunds", RUNNING, strategy="rest_for_one",
    children=(agent("refund-1", "reach.host.0badc0ffee00"),),
    restarts=(restart("refund-1", 1.5, "crash"),), tasks={"completed": 2})
#: What Supervisor.status() answers for a root "shop" with a nested "refunds" supervisor.
SHOP = SupervisorStatus(
    "shop", RUNNING, node=NODE_A, strategy="one_for_one",
    children=(agent("order-1", "reach.host.3fa2c1d09b1e"),
              agent("order-2", "reach.pool.default.0", "transient"),
              ChildStatus("refunds", ChildKind.SUPERVISOR, None, "permanent")),
    restarts=(restart("order-1", 1.0), restart("order-1", 2.0),
              restart("refunds", 3.0, "gave up", RestartPlacement.SUPERVISOR)),
    tasks={"completed": 3, "failed": 1}, subtree={"refunds": REFUNDS})

LETTER = DeadLetter("m1", "request", "driver:5c1e", "ghost-1", "t", "agent_not_found",
                    "no agent 'ghost-1' is registered", 1000.0)


def test_agent_rows_are_sorted_shortened_and_take_the_hosts_live_loads() -> None:
    rows = status.agent_rows(
        [record("order-2", "reach.pool.default.0", load=7, node=NODE_B),
         record("order-1", "reach.host.3fa2c1d09b1e", RESTARTING, load=2, epoch=3)],
        loads={"order-2": 4})
    assert rows == [
        AgentRow("order-1", "5c1e0a9b", "host.3fa2c1d09b1e", RESTARTING, 2, 3,
                 {"order.query": 0}),
        AgentRow("order-2", "77aa01ff", "pool.default.0", ONLINE, 4, 1, {"order.query": 0}),
    ]


def test_agent_rows_and_the_table_show_each_capabilitys_priority() -> None:
    backup = AgentRecord("refund-2", ("refund.issue", "refund.status"), "", "reach.host.ab",
                         NODE_A, ONLINE, 0, 1, priorities=(1, 0))
    (row,) = status.agent_rows([backup], loads={})
    assert row.capabilities == {"refund.issue": 1, "refund.status": 0}
    lines = status.format_agents([row])
    assert lines[1].split()[-1] == "CAPABILITIES"
    assert lines[2].split()[-1] == "refund.issue:1,refund.status"
    assert json.loads(json.dumps(asdict(row)))["capabilities"] == {
        "refund.issue": 1, "refund.status": 0}


def test_a_supervisor_status_becomes_a_tree_with_restart_counts_per_child() -> None:
    shop = status.supervisor_node(SHOP)
    assert (shop.name, shop.state, shop.strategy, shop.node, shop.restart) == (
        "shop", "running", "one_for_one", "5c1e0a9b", "")
    order_1, order_2, refunds = shop.children
    assert order_1 == ChildRow("order-1", "permanent", 2, "host.3fa2c1d09b1e")
    assert order_2 == ChildRow("order-2", "transient", 0, "pool.default.0")
    assert isinstance(refunds, SupervisorNode)
    assert (refunds.name, refunds.restart, refunds.restarts) == ("refunds", "permanent", 1)
    assert refunds.children == (ChildRow("refund-1", "permanent", 1, "host.0badc0ffee00"),)


def test_only_supervisors_nested_in_no_other_are_roots() -> None:
    forest = status.supervisor_forest({
        "shop": SHOP, "refunds": REFUNDS,
        "alone": SupervisorStatus("alone", SupervisorState.STOPPED),
    })
    assert [n.name for n in forest] == ["alone", "shop"]
    assert [n.name for n in status.walk(forest)] == ["alone", "shop", "refunds"]
    assert status.task_totals(forest) == {"completed": 5, "failed": 1}


def test_an_unreachable_supervisor_keeps_its_name_and_says_so() -> None:
    node = status.supervisor_node(SupervisorStatus("gone", SupervisorState.UNREACHABLE))
    assert (node.name, node.state, node.children, node.tasks) == (
        "gone", SupervisorState.UNREACHABLE, (), {})
    assert status.format_tree(node) == ["  gone  unreachable"]
    told = SupervisorStatus("gone", SupervisorState.UNREACHABLE,
                            detail="reach.sup.gone does not exist\n(its process is gone)")
    assert status.format_tree(status.supervisor_node(told)) == [
        "  gone  unreachable: reach.sup.gone does not exist"]


def test_the_tree_is_drawn_with_branches_restart_counts_and_hosts() -> None:
    assert status.format_tree(status.supervisor_node(SHOP)) == [
        "  shop  running  one_for_one  node 5c1e0a9b  tasks: completed 3, failed 1",
        "  ├─ order-1  permanent  restarts 2  on host.3fa2c1d09b1e",
        "  ├─ order-2  transient  restarts 0  on pool.default.0",
        "  └─ refunds  running  rest_for_one  permanent  restarts 1  tasks: completed 2",
        "     └─ refund-1  permanent  restarts 1  on host.0badc0ffee00",
    ]


def test_the_agents_table_is_aligned_counted_by_status_and_cut_at_the_limit() -> None:
    rows = [AgentRow(f"a-{i}", "5c1e0a9b", "pool.p.0", ONLINE, i, 1) for i in range(12)]
    rows.append(AgentRow("z", "77aa01ff", "host.abc", OFFLINE, 0, 4))
    lines = status.format_agents(rows, limit=3)
    assert lines[0] == "agents: 13 (1 offline, 12 online)"
    assert lines[1].split() == ["ID", "NODE", "HOST", "STATUS", "LOAD", "EPOCH", "CAPABILITIES"]
    assert lines[2].split() == ["a-0", "5c1e0a9b", "pool.p.0", "online", "0", "1"]
    assert len({line.index("NODE") if "NODE" in line else line.index("5c1e")
                for line in lines[1:4]}) == 1, "columns are aligned"
    assert lines[-1] == "  ... and 10 more (--limit 0 shows all)"
    assert len(status.format_agents(rows, limit=0)) == 2 + 13


def test_no_agents_is_one_line() -> None:
    assert status.format_agents([]) == ["agents: 0"]


def test_dead_letters_show_their_count_and_the_last_few_with_their_age() -> None:
    assert status.format_dead_letters(42, [LETTER], now=1090.0) == [
        "dead letters: 42 (last 1)",
        "      90 s ago  agent_not_found  driver:5c1e -> ghost-1  request  "
        "no agent 'ghost-1' is registered",
    ]
    assert status.format_dead_letters(0, [], now=0.0) == ["dead letters: 0"]


def sample() -> ClusterStatus:
    return ClusterStatus(
        address="10.0.0.1:6379", taken_at=100.0, nodes=2, hosts=3,
        agents=(AgentRow("order-1", "5c1e0a9b", "host.3fa2c1d09b1e", ONLINE, 0, 3),),
        supervisors=(status.supervisor_node(SHOP),), tasks={"completed": 5, "failed": 1},
        dead_letters=1, recent_letters=(LETTER,),
        unreachable_hosts=("reach.host.dead00000000",))


def test_the_report_has_every_section_in_order() -> None:
    text = status.format_status(sample())
    assert text.splitlines()[0] == (
        "cluster 10.0.0.1:6379: 2 nodes, 3 hosts (1 not answering: host.dead00000000)")
    heads = [line.split(":")[0] for line in text.splitlines() if line and line[0] != " "]
    assert heads == ["cluster 10.0.0.1", "agents", "supervisors", "tasks", "dead letters"]
    assert "tasks: completed 5, failed 1" in text
    assert "supervisors: 2" in text


def test_the_report_is_json_serialisable_with_kinds_that_tell_children_apart() -> None:
    data = json.loads(json.dumps(asdict(sample())))
    kinds = [c["kind"] for c in data["supervisors"][0]["children"]]
    assert kinds == ["agent", "agent", "supervisor"]
    assert data["agents"][0]["status"] == "online"
    assert data["supervisors"][0]["state"] == "running"
    assert data["recent_letters"] == [{
        "msg_id": "m1", "msg_type": "request", "sender": "driver:5c1e", "receiver": "ghost-1",
        "trace_id": "t", "code": "agent_not_found", "reason": "no agent 'ghost-1' is registered",
        "at": 1000.0, "kills": 0}]


async def answer(value: T) -> T:
    return value


async def never() -> dict[str, Any]:
    await asyncio.Event().wait()  # nobody sets it: a process that does not answer
    raise AssertionError("unreachable")


class Host:
    def __init__(self, loads: dict[str, int] | None) -> None:
        self.loads = loads

    def info(self) -> Awaitable[dict[str, Any]]:
        return never() if self.loads is None else answer({"agents": self.loads})


class Supervisor:
    def __init__(self, status_: SupervisorStatus) -> None:
        self.status_ = status_

    def status(self) -> Awaitable[SupervisorStatus]:
        return answer(self.status_)


class Cluster:
    """What gather asks, without Ray: hosts (None: does not answer), supervisors, nodes."""

    def __init__(self, records: list[AgentRecord], *, letters: int = 0,
                 hosts: dict[str, dict[str, int] | None] | None = None,
                 supervisors: tuple[SupervisorStatus, ...] = (), registry: bool = True) -> None:
        self.records = records
        self.letters = [DeadLetter(f"m{i}", "notification", "driver:5c1e", "ghost", None,
                                   "agent_unavailable", "gone", float(i)) for i in range(letters)]
        self.hosts = hosts or {}
        self.sups = {supervisor_name(s.name): s for s in supervisors}
        self.has_registry = registry

    def registry(self) -> Cluster:
        if not self.has_registry:
            raise AgentUnavailable("reach.registry does not exist (its process is gone)")
        return self

    def agents(self) -> Awaitable[list[AgentRecord]]:
        return answer(self.records)

    def dead_letters(self, limit: int) -> Awaitable[list[DeadLetter]]:
        return answer(self.letters[-limit:])

    def host(self, name: str) -> Host:
        if name not in self.hosts:
            raise AgentUnavailable(f"{name} does not exist (its process is gone)")
        return Host(self.hosts[name])

    def supervisor(self, name: str) -> Supervisor:
        if name not in self.sups:
            raise AgentNotFound(f"no supervisor {name!r} is running")
        return Supervisor(self.sups[name])

    def nodes(self) -> list[NodeInfo]:
        return [NodeInfo(NODE_A, True, {}), NodeInfo(NODE_B, True, {}), NodeInfo("x", False, {})]

    def named(self) -> list[str]:
        return ["reach.registry", *self.hosts, *self.sups, "reach.sup.gone"]


async def test_gather_asks_every_process_and_reports_those_that_do_not_answer() -> None:
    cluster = Cluster(
        [record("order-1", "reach.host.3fa2c1d09b1e", load=5),
         record("order-2", "reach.pool.default.0", load=1),
         record("lost", "reach.host.dead00000000", OFFLINE, load=2),
         record("slow", "reach.host.510w00000000", load=3),
         record("back", "", AgentStatus.RECOVERING)],
        letters=7, supervisors=(SHOP, REFUNDS),
        hosts={"reach.host.3fa2c1d09b1e": {"order-1": 0}, "reach.pool.default.0": {},
               "reach.host.510w00000000": None})
    report = await status.gather(cluster, address="here", letters=2, timeout_s=0.01)
    assert (report.address, report.nodes, report.hosts) == ("here", 2, 4)
    assert report.unreachable_hosts == ("reach.host.510w00000000", "reach.host.dead00000000")
    loads = {r.agent_id: r.load for r in report.agents}
    assert loads == {"back": 0, "lost": 2, "order-1": 0, "order-2": 1, "slow": 3}
    assert [n.name for n in report.supervisors] == ["gone", "shop"]
    gone = report.supervisors[0]
    assert (gone.state, gone.detail) == (SupervisorState.UNREACHABLE,
                                         "no supervisor 'reach.sup.gone' is running")
    assert report.tasks == {"completed": 5, "failed": 1}
    assert (report.dead_letters, [d.msg_id for d in report.recent_letters]) == (7, ["m5", "m6"])
    assert (await status.gather(cluster, letters=0, timeout_s=0.01)).recent_letters == ()


async def test_gather_raises_agent_unavailable_when_the_registry_is_gone() -> None:
    with pytest.raises(AgentUnavailable, match="the registry did not answer"):
        await status.gather(Cluster([], registry=False))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_connect_refuses_an_address_where_nothing_listens_with_a_config_error() -> None:
    with pytest.raises(ConfigError) as caught:
        status.connect(f"127.0.0.1:{free_port()}", probe_s=1.0)
    assert "no Ray cluster answers at" in caught.value.message
    assert caught.value.details["setting"] == "address"


def test_connect_refuses_a_malformed_address() -> None:
    with pytest.raises(ConfigError, match="no running Ray cluster found"):
        status.connect("not an address")


def test_reach_status_without_a_cluster_prints_one_line_and_exits_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["status", "--address", f"127.0.0.1:{free_port()}"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("reach status: no Ray cluster answers at ")
    assert captured.err.count("\n") == 1
