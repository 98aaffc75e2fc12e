"""`reach status`: rows and trees built from what the actors answer, the text report, and the
one-line error when no cluster is reachable."""

from __future__ import annotations

import json
import socket
from dataclasses import asdict
from typing import Any

import pytest

from reach import status
from reach.cli import main
from reach.errors import ConfigError
from reach.status import AgentRow, ChildRow, ClusterStatus, SupervisorNode

NODE_A = "5c1e0a9b" + "0" * 48
NODE_B = "77aa01ff" + "1" * 48


def record(agent_id: str, host: str, status_: str = "online", *, load: int = 0,
           epoch: int = 1, node: str = NODE_A) -> dict[str, Any]:
    return {"agent_id": agent_id, "capabilities": ["order.query"], "description": "",
            "host": host, "node": node, "status": status_, "load": load, "epoch": epoch}


#: What Supervisor.status() answers for a root "shop" with a nested "refunds" supervisor.
SHOP = {
    "name": "shop", "node": NODE_A, "state": "running", "strategy": "one_for_one",
    "children": [
        {"id": "order-1", "kind": "agent", "host": "reach.host.3fa2c1d09b1e",
         "restart": "permanent"},
        {"id": "order-2", "kind": "agent", "host": "reach.pool.default.0", "restart": "transient"},
        {"id": "refunds", "kind": "supervisor", "host": None, "restart": "permanent"},
    ],
    "restarts": [{"child": "order-1", "at": 1.0, "placement": "dedicated", "latency_s": 0.5,
                  "reason": "host died"},
                 {"child": "order-1", "at": 2.0, "placement": "dedicated", "latency_s": 0.4,
                  "reason": "host died"},
                 {"child": "refunds", "at": 3.0, "placement": "supervisor", "latency_s": 0.2,
                  "reason": "gave up"}],
    "tasks": {"completed": 3, "failed": 1},
    "subtree": {"refunds": {
        "name": "refunds", "state": "running", "strategy": "rest_for_one",
        "children": [{"id": "refund-1", "kind": "agent", "host": "reach.host.0badc0ffee00",
                      "restart": "permanent"}],
        "restarts": [{"child": "refund-1", "at": 1.5, "placement": "dedicated",
                      "latency_s": 0.3, "reason": "crash"}],
        "tasks": {"completed": 2}, "subtree": {},
    }},
}


def test_agent_rows_are_sorted_shortened_and_take_the_hosts_live_loads() -> None:
    rows = status.agent_rows(
        [record("order-2", "reach.pool.default.0", load=7, node=NODE_B),
         record("order-1", "reach.host.3fa2c1d09b1e", "restarting", load=2, epoch=3)],
        loads={"order-2": 4})
    assert rows == [
        AgentRow("order-1", "5c1e0a9b", "host.3fa2c1d09b1e", "restarting", 2, 3),
        AgentRow("order-2", "77aa01ff", "pool.default.0", "online", 4, 1),
    ]


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
        "shop": SHOP, "refunds": SHOP["subtree"]["refunds"],  # type: ignore[index]
        "alone": {"name": "alone", "state": "stopped", "children": [], "restarts": [],
                  "tasks": {}, "subtree": {}},
    })
    assert [n.name for n in forest] == ["alone", "shop"]
    assert [n.name for n in status.walk(forest)] == ["alone", "shop", "refunds"]
    assert status.task_totals(forest) == {"completed": 5, "failed": 1}


def test_an_unreachable_supervisor_keeps_its_name_and_says_so() -> None:
    node = status.supervisor_node({"name": "gone", "state": "unreachable"})
    assert (node.name, node.state, node.children, node.tasks) == ("gone", "unreachable", (), {})
    assert status.format_tree(node) == ["  gone  unreachable"]


def test_the_tree_is_drawn_with_branches_restart_counts_and_hosts() -> None:
    assert status.format_tree(status.supervisor_node(SHOP)) == [
        "  shop  running  one_for_one  node 5c1e0a9b  tasks: completed 3, failed 1",
        "  ├─ order-1  permanent  restarts 2  on host.3fa2c1d09b1e",
        "  ├─ order-2  transient  restarts 0  on pool.default.0",
        "  └─ refunds  running  rest_for_one  permanent  restarts 1  tasks: completed 2",
        "     └─ refund-1  permanent  restarts 1  on host.0badc0ffee00",
    ]


def test_the_agents_table_is_aligned_counted_by_status_and_cut_at_the_limit() -> None:
    rows = [AgentRow(f"a-{i}", "5c1e0a9b", "pool.p.0", "online", i, 1) for i in range(12)]
    rows.append(AgentRow("z", "77aa01ff", "host.abc", "offline", 0, 4))
    lines = status.format_agents(rows, limit=3)
    assert lines[0] == "agents: 13 (1 offline, 12 online)"
    assert lines[1].split() == ["ID", "NODE", "HOST", "STATUS", "LOAD", "EPOCH"]
    assert lines[2].split() == ["a-0", "5c1e0a9b", "pool.p.0", "online", "0", "1"]
    assert len({line.index("NODE") if "NODE" in line else line.index("5c1e")
                for line in lines[1:4]}) == 1, "columns are aligned"
    assert lines[-1] == "  ... and 10 more (--limit 0 shows all)"
    assert len(status.format_agents(rows, limit=0)) == 2 + 13


def test_no_agents_is_one_line() -> None:
    assert status.format_agents([]) == ["agents: 0"]


def test_dead_letters_show_their_count_and_the_last_few_with_their_age() -> None:
    letters = [{"msg_id": "m1", "msg_type": "request", "sender": "driver:5c1e",
                "receiver": "ghost-1", "trace_id": "t", "code": "agent_not_found",
                "reason": "no agent 'ghost-1' is registered", "at": 1000.0}]
    assert status.format_dead_letters(42, letters, now=1090.0) == [
        "dead letters: 42 (last 1)",
        "      90 s ago  agent_not_found  driver:5c1e -> ghost-1  request  "
        "no agent 'ghost-1' is registered",
    ]
    assert status.format_dead_letters(0, [], now=0.0) == ["dead letters: 0"]


def sample() -> ClusterStatus:
    return ClusterStatus(
        address="10.0.0.1:6379", taken_at=100.0, nodes=2, hosts=3,
        agents=(AgentRow("order-1", "5c1e0a9b", "host.3fa2c1d09b1e", "online", 0, 3),),
        supervisors=(status.supervisor_node(SHOP),), tasks={"completed": 5, "failed": 1},
        dead_letters=0, recent_letters=(), unreachable_hosts=("reach.host.dead00000000",))


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
