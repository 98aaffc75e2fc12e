"""Warm spares keep up with restarts that come faster than one spare is replaced, on the fake
cluster and virtual time, each new host taking 2 s to start: the pool grows with the claims of
the last window (a claim that found none too), never past ``max_spares``, and shrinks back to
``spares`` after a quiet period, its extra hosts ending their own processes."""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel

import reach
from policies.spares import SpareSizing
from policies.supervision import Intensity
from reach._runtime.spawner import shape_key
from reach.placement import OWN_HOST_PREFIX
from reach.ports.hosts import CallLimits
from reach.testing import FakeCluster, eventually, run

#: Each new host takes this long to start: a taken spare's replacement is offered only after the
#: top-up's half-second pause plus this.
START_S = 2.0
LIMITS = CallLimits(spares=1, max_spares=4)
QUIET_S = SpareSizing().quiet_s


@reach.schema("keepup.ping@1.0")
class Ping(BaseModel):
    text: str = ""


@reach.schema("keepup.pong@1.0")
class Pong(BaseModel):
    by: str


class Worker(reach.Agent):
    capabilities = ("keepup.ping",)

    @reach.handler(Ping, returns=Pong)
    async def ping(self, ctx: reach.Context, m: Ping) -> Pong:
        return Pong(by=self.id)


def ids(n: int) -> list[str]:
    return [f"w-{i}" for i in range(n)]


async def supervised(fake: FakeCluster, n: int) -> Any:
    rt = fake.runtime(LIMITS)
    await rt.supervise(reach.SupervisorSpec(
        "keepup", children=[reach.ChildSpec(Worker, a) for a in ids(n)],
        intensity=Intensity(1000, 10), seed=1))
    return rt


async def offered(rt: Any) -> list[str]:
    return [h for hosts in (await rt.cluster.registry().spares()).values() for h in hosts]


async def spares_stats(rt: Any) -> Any:
    return (await rt.cluster.registry().stats())["spares"]


async def host_of(rt: Any, agent_id: str) -> str:
    rec = await rt.cluster.registry().lookup(agent_id)
    assert rec is not None
    return str(rec.host)


async def at_least(rt: Any, count: int) -> list[str]:
    async def enough() -> list[str] | None:
        now = await offered(rt)
        return now if len(now) >= count else None

    found: list[str] = await eventually(enough)
    return found


async def crash_each(fake: FakeCluster, rt: Any, agents: list[str], every_s: float) -> list[str]:
    """Crashes the agents' hosts ``every_s`` apart, not waiting for their returns, then waits
    for each to answer again; the hosts they came back on."""
    for i, agent in enumerate(agents):
        if i:
            await asyncio.sleep(every_s)
        fake.crash(await host_of(rt, agent))
    for agent in agents:
        reply = await rt.client.request(agent, Ping(), timeout_ms=30_000)
        assert reply.value.by == agent
    return [await host_of(rt, a) for a in agents]


def spare_processes(fake: FakeCluster, agents: int) -> int:
    """The hosts of their own that hold no agent: spares, offered or starting."""
    return len(fake.names(OWN_HOST_PREFIX)) - agents


def test_restarts_faster_than_one_replacement_take_spares_once_the_pool_has_grown() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = await supervised(fake, 6)
        await at_least(rt, 1)
        await crash_each(fake, rt, ["w-0"], 0)  # one claim: the pool grows to two

        ready = await at_least(rt, 2)
        back = await crash_each(fake, rt, ["w-1", "w-2"], 0.5)
        assert set(back) <= set(ready)  # both took a spare started ahead

        ready = await at_least(rt, 4)  # three claims in the window: the bound
        back = await crash_each(fake, rt, ["w-3", "w-4", "w-5", "w-0"], 0.5)
        assert set(back) <= set(ready)  # four restarts in 1.5 s, a replacement takes 2.5 s
        stats = await spares_stats(rt)
        assert (stats["taken"], stats["missed"]) == (7, 0)
        assert stats["start_p50_s"] == START_S

    run(scenario, host_start_s=START_S)


def test_a_restart_that_found_no_spare_grows_the_pool_all_the_same() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = await supervised(fake, 3)
        (spare,) = await at_least(rt, 1)
        back = await crash_each(fake, rt, ["w-0", "w-1"], 0.1)
        assert back[0] == spare
        assert back[1] != spare  # the second found none: a new process, started cold
        assert (await spares_stats(rt))["missed"] == 1
        # Two claims in the window: spares plus two, the cold start's claim among them.
        assert len(await at_least(rt, 3)) == 3
        await asyncio.sleep(START_S * 2)
        assert len(await offered(rt)) == 3
        assert spare_processes(fake, 3) == 3

    run(scenario, host_start_s=START_S)


def test_a_long_burst_never_keeps_more_spares_than_the_bound() -> None:
    async def scenario(fake: FakeCluster) -> None:
        agents = ids(6)
        rt = await supervised(fake, len(agents))
        await at_least(rt, 1)
        most = 0
        for round_ in range(4):
            for agent in agents[round_ % 2::2]:  # never the same child twice in a row
                fake.crash(await host_of(rt, agent))
                for _ in range(5):
                    await asyncio.sleep(0.1)
                    stats = await spares_stats(rt)
                    most = max(most, stats["offered"] + stats["starting"],
                               spare_processes(fake, len(agents)))
        for agent in agents:
            await rt.client.request(agent, Ping(), timeout_ms=30_000)
        assert most == LIMITS.max_spares
        assert spare_processes(fake, len(agents)) <= LIMITS.max_spares

    run(scenario, host_start_s=START_S)


def test_extra_spares_retire_after_a_quiet_period_and_end_their_processes() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = await supervised(fake, 4)
        await at_least(rt, 1)
        await crash_each(fake, rt, ["w-0", "w-1", "w-2"], 0.5)
        await at_least(rt, 4)
        await asyncio.sleep(QUIET_S / 2)
        assert len(await offered(rt)) == 4  # not yet quiet: they stay
        assert spare_processes(fake, 4) == 4

        async def back_to_spares() -> bool:
            return len(await offered(rt)) == 1 and spare_processes(fake, 4) == 1

        await eventually(back_to_spares, within_s=QUIET_S)
        assert (await spares_stats(rt))["retired"] == 3
        # The one kept still takes the next restart.
        (spare,) = await offered(rt)
        assert await crash_each(fake, rt, ["w-3"], 0) == [spare]

    run(scenario, host_start_s=START_S)


def test_spares_are_started_on_the_node_they_are_for_though_they_reserve_nothing() -> None:
    # A host that reserves nothing goes to any node unless its affinity is strict: a pool
    # topped up for one node whose spares landed on another would leave the first without any
    # (and a quiet node retires the spares beyond its own need).
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime(LIMITS)
        bare = reach.Dedicated(num_cpus=0)
        started = await rt.spawner.top_up(bare, "node-b")
        assert len(started) == 1

        async def on_b() -> list[str] | None:
            places = await rt.cluster.registry().spares()
            return places.get(f"node-b {shape_key(bare)}") or None

        assert await eventually(on_b) == [started[0].name]

    run(scenario)
