"""A pool whose hosts are all dead takes a warm spare for its agents, on the fake cluster and
virtual time (each new host taking 1 s to start): the agents of its last host restart on the
spare at once instead of waiting for the pool's hosts to be started again; one spare for all of
them, not offered again, the spares topped up after it; when the spare dies in its turn its
agents move to the pool's hosts, by then started again. Without a spare the pool waits as it
always did. A spare that holds several of a pool's agents outlives every one of them stopped but
the last, whoever stops them (a driver or a supervisor)."""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel

import reach
from actors.agent_children import AgentChildren
from policies.supervision import Intensity
from reach import clock
from reach._runtime.names import supervisor_name
from reach.errors import AgentUnavailable
from reach.placement import OWN_HOST_PREFIX, POOL_PREFIX
from reach.testing import FakeCluster, eventually, run

START_S = 1.0
#: The pause between the two hosts' deaths: the first one's replacement is still starting.
BETWEEN_S = 0.1
AGENTS = [f"ps-{i}" for i in range(4)]


@reach.schema("poolspare.ping@1.0")
class Ping(BaseModel):
    text: str = ""


@reach.schema("poolspare.pong@1.0")
class Pong(BaseModel):
    by: str


class Worker(reach.Agent):
    capabilities = ("poolspare.ping",)

    @reach.handler(Ping, returns=Pong)
    async def ping(self, ctx: reach.Context, m: Ping) -> Pong:
        return Pong(by=self.id)


def packed(pool: str = "ps") -> reach.Packed:
    return reach.Packed(pool=pool, size=2)


async def host_of(rt: Any, agent_id: str) -> str:
    rec = await rt.cluster.registry().lookup(agent_id)
    assert rec is not None
    assert rec.host
    return str(rec.host)


async def hosts_of(rt: Any, agents: list[str]) -> set[str]:
    return {await host_of(rt, a) for a in agents}


async def offered(rt: Any) -> list[str]:
    return [h for hosts in (await rt.cluster.registry().spares()).values() for h in hosts]


async def spares_stats(rt: Any) -> Any:
    return (await rt.cluster.registry().stats())["spares"]


async def a_spare(rt: Any) -> str:
    """Starts a warm spare of the default shape (that of a Packed pool's hosts) and waits until
    it is offered; its name."""
    (host,) = await rt.spawner.top_up(reach.Dedicated(), "node-a")

    async def ready() -> bool:
        return host.name in await offered(rt)

    await eventually(ready, within_s=10)
    return str(host.name)


async def answering(rt: Any, agents: list[str]) -> None:
    for agent in agents:
        reply = await rt.client.request(agent, Ping(), timeout_ms=30_000)
        assert reply.value.by == agent


async def supervised(fake: FakeCluster) -> tuple[Any, reach.SupervisorRef]:
    rt = fake.runtime()
    sup = await rt.supervise(reach.SupervisorSpec(
        "poolspare", children=[reach.ChildSpec(Worker, a, placement=packed()) for a in AGENTS],
        intensity=Intensity(100, 10), seed=1))
    return rt, sup


async def restarted(sup: reach.SupervisorRef, before: int, count: int = len(AGENTS)) -> None:
    """Waits until the supervisor has made ``count`` restarts more than ``before``."""
    async def all_of_them() -> bool:
        return len((await sup.status()).restarts) >= before + count

    await eventually(all_of_them, every_s=0.005)


async def both_hosts_die(fake: FakeCluster, rt: Any, sup: reach.SupervisorRef) -> float:
    """Kills the pool's two hosts one after the other (the first one's replacement is still
    starting when the second dies) and waits until every agent answers again; how long that
    took after the second death (virtual seconds)."""
    first = await host_of(rt, AGENTS[0])
    on_first = [a for a in AGENTS if await host_of(rt, a) == first]
    before = len((await sup.status()).restarts)
    fake.crash(first)
    await restarted(sup, before, len(on_first))
    await answering(rt, AGENTS)
    await asyncio.sleep(BETWEEN_S)
    (second,) = await hosts_of(rt, AGENTS)  # all four on the pool's last live host
    assert second != first
    before = len((await sup.status()).restarts)
    fake.crash(second)
    killed = clock.monotonic()
    await restarted(sup, before)
    await answering(rt, AGENTS)
    return clock.monotonic() - killed


async def pool_whole(fake: FakeCluster, rt: Any, pool: str = "ps") -> None:
    """Waits until both hosts of the pool answer again."""
    async def both() -> bool:
        try:
            for i in range(2):
                await rt.cluster.host(f"{POOL_PREFIX}{pool}.{i}").count()
        except AgentUnavailable:
            return False
        return True

    await eventually(both, within_s=10, every_s=0.01)


def test_the_agents_of_a_pools_last_host_restart_at_once_on_a_warm_spare() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt, sup = await supervised(fake)
        spare = await a_spare(rt)
        took = await both_hosts_die(fake, rt, sup)
        assert took < START_S / 10  # not waiting for the first host's replacement
        assert await hosts_of(rt, AGENTS) == {spare}  # one spare for all four
        assert spare not in await offered(rt)
        stats = await spares_stats(rt)
        assert (stats["taken"], stats["missed"]) == (1, 0)

        async def topped_up() -> list[str]:  # another spare, started after the claim
            return [h for h in await offered(rt) if h != spare]

        assert await eventually(topped_up, within_s=5)

    run(scenario, host_start_s=START_S)


def test_without_a_spare_a_pool_whose_hosts_are_all_dead_waits_for_them() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt, sup = await supervised(fake)
        took = await both_hosts_die(fake, rt, sup)
        assert took >= START_S - 2 * BETWEEN_S  # the first host's replacement, started at once
        assert all(h.startswith(POOL_PREFIX) for h in await hosts_of(rt, AGENTS))
        assert (await spares_stats(rt))["missed"] == 1  # one claim for the four agents

    run(scenario, host_start_s=START_S)


def test_the_agents_of_a_taken_spare_that_dies_move_to_the_pools_hosts_started_again() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt, sup = await supervised(fake)
        spare = await a_spare(rt)
        await both_hosts_die(fake, rt, sup)
        await pool_whole(fake, rt)
        before = len((await sup.status()).restarts)
        fake.crash(spare)
        killed = clock.monotonic()
        await restarted(sup, before)
        await answering(rt, AGENTS)
        assert clock.monotonic() - killed < START_S / 10
        back = await hosts_of(rt, AGENTS)
        assert back == {f"{POOL_PREFIX}ps.0", f"{POOL_PREFIX}ps.1"}  # spread, least loaded
        assert spare not in fake.names(OWN_HOST_PREFIX)  # never started again
        await sup.stop()

    run(scenario, host_start_s=START_S)


def test_a_supervisor_stopped_ends_the_spare_its_pool_took_with_its_last_agent() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt, sup = await supervised(fake)
        spare = await a_spare(rt)
        await both_hosts_die(fake, rt, sup)
        await sup.stop()
        assert spare not in fake.names(OWN_HOST_PREFIX)

    run(scenario, host_start_s=START_S)


async def two_on_a_spare(fake: FakeCluster, rt: Any) -> str:
    """Spawns agents "a" and "b" in a pool whose hosts are all dead, with a spare offered:
    both go to the spare; its name."""
    spare = await a_spare(rt)
    await rt.spawn(Worker, "seed", placement=packed("st"))  # the pool's hosts, started
    for i in range(2):
        fake.crash(f"{POOL_PREFIX}st.{i}")
    await rt.spawn_many(Worker, ["a", "b"], placement=packed("st"))
    assert await hosts_of(rt, ["a", "b"]) == {spare}
    return spare


def test_stopping_one_of_two_agents_on_a_taken_spare_leaves_the_other_answering() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        spare = await two_on_a_spare(fake, rt)
        await rt.stop("a")
        assert spare in fake.names(OWN_HOST_PREFIX)
        await answering(rt, ["b"])
        await rt.stop("b")  # the last: the host ends with it
        assert spare not in fake.names(OWN_HOST_PREFIX)

    run(scenario)


def test_a_supervisor_evicting_one_of_two_agents_on_a_taken_spare_leaves_the_other() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        spare = await two_on_a_spare(fake, rt)
        children = AgentChildren(supervisor_name("st"), fake, rt.cluster.registry(),
                                 rt.spawner, None)
        await children.evict("a", spare, 1.0)
        assert spare in fake.names(OWN_HOST_PREFIX)
        assert await rt.cluster.registry().lookup("a") is None
        await answering(rt, ["b"])
        await children.evict("b", spare, 1.0)
        assert spare not in fake.names(OWN_HOST_PREFIX)

    run(scenario)


def test_a_dedicated_agents_host_still_ends_with_it() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        rec = await rt.spawn(Worker, "d")
        assert rec.host.startswith(OWN_HOST_PREFIX)
        await rt.stop("d")
        assert rec.host not in fake.names(OWN_HOST_PREFIX)

    run(scenario)
