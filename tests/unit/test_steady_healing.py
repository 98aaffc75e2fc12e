"""Healing under a steady trickle of failures, on the fake cluster and virtual time: each child
backs off by its own restarts in a row (forgiven after a period of good running), a crash loop
is backed off and escalates while a sibling beside it heals at once, independent failures heal
side by side, and the agents of one host that died restart together, at once."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel

import reach
from policies.supervision import Backoff, Intensity
from reach import clock
from reach.placement import OWN_HOST_PREFIX, POOL_PREFIX
from reach.records import RestartRecord, SupervisorState
from reach.testing import FakeCluster, eventually, run

BACKOFF = Backoff(base_s=0.2, cap_s=1.6)


@reach.schema("steady.ping@1.0")
class Ping(BaseModel):
    text: str = ""


@reach.schema("steady.pong@1.0")
class Pong(BaseModel):
    by: str


class Worker(reach.Agent):
    capabilities = ("steady.ping",)

    @reach.handler(Ping, returns=Pong)
    async def ping(self, ctx: reach.Context, m: Ping) -> Pong:
        return Pong(by=self.id)


GENEROUS = Intensity(1000, 10)


def tree(*children: reach.ChildSpec, intensity: Intensity = GENEROUS,
         reset_s: float = 10.0) -> reach.SupervisorSpec:
    return reach.SupervisorSpec("steady", children=list(children), intensity=intensity,
                                backoff=BACKOFF, backoff_reset_s=reset_s, seed=1)


def dedicated(agent_id: str) -> reach.ChildSpec:
    return reach.ChildSpec(Worker, agent_id)


def packed(agent_id: str) -> reach.ChildSpec:
    return reach.ChildSpec(Worker, agent_id, placement=reach.Packed(pool="p", size=2))


async def host_of(rt: Any, agent_id: str) -> str:
    rec = await rt.cluster.registry().lookup(agent_id)
    assert rec is not None
    assert rec.host
    return str(rec.host)


async def restarts(sup: reach.SupervisorRef, child: str) -> list[RestartRecord]:
    return [r for r in (await sup.status()).restarts if r.child == child]


async def kill_and_wait(fake: FakeCluster, rt: Any, sup: reach.SupervisorRef,
                        child: str) -> RestartRecord:
    """Kills a child's host and returns the record of the restart that follows."""
    before = len(await restarts(sup, child))
    fake.crash(await host_of(rt, child))

    async def restarted() -> RestartRecord | None:
        done = await restarts(sup, child)
        return done[-1] if len(done) > before else None

    record: RestartRecord = await eventually(restarted, within_s=60, every_s=0.005)
    return record


async def loop_five_times(fake: FakeCluster, rt: Any, sup: reach.SupervisorRef) -> None:
    """Kills "loop" right after each of its restarts, five times: its next restart waits
    0.8-1.6 s (the first two at once, then 0.1-0.2 s, 0.2-0.4 s, 0.4-0.8 s)."""
    for _ in range(5):
        await kill_and_wait(fake, rt, sup, "loop")


def test_a_crash_loop_backs_off_by_its_own_streak_and_escalates_past_the_intensity() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        sup = await rt.supervise(tree(dedicated("loop"), intensity=Intensity(6, 60)))
        latencies = []
        for _ in range(6):
            latencies.append((await kill_and_wait(fake, rt, sup, "loop")).latency_s)
        assert latencies[0] < 0.05  # its first failure: at once
        assert latencies[1] < 0.05  # its first repeat: at once too
        assert latencies[2] >= BACKOFF.base_s / 2  # then 0.1-0.2 s, 0.2-0.4 s ...
        assert latencies[5] >= BACKOFF.cap_s / 2  # capped
        assert latencies[5] <= BACKOFF.cap_s + 0.05
        fake.crash(await host_of(rt, "loop"))  # the seventh restart in the period: it gives up

        async def gave_up() -> bool:
            return (await sup.status()).state is SupervisorState.FAILED

        assert await eventually(gave_up)

    run(scenario)


def test_a_sibling_of_a_crash_loop_heals_at_once_while_the_loop_backs_off() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        sup = await rt.supervise(tree(dedicated("loop"), dedicated("calm")))
        await loop_five_times(fake, rt, sup)
        # The loop's next restart waits 0.8-1.6 s; the sibling's failure meanwhile is its first.
        fake.crash(await host_of(rt, "loop"))
        killed = clock.monotonic()
        calm = await kill_and_wait(fake, rt, sup, "calm")
        assert calm.latency_s < 0.05
        assert clock.monotonic() - killed < BACKOFF.cap_s / 4  # it did not queue behind the loop
        assert len(await restarts(sup, "loop")) == 5  # still backing off
        reply = await rt.client.request("calm", Ping(), timeout_ms=1_000)
        assert reply.value.by == "calm"

        async def loop_back() -> bool:
            return len(await restarts(sup, "loop")) == 6

        assert await eventually(loop_back)
        loop = (await restarts(sup, "loop"))[-1]
        assert loop.latency_s >= 3 * BACKOFF.base_s  # 5 in a row: 0.8-1.6 s

    run(scenario)


def test_a_child_that_ran_for_the_reset_period_is_restarted_at_once_again() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        sup = await rt.supervise(tree(dedicated("a"), reset_s=5.0))
        for _ in range(4):
            await kill_and_wait(fake, rt, sup, "a")
        assert (await restarts(sup, "a"))[-1].latency_s >= BACKOFF.base_s  # backing off
        await asyncio.sleep(5.0)  # a good run
        assert (await kill_and_wait(fake, rt, sup, "a")).latency_s < 0.05
        assert (await kill_and_wait(fake, rt, sup, "a")).latency_s < 0.05  # a first repeat
        assert (await kill_and_wait(fake, rt, sup, "a")).latency_s >= BACKOFF.base_s / 2

    run(scenario)


def test_independent_failures_in_a_row_each_heal_at_once() -> None:
    # The supervisor's history fills with many children's restarts: no child backs off for it.
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        children = [dedicated(f"d-{i}") for i in range(8)]
        sup = await rt.supervise(tree(*children))
        for spec in children:
            record = await kill_and_wait(fake, rt, sup, spec.agent_id)
            assert record.latency_s < 0.05, record
            await asyncio.sleep(0.2)
        assert len((await sup.status()).restarts) == 8

    run(scenario)


def test_the_agents_of_a_host_that_keeps_dying_restart_together_at_once() -> None:
    # One packed agent kills its host soon after every restart (here the test does, once the
    # pool's other host is back): its host-mates die with it each time, and none of them is held
    # back by a backoff; the supervisor counts one failure per host death and escalates past its
    # intensity.
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        sup = await rt.supervise(tree(packed("p-0"), packed("p-1"), packed("p-2"),
                                      intensity=Intensity(8, 60)))

        async def pool_whole() -> bool:
            return len(fake.names(f"{POOL_PREFIX}p.")) == 2
        for _ in range(8):
            await eventually(pool_whole)  # the pool's host that died last is started again
            host = await host_of(rt, "p-0")
            mates = [c for c in ("p-1", "p-2") if await host_of(rt, c) == host]
            before = {c: len(await restarts(sup, c)) for c in ("p-0", *mates)}
            fake.crash(host)

            async def all_back(before: dict[str, int] = before) -> list[RestartRecord] | None:
                done = [await restarts(sup, c) for c in before]
                if any(len(d) == before[c] for d, c in zip(done, before, strict=True)):
                    return None
                return [d[-1] for d in done]

            for record in await eventually(all_back, every_s=0.005):
                assert record.latency_s < 0.05, record
        assert (await sup.status()).state is SupervisorState.RUNNING
        fake.crash(await host_of(rt, "p-0"))  # the ninth host death in the period

        async def gave_up() -> bool:
            return (await sup.status()).state is SupervisorState.FAILED

        assert await eventually(gave_up)

    run(scenario)


def test_stopping_calls_off_a_restart_still_backing_off() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        sup = await rt.supervise(tree(dedicated("loop"), dedicated("other")))
        await loop_five_times(fake, rt, sup)
        fake.crash(await host_of(rt, "loop"))  # its restart now waits 0.8-1.6 s
        await asyncio.sleep(0.1)
        await sup.stop()
        await asyncio.sleep(BACKOFF.cap_s)
        spares = {h for hosts in (await rt.cluster.registry().spares()).values() for h in hosts}
        assert set(fake.names(OWN_HOST_PREFIX)) <= spares  # never started again, nor left running
        rec = await rt.cluster.registry().lookup("loop")
        assert rec is None or rec.status is not reach.AgentStatus.ONLINE

    run(scenario)


def test_processes_killed_in_one_moment_are_a_failure_each() -> None:
    # Two dedicated agents, each in a process of its own on one live node, killed in one moment
    # (two SIGKILLs, two OOM kills): their deaths are seen together, yet neither died of the
    # other's. Two failures, past an intensity of one.
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        sup = await rt.supervise(tree(dedicated("a"), dedicated("b"),
                                      intensity=Intensity(1, 60)))
        for host in [await host_of(rt, "a"), await host_of(rt, "b")]:
            fake.crash(host)

        async def gave_up() -> bool:
            return (await sup.status()).state is SupervisorState.FAILED

        assert await eventually(gave_up)

    run(scenario)


@pytest.mark.parametrize("declared", [False, True])
def test_the_agents_of_a_lost_node_are_one_failure(declared: bool) -> None:
    # Two dedicated agents on one node, each with a host of its own: the node's loss is one
    # failure, whether their processes turn unreachable first (Ray's health checks declare the
    # node dead seconds later) or the node was declared dead first.
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        on_b = reach.Dedicated(node_id="node-b")
        sup = await rt.supervise(tree(reach.ChildSpec(Worker, "a", placement=on_b),
                                      reach.ChildSpec(Worker, "b", placement=on_b),
                                      intensity=Intensity(1, 60)))
        registry = rt.cluster.registry()
        assert {(await registry.lookup(c)).node for c in ("a", "b")} == {"node-b"}
        fake.crash_node("node-b", declared=declared)

        async def both_back() -> bool:
            return {r.child for r in (await sup.status()).restarts} == {"a", "b"}

        assert await eventually(both_back)
        assert (await sup.status()).state is SupervisorState.RUNNING
        for agent_id in ("a", "b"):
            reply = await rt.client.request(agent_id, Ping(), timeout_ms=1_000)
            assert reply.value.by == agent_id

    run(scenario)
