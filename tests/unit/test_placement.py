"""Placements answer the spawner's four questions; a placement of one's own is a new class the
spawner and supervisors place, restart and record with no edit of theirs (on the fake cluster)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

import reach
from reach._runtime.names import REGISTRY_NAME
from reach._runtime.spawner import shape_key
from reach.placement import (
    HostGroup,
    HostNeeds,
    Placement,
    is_own_host,
    own_host_name,
    pool_host_name,
)
from reach.records import RestartPlacement
from reach.testing import FakeCluster, eventually, run


@reach.schema("place.ping@1.0")
class Ping(BaseModel):
    text: str = ""


class Pinger(reach.Agent):
    capabilities = ("place.ping",)

    @reach.handler(Ping, returns=Ping)
    async def ping(self, ctx: reach.Context, m: Ping) -> Ping:
        return Ping(text=self.id)


@dataclass(frozen=True)
class OneHost(Placement):
    """A third placement: every agent of ``name`` on one shared host."""

    name: str

    def host_needs(self) -> HostNeeds:
        return HostNeeds()

    def host_group(self) -> HostGroup:
        return HostGroup(f"one-{self.name}", (pool_host_name(f"one-{self.name}", 0),))

    def spare_key(self) -> None:
        return None

    def restarted_as(self) -> RestartPlacement:
        return RestartPlacement.PACKED


@dataclass(frozen=True)
class OwnNoSpare(Placement):
    """A fourth: a host of its own for each agent, and no warm spare for its restarts."""

    def host_needs(self) -> HostNeeds:
        return HostNeeds(num_cpus=1)

    def host_group(self) -> None:
        return None

    def spare_key(self) -> None:
        return None

    def restarted_as(self) -> RestartPlacement:
        return RestartPlacement.DEDICATED


def test_packed_names_its_pools_hosts_and_dedicated_has_hosts_of_its_own_with_spares() -> None:
    packed = reach.Packed(pool="p", size=3, node_id="n1")
    assert packed.host_group() == HostGroup("p", ("reach.pool.p.0", "reach.pool.p.1",
                                                  "reach.pool.p.2"))
    assert packed.host_needs() == HostNeeds(node_id="n1")
    assert packed.spare_key() is None
    assert packed.restarted_as() is RestartPlacement.PACKED
    dedicated = reach.Dedicated(num_cpus=2, resources={"gpu_box": 1}, node_id="n2")
    assert dedicated.host_group() is None
    assert dedicated.host_needs() == HostNeeds(2, None, None, {"gpu_box": 1}, "n2")
    assert dedicated.spare_key() == "cpus=2 gpus=None memory=None resources=gpu_box=1"
    assert dedicated.spare_key() == shape_key(dedicated)
    assert dedicated.restarted_as() is RestartPlacement.DEDICATED
    assert is_own_host(own_host_name())
    assert not is_own_host(pool_host_name("p", 0))


def test_host_needs_require_what_they_reserve_above_zero() -> None:
    needs = HostNeeds(num_cpus=0, num_gpus=1, memory=2 << 30, resources={"a": 1, "b": 0})
    assert needs.requirements() == {"GPU": 1.0, "memory": float(2 << 30), "a": 1.0}
    assert HostNeeds().requirements() == {}


def test_a_placement_of_ones_own_is_placed_restarted_and_recorded_as_it_says() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        sup = await rt.supervise(reach.SupervisorSpec("s", children=[
            reach.ChildSpec(Pinger, "o-1", placement=OneHost("x")),
            reach.ChildSpec(Pinger, "o-2", placement=OneHost("x"))]))
        registry = rt.cluster.registry()

        async def hosts() -> set[Any]:
            return {(await registry.lookup(a)).host for a in ("o-1", "o-2")}

        assert await hosts() == {"reach.pool.one-x.0"}
        fake.crash("reach.pool.one-x.0")
        for agent_id in ("o-1", "o-2"):
            reply = await rt.client.request(agent_id, Ping(), timeout_ms=10_000)
            assert reply.value == Ping(text=agent_id)
        assert await hosts() == {"reach.pool.one-x.0"}  # started again under its name
        restarts = (await sup.status()).restarts
        assert {r.child for r in restarts} == {"o-1", "o-2"}
        assert {r.placement for r in restarts} == {RestartPlacement.PACKED}

    run(scenario)


def test_a_placement_without_a_spare_key_restarts_on_a_new_host_without_claiming_a_spare(
        ) -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        sup = await rt.supervise(reach.SupervisorSpec("s", children=[
            reach.ChildSpec(Pinger, "d-1", placement=OwnNoSpare())]))
        registry = rt.cluster.registry()
        first = (await registry.lookup("d-1")).host
        assert is_own_host(first)
        fake.crash(first)

        async def moved() -> str | None:
            rec = await registry.lookup("d-1")
            return rec.host if rec is not None and rec.online and rec.host != first else None

        again = await eventually(moved)
        assert is_own_host(again)
        assert fake.calls[(REGISTRY_NAME, "claim_spare")] == 0
        assert fake.calls[(REGISTRY_NAME, "offer_spare")] == 0  # none kept for it either
        (restart,) = (await sup.status()).restarts
        assert restart.placement is RestartPlacement.DEDICATED

    run(scenario)
