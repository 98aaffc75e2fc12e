"""Node failure on a three-node cluster (three raylets on loopback, started by this module).

Agents under supervisors are spread over the head and two worker nodes, dedicated and packed,
each placed on its node with soft node affinity. While a stream of tasks runs through the root
supervisor, one worker node is killed outright (its raylet and every process on it). Then every
agent is back on a live node under the same ID, only the dead node's agents were restarted, and
no task was lost. An agent that requires a resource only the dead node had cannot come back: its
supervisor gives up with a typed error instead of waiting forever.
"""

from __future__ import annotations

import asyncio
import collections
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import ray
from pydantic import BaseModel

import reach
from reach import ChildSpec, Intensity, RestartType, SupervisorSpec
from reach._runtime.names import NAMESPACE

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

# Ray workers cannot import this test module by name: ship its classes by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

#: Ray's health checks of raylets, made faster than the defaults so that a dead node is known
#: within about five seconds (it is SIGKILLed: nothing tells the cluster it is gone).
HEALTH_CHECKS = {"health_check_initial_delay_ms": 1000, "health_check_period_ms": 1000,
                 "health_check_failure_threshold": 5}
TASK_TIMEOUT_MS = 90_000
INFLIGHT = 6
AFTER_RECOVERY = 30  # tasks the stream still completes once every agent is back
FAST = reach.Backoff(base_s=0.01, cap_s=0.2)


@reach.schema("nodefail.job@1.0")
class Job(BaseModel):
    n: int


@reach.schema("nodefail.done@1.0")
class Done(BaseModel):
    n: int
    agent_id: str
    node: str


class NodeWorker(reach.Agent):
    capabilities = ("nodefail.work",)
    description = "Does a small unit of work and says which node it ran on."

    @reach.handler(Job, returns=Done)
    async def work(self, ctx: reach.Context, job: Job) -> Done:
        await asyncio.sleep(0.02)  # stands for real work
        return Done(n=job.n, agent_id=self.id, node=ray.get_runtime_context().get_node_id())


@dataclass
class Cluster3:
    """The cluster, its nodes and the driver's runtime."""

    cluster: Any
    rt: Any
    head: str
    workers: dict[str, Any]  # node ID -> the worker's Node object
    resource: dict[str, str]  # node ID -> its custom resource


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster3]:
    from ray.cluster_utils import Cluster

    assert not ray.is_initialized(), "an earlier test left this process connected to Ray"
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 4, "resources": {"nf_head": 1000}, "include_dashboard": False,
        "_system_config": HEALTH_CHECKS})
    try:
        rt = _start_reach(cluster.address, tmp_path_factory.mktemp("nf") / "sessions.db")
        head = cluster.head_node.node_id
        assert ray.get_runtime_context().get_node_id() == head
        b = cluster.add_node(num_cpus=4, resources={"nf_b": 1000})
        c = cluster.add_node(num_cpus=4, resources={"nf_c": 1000})
        cluster.wait_for_nodes()
        yield Cluster3(cluster, rt, head, {b.node_id: b, c.node_id: c},
                       {head: "nf_head", b.node_id: "nf_b", c.node_id: "nf_c"})
        rt.shutdown()
    finally:
        ray.shutdown()
        cluster.shutdown()


def _start_reach(address: str, sessions: Path) -> Any:
    """Starts reach while the head is the only node, so that its own actors (the registry, the
    session store and this driver's inbox) run on the head, as a deployment keeps them."""
    rt = reach.init(address=address, heartbeat_interval_s=0.5, heartbeat_misses=3,
                    log_to_driver=False, session_path=str(sessions), session_resource="nf_head")
    inbox = ray.get_actor(f"reach.inbox.{rt.driver_id}", namespace=NAMESPACE)
    actors = (rt.cluster.registry().handle, rt.cluster.sessions().handle, inbox)
    ray.get([a.__ray_ready__.remote() for a in actors])
    return rt


async def until(check: Callable[[], Awaitable[Any]], timeout_s: float, what: str,
                show: Callable[[], Awaitable[Any]] | None = None) -> Any:
    """Polls ``check`` until it returns something truthy; fails after ``timeout_s``, with what
    ``show`` returns then."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(0.2)
    seen = await show() if show is not None else last
    pytest.fail(f"{what}: not within {timeout_s} s; last seen: {seen!r}")


def live_nodes() -> set[str]:
    return {n["NodeID"] for n in ray.nodes() if n["Alive"]}


async def records(rt: Any, ids: list[str]) -> dict[str, reach.AgentRecord]:
    """The registry's records of ``ids`` (missing ones left out)."""
    found = {r.agent_id: r for r in await rt.agents()}
    return {i: found[i] for i in ids if i in found}


async def all_online(rt: Any, ids: list[str]) -> dict[str, reach.AgentRecord] | None:
    now = await records(rt, ids)
    ok = len(now) == len(ids) and all(r.online for r in now.values())
    return now if ok else None


@dataclass(frozen=True)
class Ended:
    """A task of the stream that ended: its result, its number and the agent it went to."""

    result: reach.TaskResult
    n: int
    target: str


class Stream:
    """Submits tasks through a supervisor, ``INFLIGHT`` at a time, each to the next agent by ID,
    until told to stop; keeps every task's end (or how it was lost)."""

    def __init__(self, sup: reach.SupervisorRef, targets: list[str]) -> None:
        self.sup = sup
        self.targets = targets
        self.results: list[Ended] = []
        self.lost: list[str] = []
        self.submitted = 0
        self._stop = asyncio.Event()

    async def run(self) -> None:
        await asyncio.gather(*(self._lane(lane) for lane in range(INFLIGHT)))

    async def _lane(self, lane: int) -> None:
        n = lane
        while not self._stop.is_set():
            target = self.targets[n % len(self.targets)]
            self.submitted += 1
            try:
                handle = await self.sup.submit(target, Job(n=n), timeout_ms=TASK_TIMEOUT_MS,
                                               retry_limit=40)
                result = await asyncio.wait_for(handle.result(), TASK_TIMEOUT_MS / 1000 + 10)
            except Exception as exc:  # the owner went away, or the task never ended
                self.lost.append(f"task {n} to {target}: {type(exc).__name__}: {exc}")
            else:
                self.results.append(Ended(result, n, target))
            n += INFLIGHT

    async def completed(self, count: int, since: float = 0.0) -> bool:
        done = sum(1 for r in self.results
                   if r.result.state is reach.TaskState.COMPLETED and r.result.submitted >= since)
        return done >= count

    def stop(self) -> None:
        self._stop.set()


@pytest.fixture(scope="module")
async def tree(nodes: Cluster3) -> AsyncIterator[dict[str, Any]]:
    """Starts the tree and picks the worker node to kill: one its root supervisor is not on."""
    b, c = list(nodes.workers)
    children: list[ChildSpec | SupervisorSpec] = [
        ChildSpec(NodeWorker, "nf-head-d", placement=reach.Dedicated(node_id=nodes.head))]
    for tag, node in (("b", b), ("c", c)):
        children += [
            ChildSpec(NodeWorker, f"nf-{tag}-d", placement=reach.Dedicated(node_id=node)),
            *(ChildSpec(NodeWorker, f"nf-{tag}-p{i}",
                        placement=reach.Packed(pool=f"nf-{tag}", size=1, node_id=node))
              for i in range(2))]
    children.append(SupervisorSpec("nf-sub", backoff=FAST, intensity=Intensity(20, 30),
                                   children=[
        ChildSpec(NodeWorker, "nf-sub-b-d", placement=reach.Dedicated(node_id=b)),
        ChildSpec(NodeWorker, "nf-sub-c-p", placement=reach.Packed(pool="nf-c", node_id=c))]))
    # Agents that can only run where one worker's custom resource is, each under a supervisor
    # of its own that its parent does not restart (so that its giving up stays visible).
    pinned = {node: f"nf-pinned-{tag}" for tag, node in (("b", b), ("c", c))}
    children += [SupervisorSpec(name, backoff=FAST, intensity=Intensity(2, 30),
                                restart=RestartType.TEMPORARY, children=[
        ChildSpec(NodeWorker, name, placement=reach.Dedicated(
            resources={nodes.resource[node]: 1}))]) for node, name in pinned.items()]
    sup = await nodes.rt.supervise(SupervisorSpec("nf", children=children, backoff=FAST,
                                                  intensity=Intensity(20, 30), seed=5))
    status = await sup.status()
    # A child supervisor runs on its parent's node: the tree shares its root's fate, and
    # killing another node leaves the owner of the tasks running.
    assert {s.node for s in status.subtree.values()} == {status.node}
    killed = next(w for w in nodes.workers if w != status.node)
    ids = ["nf-head-d", *(f"nf-{t}-{k}" for t in "bc" for k in ("d", "p0", "p1")),
           "nf-sub-b-d", "nf-sub-c-p"]
    yield {"sup": sup, "node": killed, "ids": ids, "pinned": pinned}
    await sup.stop()


async def test_agents_come_back_on_live_nodes_and_no_task_is_lost_when_a_node_dies(
    nodes: Cluster3, tree: dict[str, Any]
) -> None:
    rt, sup, killed, ids = nodes.rt, tree["sup"], tree["node"], tree["ids"]
    before = await until(lambda: all_online(rt, ids), 30, "every agent registered")
    # Spread as placed: every node holds agents, the node to kill dedicated and packed ones.
    by_node = collections.defaultdict(set)
    for agent_id, rec in before.items():
        by_node[rec.node].add(agent_id)
    assert set(by_node) == {nodes.head, *nodes.workers}
    doomed = by_node[killed]
    assert {before[i].host.split(".")[1] for i in doomed} == {"host", "pool"}
    pinned = await records(rt, list(tree["pinned"].values()))
    assert {tree["pinned"][r.node] for r in pinned.values()} == set(pinned)

    stream = Stream(sup, ids)
    running = asyncio.ensure_future(stream.run())
    await until(lambda: stream.completed(2 * len(ids)), 60, "tasks completing before the kill")

    killed_at_wall, killed_at = time.time(), time.monotonic()
    await asyncio.to_thread(nodes.cluster.remove_node, nodes.workers[killed], False)

    async def back() -> dict[str, reach.AgentRecord] | None:
        now, alive = await records(rt, ids), live_nodes()
        settled = killed not in alive and len(now) == len(ids) and all(
            r.online and r.node in alive for r in now.values())
        return now if settled else None

    async def show() -> Any:
        now = await records(rt, ids)
        return {"alive": live_nodes(), "status": await sup.status(),
                "agents": {i: (r.status, r.node[:8], r.epoch, r.host) for i, r in now.items()}}

    after = await until(back, 90, "every agent back on a live node", show)
    recovered_s = time.monotonic() - killed_at

    # Reachable by the same ID, answering from the live node the registry names.
    for agent_id in ids:
        reply = await rt.client.request(agent_id, Job(n=-1), returns=Done, timeout_ms=30_000)
        done = reply.value
        assert (done.agent_id, done.node) == (agent_id, after[agent_id].node)
        assert done.node != killed

    # Only the dead node's agents were restarted; the others kept their incarnation.
    for agent_id in set(ids) - doomed:
        assert after[agent_id].epoch == before[agent_id].epoch, agent_id
    status = await sup.status()
    restarted = {r.child for r in status.restarts}
    restarted |= {r.child for r in status.subtree["nf-sub"].restarts}
    assert restarted == doomed

    # The stream ran on through the failure: every task ended, and ended completed.
    mark = time.time()
    await until(lambda: stream.completed(AFTER_RECOVERY, since=mark), 90,
                "tasks completing after the recovery")
    stream.stop()
    await running
    assert stream.lost == []
    assert len(stream.results) == stream.submitted
    failed = [(r.target, r.result.error) for r in stream.results
              if r.result.state is not reach.TaskState.COMPLETED]
    assert failed == []
    across = [r for r in stream.results if r.target in doomed
              and r.result.submitted < killed_at_wall < r.result.finished]
    retried = [r for r in stream.results if len(r.result.attempts) > 1]
    assert retried, "no task met the failure: the stream did not run through it"
    print(f"\nnode failure: {len(doomed)} of {len(ids)} agents on the killed node "
          f"({sum(1 for i in doomed if '.pool.' in before[i].host)} packed); every agent "
          f"back on a live node {recovered_s:.1f} s after the kill; {stream.submitted} tasks, "
          f"{len(stream.results)} completed, 0 lost; {len(across)} to the dead node's agents "
          f"were in flight across the kill; {len(retried)} needed more than one attempt")


async def test_an_agent_pinned_to_the_dead_node_fails_typed_instead_of_waiting(
    nodes: Cluster3, tree: dict[str, Any]
) -> None:
    # Runs after the node-failure test: one pinned agent's only node is gone.
    killed = tree["node"]
    assert killed not in live_nodes()
    resource = nodes.resource[killed]
    doomed = tree["pinned"][killed]
    with pytest.raises(reach.RestartLimitExceeded) as gave_up:
        await asyncio.wait_for(nodes.rt.find_supervisor(doomed).wait(), 60)
    assert doomed in gave_up.value.message
    assert f"{resource}=1" in gave_up.value.message  # names what no live node has

    # The other pinned agent, and the rest of the tree, are untouched.
    (survivor,) = set(tree["pinned"]) - {killed}
    alive = await records(nodes.rt, [tree["pinned"][survivor]])
    assert [(r.status, r.node) for r in alive.values()] == [(reach.AgentStatus.ONLINE, survivor)]
    status = await tree["sup"].status()
    assert status.state is reach.SupervisorState.RUNNING
    assert doomed not in [c.child_id for c in status.children]
    assert await all_online(nodes.rt, tree["ids"])

    # A new spawn that needs the dead node's resource is refused at once, typed.
    with pytest.raises(reach.AgentUnavailable) as refused:
        await asyncio.wait_for(nodes.rt.spawn(
            NodeWorker, "nf-pinned-late", placement=reach.Dedicated(resources={resource: 1})), 30)
    assert refused.value.details["resources"] == f"{resource}=1"
