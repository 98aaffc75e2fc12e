"""A pool's dead host is started again under its name, on the fake cluster and virtual time (each
new host taking 1 s to start), once the agents it held have moved to the pool's live hosts and a
short pause has passed: the new process's start keeps out of the way of the moves, whether one
host of the pool is left or more (a second death before it is up finds a warm spare)."""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel

import reach
from policies.supervision import Intensity
from reach import clock
from reach._runtime.pool_hosts import MOVES_WITHIN_S, REPLACE_AFTER_S
from reach.errors import AgentUnavailable
from reach.placement import POOL_PREFIX
from reach.testing import FakeCluster, eventually, run

START_S = 1.0
#: More than the moves of the dead host's agents take on the fake cluster (virtual seconds).
MOVES_S = 0.2


@reach.schema("poolback.ping@1.0")
class Ping(BaseModel):
    text: str = ""


class Worker(reach.Agent):
    capabilities = ("poolback.ping",)

    @reach.handler(Ping, returns=Ping)
    async def ping(self, ctx: reach.Context, m: Ping) -> Ping:
        return m


async def answering_again(rt: Any, host: str) -> None:
    """Waits until the (dead) pool host ``host`` answers again, started anew under its name."""
    async def answers() -> bool:
        try:
            await rt.cluster.host(host).count()
        except AgentUnavailable:
            return False
        return True

    assert await eventually(answers, within_s=30, every_s=0.01)


async def back_after(fake: FakeCluster, rt: Any, size: int) -> float:
    """Supervises four agents packed in a pool of ``size`` hosts, kills the first agent's host,
    and returns how long (virtual seconds) that host took to answer again."""
    children = [reach.ChildSpec(Worker, f"pb{size}-{i}",
                                placement=reach.Packed(pool=f"pb{size}", size=size))
                for i in range(4)]
    await rt.supervise(reach.SupervisorSpec(f"poolback-{size}", children=children,
                                            intensity=Intensity(100, 10), seed=1))
    rec = await rt.cluster.registry().lookup(f"pb{size}-0")
    assert rec is not None
    assert rec.host.startswith(POOL_PREFIX)
    dead = rec.host
    fake.crash(dead)
    killed = clock.monotonic()
    await answering_again(rt, dead)
    return clock.monotonic() - killed


def test_a_pool_left_with_one_host_starts_its_dead_host_again_once_its_agents_moved() -> None:
    async def scenario(fake: FakeCluster) -> float:
        return await back_after(fake, fake.runtime(), 2)

    took = run(scenario, host_start_s=START_S)
    assert START_S + REPLACE_AFTER_S <= took < START_S + 2 * REPLACE_AFTER_S + MOVES_S


def test_a_pool_left_with_two_hosts_starts_its_dead_host_again_after_a_pause() -> None:
    async def scenario(fake: FakeCluster) -> float:
        return await back_after(fake, fake.runtime(), 3)

    took = run(scenario, host_start_s=START_S)
    assert took >= START_S + REPLACE_AFTER_S


#: Agents whose next start takes as long as SLOW_S says (virtual seconds): their moves are under
#: way as long.
SLOW_S: dict[str, float] = {}


class SlowStarter(reach.Agent):
    capabilities = ("poolback.slow",)

    async def on_start(self) -> None:
        await asyncio.sleep(SLOW_S.get(self.id, 0.0))


async def back_after_moves(fake: FakeCluster, pool: str, start_s: float) -> tuple[float, bool]:
    """Supervises four agents packed in a pool of 2 hosts, kills the first agent's host, its
    agents' next starts taking ``start_s``; returns when the dead host answered again (virtual
    seconds after the kill), and whether its agents had all moved by then."""
    rt = fake.runtime()
    children = [reach.ChildSpec(SlowStarter, f"{pool}-{i}",
                                placement=reach.Packed(pool=pool, size=2)) for i in range(4)]
    await rt.supervise(reach.SupervisorSpec(pool, children=children,
                                            intensity=Intensity(100, 10), seed=1))
    rec = await rt.cluster.registry().lookup(f"{pool}-0")
    assert rec is not None
    dead = rec.host
    mates = [r.agent_id for r in await rt.cluster.registry().agents() if r.host == dead]
    SLOW_S.update(dict.fromkeys(mates, start_s))
    try:
        fake.crash(dead)
        killed = clock.monotonic()
        await answering_again(rt, dead)
        back = clock.monotonic() - killed
        found = [await rt.cluster.registry().lookup(a) for a in mates]
        return back, all(r is not None and r.host not in ("", dead) for r in found)
    finally:
        SLOW_S.clear()


def test_a_dead_pool_host_is_not_started_again_while_its_agents_are_still_moving() -> None:
    async def scenario(fake: FakeCluster) -> tuple[float, bool]:
        return await back_after_moves(fake, "slowpool", 1.0)

    back, moved = run(scenario, host_start_s=START_S)
    assert moved
    assert back >= 1.0 + REPLACE_AFTER_S + START_S


def test_a_dead_pool_host_whose_agents_never_finish_moving_is_started_again_all_the_same() -> None:
    async def scenario(fake: FakeCluster) -> tuple[float, bool]:
        return await back_after_moves(fake, "stuckpool", 3600.0)

    back, moved = run(scenario, host_start_s=START_S)
    assert not moved
    assert MOVES_WITHIN_S + REPLACE_AFTER_S + START_S <= back < 60
