"""A pool's dead host is started again under its name, on the fake cluster and virtual time (each
new host taking 1 s to start): at once when one host of its pool is left (a second death before
it is up would leave the pool's agents nowhere to go), after a short pause when more are left
(the new process's start then keeps out of the way of the agents moving to them)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

import reach
from policies.supervision import Intensity
from reach import clock
from reach._runtime.pool_hosts import REPLACE_AFTER_S
from reach.errors import AgentUnavailable
from reach.placement import POOL_PREFIX
from reach.testing import FakeCluster, eventually, run

START_S = 1.0


@reach.schema("poolback.ping@1.0")
class Ping(BaseModel):
    text: str = ""


class Worker(reach.Agent):
    capabilities = ("poolback.ping",)

    @reach.handler(Ping, returns=Ping)
    async def ping(self, ctx: reach.Context, m: Ping) -> Ping:
        return m


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

    async def answers() -> bool:
        try:
            await rt.cluster.host(dead).count()
        except AgentUnavailable:
            return False
        return True

    assert await eventually(answers, within_s=30, every_s=0.01)
    return clock.monotonic() - killed


def test_a_pool_left_with_one_host_starts_its_dead_host_again_at_once() -> None:
    async def scenario(fake: FakeCluster) -> float:
        return await back_after(fake, fake.runtime(), 2)

    took = run(scenario, host_start_s=START_S)
    assert START_S <= took < START_S + REPLACE_AFTER_S


def test_a_pool_left_with_two_hosts_starts_its_dead_host_again_after_a_pause() -> None:
    async def scenario(fake: FakeCluster) -> float:
        return await back_after(fake, fake.runtime(), 3)

    took = run(scenario, host_start_s=START_S)
    assert took >= START_S + REPLACE_AFTER_S
