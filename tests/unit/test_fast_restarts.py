"""Healing without waiting for a new process, on the fake cluster: packed agents move to their
pool's live hosts, a dead pool host is started again in the background, a restarted supervisor
replaces its orphans, and epochs never go backwards, not even after the registry restarted."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

import reach
from policies.supervision import Intensity
from reach import clock
from reach._runtime.names import POOL_PREFIX, REGISTRY_NAME
from reach.records import AgentStatus, RestartPlacement
from reach.testing import FakeCluster, eventually, run


@reach.schema("heal.ping@1.0")
class Ping(BaseModel):
    text: str = ""


@reach.schema("heal.pong@1.0")
class Pong(BaseModel):
    by: str
    host: str


class Node(reach.Agent):
    """Says which host it runs on."""

    capabilities = ("heal.ping",)

    @reach.handler(Ping, returns=Pong)
    async def ping(self, ctx: reach.Context, m: Ping) -> Pong:
        return Pong(by=self.id, host=self._reach_host)  # type: ignore[attr-defined]

    async def on_start(self) -> None:
        self._reach_host = ""


def pool(name: str = "p") -> reach.Packed:
    return reach.Packed(pool=name, size=2)


async def host_of(rt: Any, agent_id: str) -> str:
    rec = await rt.cluster.registry().lookup(agent_id)
    assert rec is not None
    return str(rec.host)



def test_a_packed_agent_moves_to_a_live_host_of_its_pool_at_once() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        sup = await rt.supervise(reach.SupervisorSpec("s", children=[
            reach.ChildSpec(Node, "n-1", placement=pool()),
            reach.ChildSpec(Node, "n-2", placement=pool())]))
        dead = await host_of(rt, "n-1")
        fake.crash(dead)
        killed = clock.monotonic()
        reply = await rt.client.request("n-1", Ping(), timeout_ms=10_000)
        assert reply.value.by == "n-1"
        waited = clock.monotonic() - killed
        assert waited < 0.5  # no waiting for a new process: fake hosts start in no time anyway
        (restart,) = (await sup.status()).restarts
        assert restart.placement is RestartPlacement.PACKED
        assert restart.latency_s < 0.1  # detection, plan and re-adding; no backoff the first time
        assert await host_of(rt, "n-1") != dead or dead in fake.names(POOL_PREFIX)

        async def replaced() -> bool:  # the dead host comes back, empty, under its name
            return dead in fake.names(POOL_PREFIX)

        assert await eventually(replaced)

    run(scenario)


def test_a_pool_whose_hosts_are_all_dead_waits_for_their_replacements() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        await rt.supervise(reach.SupervisorSpec("s", intensity=Intensity(5, 10), children=[
            reach.ChildSpec(Node, "n-1", placement=pool()),
            reach.ChildSpec(Node, "n-2", placement=pool())]))
        for name in fake.names(f"{POOL_PREFIX}p."):
            fake.crash(name)
        for agent_id in ("n-1", "n-2"):
            reply = await rt.client.request(agent_id, Ping(), timeout_ms=10_000)
            assert reply.value.by == agent_id
        assert fake.names(f"{POOL_PREFIX}p.") == ["reach.pool.p.0", "reach.pool.p.1"]

    run(scenario)


def test_a_restarted_supervisor_replaces_the_orphans_of_its_previous_incarnation() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        root = await rt.supervise(reach.SupervisorSpec("root", children=[
            reach.SupervisorSpec("inner", children=[
                reach.ChildSpec(Node, "n-1", placement=pool())])]))
        before = await rt.cluster.registry().lookup("n-1")
        fake.crash("reach.sup.inner")  # its agent lives on, an orphan on its pool host

        async def restarted() -> bool:
            return [r.child for r in (await root.status()).restarts] == ["inner"]

        assert await eventually(restarted)
        after = await rt.cluster.registry().lookup("n-1")
        assert after.status is AgentStatus.ONLINE
        assert after.epoch > before.epoch
        assert (await rt.client.request("n-1", Ping())).value.by == "n-1"

    run(scenario)


def test_epochs_never_go_backwards_across_a_registry_restart() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        sup = await rt.supervise(reach.SupervisorSpec("s", intensity=Intensity(10, 60),
                                                      children=[reach.ChildSpec(Node, "n-1")]))
        for _ in range(3):  # epoch 4 by now
            fake.crash(await host_of(rt, "n-1"))

            async def back(n: int = len((await sup.status()).restarts) + 1) -> bool:
                return len((await sup.status()).restarts) == n

            assert await eventually(back)
        old = (await rt.cluster.registry().lookup("n-1")).epoch
        assert old == 4
        # The registry restarts (forgetting every epoch) and the agent dies with it.
        host = await host_of(rt, "n-1")
        fake.crash(REGISTRY_NAME)
        fake.crash(host)

        async def reborn() -> Any:
            rec = await rt.cluster.registry().lookup("n-1")
            return rec is not None and rec.status is AgentStatus.ONLINE and rec

        rec = await eventually(reborn)
        assert rec.epoch > old
        assert (await rt.client.request("n-1", Ping(), timeout_ms=10_000)).value.by == "n-1"

    run(scenario)


def test_a_cached_route_of_an_older_incarnation_does_not_win_over_the_new_one() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        await rt.supervise(reach.SupervisorSpec("s", intensity=Intensity(10, 60), children=[
            reach.ChildSpec(Node, "n-1", placement=pool("a")),
            reach.ChildSpec(Node, "n-2", placement=pool("a"))]))
        await rt.client.request_capability("heal.ping", Ping())  # routes learnt by discovery
        old = await rt.cluster.registry().lookup("n-1")
        fake.crash(REGISTRY_NAME)
        fake.crash(old.host)  # n-1 (and maybe n-2) restart while the registry rebuilds

        async def reborn() -> Any:
            rec = await rt.cluster.registry().lookup("n-1")
            return rec is not None and rec.status is AgentStatus.ONLINE and rec.host != old.host \
                and rec

        new = await eventually(reborn)
        assert new.epoch > old.epoch
        assert (await rt.client.request("n-1", Ping(), timeout_ms=10_000)).value.by == "n-1"
        rt.directory.learn(old)  # a stale answer naming the old incarnation comes in late
        assert await rt.directory.route("n-1") == new.host
        assert (await rt.client.request("n-1", Ping(), timeout_ms=10_000)).value.by == "n-1"

    run(scenario)


def test_a_dedicated_agents_restart_takes_a_warm_spare_and_a_new_spare_takes_its_place() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        sup = await rt.supervise(reach.SupervisorSpec("s", children=[
            reach.ChildSpec(Node, "n-1")]))

        async def offered() -> list[str]:
            return [h for hosts in (await rt.cluster.registry().spares()).values()
                    for h in hosts]

        (spare,) = await eventually(offered)
        fake.crash(await host_of(rt, "n-1"))
        reply = await rt.client.request("n-1", Ping(), timeout_ms=10_000)
        assert reply.value.by == "n-1"
        assert await host_of(rt, "n-1") == spare  # no new process was waited for
        (restart,) = (await sup.status()).restarts
        assert restart.placement is RestartPlacement.DEDICATED

        async def refilled() -> list[str]:
            return [h for h in await offered() if h != spare]

        assert await eventually(refilled)

    run(scenario)


def test_without_spares_a_dedicated_restart_starts_a_new_host() -> None:
    from reach.ports.hosts import CallLimits

    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime(CallLimits(spares=0))
        await rt.supervise(reach.SupervisorSpec("s", children=[reach.ChildSpec(Node, "n-1")]))
        dead = await host_of(rt, "n-1")
        fake.crash(dead)
        assert (await rt.client.request("n-1", Ping(), timeout_ms=10_000)).value.by == "n-1"
        assert await host_of(rt, "n-1") != dead
        assert await rt.cluster.registry().spares() == {}

    run(scenario)


def test_a_packed_restart_goes_to_the_other_host_without_asking_the_pool_first() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        sup = await rt.supervise(reach.SupervisorSpec("s", children=[
            reach.ChildSpec(Node, "n-1", placement=pool())]))
        dead = await host_of(rt, "n-1")
        (other,) = [h for h in fake.names(f"{POOL_PREFIX}p.") if h != dead]

        async def preloaded() -> bool:  # the pool's other host holds the class ahead
            return fake.calls[(other, "preload")] == 1

        assert await eventually(preloaded)
        asked = fake.calls[(other, "count")]
        fake.crash(dead)
        assert (await rt.client.request("n-1", Ping(), timeout_ms=10_000)).value.by == "n-1"
        assert await host_of(rt, "n-1") == other
        assert fake.calls[(other, "count")] == asked  # its count, as last seen, was enough
        (restart,) = (await sup.status()).restarts
        assert restart.placement is RestartPlacement.PACKED

        async def replaced() -> bool:  # the dead one is started again, with the class loaded
            return dead in fake.names(POOL_PREFIX) and fake.calls[(dead, "preload")] >= 1

        assert await eventually(replaced)

    run(scenario)


def test_a_packed_restart_whose_other_host_is_dead_too_asks_the_pool_and_waits() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        await rt.supervise(reach.SupervisorSpec("s", intensity=Intensity(5, 10), children=[
            reach.ChildSpec(Node, "n-1", placement=pool())]))
        for name in fake.names(f"{POOL_PREFIX}p."):
            fake.crash(name)  # the host it died with, and the one it would move to
        assert (await rt.client.request("n-1", Ping(), timeout_ms=10_000)).value.by == "n-1"
        assert await host_of(rt, "n-1") in fake.names(f"{POOL_PREFIX}p.")

    run(scenario)


def test_agents_of_one_host_dying_together_are_one_failure_of_the_intensity() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        one_host = reach.Packed(pool="one", size=1)
        sup = await rt.supervise(reach.SupervisorSpec("s", intensity=Intensity(1, 60), children=[
            reach.ChildSpec(Node, "n-1", placement=one_host),
            reach.ChildSpec(Node, "n-2", placement=one_host)]))
        fake.crash(f"{POOL_PREFIX}one.0")
        for agent_id in ("n-1", "n-2"):
            reply = await rt.client.request(agent_id, Ping(), timeout_ms=10_000)
            assert reply.value.by == agent_id
        status = await sup.status()
        assert status.state is reach.SupervisorState.RUNNING  # one restart: within 1 in 60 s
        assert sorted(r.child for r in status.restarts) == ["n-1", "n-2"]

    run(scenario)


async def holds(host: Any, cls: type[reach.Agent]) -> bool:
    """Whether a host already holds ``cls``: offering it again keeps no more classes."""
    before = await host.preload([])
    return bool(before) and await host.preload([cls]) == before


def test_a_spare_holds_the_class_of_the_agent_it_would_take_over() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        await rt.supervise(reach.SupervisorSpec("s", children=[reach.ChildSpec(Node, "n-1")]))

        async def holding_spare() -> list[str]:
            offered = await rt.cluster.registry().spares()
            return [h for hosts in offered.values() for h in hosts
                    if await holds(rt.cluster.host(h), Node)]

        assert await eventually(holding_spare)

    run(scenario)


def test_a_new_host_fetches_its_acl_once_ahead_of_its_first_agent() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        await rt.spawn(Node, "n-1", placement=pool("acl"))
        for name in fake.names(f"{POOL_PREFIX}acl."):
            assert fake.calls[(name, "count")] >= 1
        fetched = fake.calls[(REGISTRY_NAME, "acl")]
        assert fetched == 2  # one per host, the host given n-1 included: not twice for it

    run(scenario)
