"""`reach status` on a real two-node Ray: agents with their hosts, nodes, live loads and epochs,
a supervision tree with restart counts, tasks by state, dead letters; and the command itself,
run as its own process against the cluster."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from typing import Any

import pytest
import ray
from ray_helpers import kill_and_wait, wait_until
from support_agents import Echo, Life, Recorder, Slow, Text, Worker, crash_order

import reach
from policies.tasks import TaskState
from reach import ChildSpec, Intensity, SupervisorSpec
from reach.records import AgentStatus, SupervisorState
from reach.tools import status
from reach.tools.status import ChildRow, ClusterStatus, SupervisorNode

pytestmark = pytest.mark.integration

FAST = reach.Backoff(base_s=0.01, cap_s=0.05)
POOL = reach.Packed(pool="st", size=1)
BUSY = reach.Packed(pool="st-busy", size=1)  # apart: a crash in POOL takes its host down


async def life(rt: Any, agent_id: str) -> Life:
    reply = await rt.client.request(agent_id, {}, "test.life.ask@1.0", returns=Life,
                                    timeout_ms=20_000)
    return reply.value


async def restarted(rt: Any, agent_id: str) -> None:
    """Crashes a supervised agent and waits until a new incarnation answers."""
    before = await life(rt, agent_id)
    with pytest.raises(reach.AgentUnavailable):
        await rt.client.request(agent_id, crash_order(), timeout_ms=20_000)

    async def new() -> bool:
        try:
            return (await life(rt, agent_id)).token != before.token
        except (reach.AgentUnavailable, reach.AgentNotFound, reach.RequestTimeout):
            return False

    await wait_until(new, timeout_s=30)


async def dead_letter(rt: Any, agent_id: str) -> str:
    """Kills an agent's host, then notifies the agent: the notification is a dead letter.

    Returns the dead host's name.
    """
    info = await rt.spawn(Recorder, agent_id)
    await kill_and_wait(ray.get_actor(info.host, namespace="reach"))
    with contextlib.suppress(reach.AgentUnavailable):
        await rt.client.notify(agent_id, Text(text="into the void"))
    return info.host


def find(forest: tuple[SupervisorNode, ...], name: str) -> SupervisorNode:
    return next(n for n in status.walk(forest) if n.name == name)


async def test_status_gathers_agents_the_supervision_tree_tasks_and_dead_letters(
    rt: Any, cluster: Any
) -> None:
    await rt.spawn(Echo, "st-echo")
    await rt.spawn_many(Slow, ["st-slow"], placement=BUSY)
    sup = await rt.supervise(SupervisorSpec(
        "st-root", backoff=FAST, intensity=Intensity(10, 5), seed=1, children=[
            ChildSpec(Worker, "st-w1"),
            SupervisorSpec("st-sub", backoff=FAST, intensity=Intensity(10, 5), seed=1,
                           children=[ChildSpec(Worker, "st-w2", placement=POOL)]),
        ]))
    task = await sup.submit("st-w1", Text(text="hello"))
    assert (await task.result()).state == TaskState.COMPLETED
    await restarted(rt, "st-w2")
    dead_host = await dead_letter(rt, "st-gone")
    slow = asyncio.ensure_future(rt.client.request("st-slow", Text(text="3"), timeout_ms=20_000))

    async def busy() -> ClusterStatus | None:
        report = await status.gather(rt.cluster, address=cluster.address, letters=10_000)
        loads = {r.agent_id: r.load for r in report.agents}
        letters = [d for d in report.recent_letters if d.receiver == "st-gone"]
        return report if loads.get("st-slow") == 1 and letters else None

    report = await wait_until(busy)
    await slow
    rows = {r.agent_id: r for r in report.agents}
    nodes = {n.node_id[:8] for n in rt.cluster.nodes() if n.alive}
    assert report.nodes == 2
    assert {rows[a].node for a in ("st-echo", "st-slow", "st-w1", "st-w2")} <= nodes
    assert rows["st-echo"].host.startswith("host.")
    assert rows["st-slow"].host == "pool.st-busy.0"
    # st-w2's crash left its one-host pool with no live host: its restart took a warm spare
    # when one was offered, else waited for the pool's host to be started again.
    w2_host = rows["st-w2"].host
    assert w2_host == "pool.st.0" or w2_host.startswith("host."), w2_host
    assert rows["st-echo"].status == AgentStatus.ONLINE
    w2 = await rt.cluster.registry().lookup("st-w2")
    assert w2 is not None
    assert rows["st-w2"].epoch == w2.epoch > 1
    assert dead_host in report.unreachable_hosts
    assert "reach.pool.st-busy.0" not in report.unreachable_hosts

    root = find(report.supervisors, "st-root")
    assert root in report.supervisors, "st-root is a root, st-sub is not"
    assert all(n.name != "st-sub" for n in report.supervisors)
    w1, sub = root.children
    assert isinstance(w1, ChildRow)
    assert isinstance(sub, SupervisorNode)
    assert (w1.child_id, w1.restarts, w1.host) == ("st-w1", 0, rows["st-w1"].host)
    assert (sub.name, sub.state, sub.restarts) == ("st-sub", SupervisorState.RUNNING, 0)
    assert root.node in nodes
    assert sub.node == root.node, "a child supervisor runs on its parent's node"
    assert sub.children == (ChildRow("st-w2", "permanent", 1, w2_host),)
    assert root.tasks == {"completed": 1}
    assert report.tasks["completed"] >= 1
    assert report.dead_letters >= 1

    text = status.format_status(report)
    assert f"└─ st-w2  permanent  restarts 1  on {w2_host}" in text
    await sup.stop()
    for agent_id in ("st-echo", "st-slow"):
        await rt.stop(agent_id)


def test_the_reach_status_command_reports_a_running_cluster_from_another_process(
    rt: Any, cluster: Any
) -> None:
    env = {**os.environ, "RAY_ADDRESS": cluster.address}
    done = subprocess.run([sys.executable, "-m", "reach.tools.cli", "status", "--limit", "0"],
                          capture_output=True, text=True, encoding="utf-8", env=env,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    port = cluster.address.rsplit(":", 1)[1]
    assert lines[0].startswith("cluster ")
    assert f":{port}: 2 nodes, " in lines[0]
    assert any(line.startswith("agents: ") for line in lines)
    assert "supervisors: " in done.stdout
    assert "dead letters: " in done.stdout
