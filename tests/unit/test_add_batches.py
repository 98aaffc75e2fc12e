"""Agents added to one host in the same turn of the event loop go in one call
(reach/_runtime/add_batches.py), on a stand-in host that records its calls, and on the fake
cluster: a pool host's death moves its agents to the live host in one call, and the agents of
one call start side by side (virtual time)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, cast

import pytest
from pydantic import BaseModel

import reach
from policies.supervision import Intensity
from reach import clock
from reach._runtime.add_batches import AddBatches
from reach.errors import AgentUnavailable, ConfigError
from reach.ports.hosts import CallLimits, HostPort, HostShape
from reach.records import AgentRecord
from reach.testing import FakeCluster, eventually, run


class One(reach.Agent):
    capabilities = ("batch.one",)


class Other(reach.Agent):
    capabilities = ("batch.other",)


class Host:
    """Records each add_agents call; fails those with an ID in ``refuse`` (nothing added), and
    every call once ``dead``."""

    def __init__(self, name: str = "h") -> None:
        self.name = name
        self.calls: list[tuple[type[reach.Agent], list[str], dict[str, int] | None]] = []
        self.refuse: set[str] = set()
        self.dead = False

    async def add_agents(  # noqa: PLR0917 - as HostPort.add_agents
        self, cls: type[reach.Agent], agent_ids: list[str], args: tuple[Any, ...],
        kwargs: dict[str, Any], epochs: dict[str, int] | None = None,
        priority: int | Mapping[str, int] | None = None,
    ) -> list[AgentRecord]:
        self.calls.append((cls, list(agent_ids), epochs))
        await asyncio.sleep(0)
        if self.dead:
            raise AgentUnavailable(f"host {self.name} is dead")
        refused = [a for a in agent_ids if a in self.refuse]
        if refused:
            raise ConfigError(f"{refused[0]} cannot start")
        return [AgentRecord(a, host=self.name, epoch=(epochs or {}).get(a, 0))
                for a in agent_ids]


def adding(batches: AddBatches, host: Host, cls: type[reach.Agent], agent_id: str, *,
           args: tuple[Any, ...] = (), epoch: int | None = None,
           ) -> asyncio.Future[list[AgentRecord]]:
    return asyncio.ensure_future(batches.add(
        cast(HostPort, host), cls, agent_id, args=args, kwargs={},
        epochs=None if epoch is None else {agent_id: epoch}, priority=None))


def test_agents_added_to_one_host_in_one_turn_go_in_one_call_each_with_its_epoch() -> None:
    async def scenario() -> None:
        batches, host = AddBatches(), Host()
        added = await asyncio.gather(*(adding(batches, host, One, f"a{i}", epoch=i + 1)
                                       for i in range(4)))
        assert host.calls == [(One, ["a0", "a1", "a2", "a3"],
                               {"a0": 1, "a1": 2, "a2": 3, "a3": 4})]
        assert [(r.agent_id, r.epoch) for (r,) in added] == [
            ("a0", 1), ("a1", 2), ("a2", 3), ("a3", 4)]

    asyncio.run(scenario())


def test_agents_of_other_classes_arguments_or_hosts_go_in_calls_of_their_own() -> None:
    async def scenario() -> None:
        batches, host, elsewhere = AddBatches(), Host("h"), Host("g")
        await asyncio.gather(adding(batches, host, One, "a"), adding(batches, host, Other, "b"),
                             adding(batches, host, One, "c", args=(1,)),
                             adding(batches, elsewhere, One, "d"),
                             adding(batches, host, One, "e"))
        assert [ids for _, ids, _ in host.calls] == [["a", "e"], ["b"], ["c"]]
        assert [ids for _, ids, _ in elsewhere.calls] == [["d"]]

    asyncio.run(scenario())


def test_an_agent_that_fails_in_a_batch_fails_alone_and_the_others_are_added() -> None:
    async def scenario() -> None:
        batches, host = AddBatches(), Host()
        host.refuse.add("bad")
        results = await asyncio.gather(adding(batches, host, One, "a"),
                                       adding(batches, host, One, "bad"),
                                       adding(batches, host, One, "b"), return_exceptions=True)
        assert [ids for _, ids, _ in host.calls] == [["a", "bad", "b"], ["a"], ["bad"], ["b"]]
        assert isinstance(results[1], ConfigError)
        assert [r[0].agent_id for r in (results[0], results[2])
                if isinstance(r, list)] == ["a", "b"]

    asyncio.run(scenario())


def test_a_dead_host_fails_every_agent_of_its_batch_without_trying_them_one_by_one() -> None:
    async def scenario() -> None:
        batches, host = AddBatches(), Host()
        host.dead = True
        results = await asyncio.gather(adding(batches, host, One, "a"),
                                       adding(batches, host, One, "b"), return_exceptions=True)
        assert all(isinstance(r, AgentUnavailable) for r in results)
        assert len(host.calls) == 1

    asyncio.run(scenario())


def test_an_agent_added_in_a_later_turn_goes_in_a_call_of_its_own() -> None:
    async def scenario() -> None:
        batches, host = AddBatches(), Host()
        await adding(batches, host, One, "a")
        await adding(batches, host, One, "b")
        assert [ids for _, ids, _ in host.calls] == [["a"], ["b"]]

    asyncio.run(scenario())


@reach.schema("batch.ping@1.0")
class Ping(BaseModel):
    n: int = 0


class Pooled(reach.Agent):
    capabilities = ("batch.pooled",)

    @reach.handler(Ping, returns=Ping)
    async def ping(self, ctx: reach.Context, p: Ping) -> Ping:
        return p


def test_a_dead_pool_hosts_agents_move_to_the_live_host_in_one_call() -> None:
    async def scenario(fake: FakeCluster) -> tuple[list[list[str]], list[str]]:
        rt = fake.runtime()
        children = [reach.ChildSpec(Pooled, f"pooled-{i}",
                                    placement=reach.Packed(pool="batchpool", size=2))
                    for i in range(6)]
        await rt.supervise(reach.SupervisorSpec("batchpool", children=children,
                                                intensity=Intensity(100, 10), seed=1))
        rec = await rt.cluster.registry().lookup("pooled-0")
        assert rec is not None
        mates = sorted(r.agent_id for r in await rt.cluster.registry().agents()
                       if r.host == rec.host)
        assert len(mates) > 1
        live = next(h for h in ("reach.pool.batchpool.0", "reach.pool.batchpool.1")
                    if h != rec.host)
        calls: list[list[str]] = []
        port = rt.cluster.host(live)
        original = type(port).add_agents

        def counted(self: Any, cls: Any, agent_ids: list[str], *a: Any, **k: Any) -> Any:
            if self.name == live:
                calls.append(sorted(agent_ids))
            return original(self, cls, agent_ids, *a, **k)

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(type(port), "add_agents", counted)
            fake.crash(rec.host)

            async def moved() -> bool:
                found = [await rt.cluster.registry().lookup(a) for a in mates]
                return all(r is not None and r.host == live and r.epoch > 0 for r in found)

            assert await eventually(moved, within_s=10, every_s=0.01)
        for agent in mates:
            assert (await rt.client.request(agent, Ping(n=1), returns=Ping)).value.n == 1
        return [c for c in calls if set(c) & set(mates)], mates

    calls, mates = run(scenario)
    assert calls == [mates]


#: How long each SlowStart agent's on_start takes (virtual seconds), and the agent that fails.
START_S = 1.0
FAILS = "slow-bad"


class SlowStart(reach.Agent):
    capabilities = ("batch.slow",)

    async def on_start(self) -> None:
        await asyncio.sleep(START_S)
        if self.id == FAILS:
            raise ConfigError(f"{self.id} cannot start")


def test_agents_added_by_one_call_start_side_by_side() -> None:
    async def scenario(fake: FakeCluster) -> float:
        host = fake.start_host("reach.pool.slow.0", HostShape(lasting=True), CallLimits())
        began = clock.monotonic()
        added = await host.add_agents(SlowStart, ["slow-1", "slow-2", "slow-3"], (), {})
        assert [r.agent_id for r in added] == ["slow-1", "slow-2", "slow-3"]
        return clock.monotonic() - began

    assert run(scenario) < 2 * START_S


def test_a_call_one_of_whose_agents_fails_to_start_adds_none_of_them() -> None:
    async def scenario(fake: FakeCluster) -> None:
        host = fake.start_host("reach.pool.slow.0", HostShape(lasting=True), CallLimits())
        with pytest.raises(ConfigError):
            await host.add_agents(SlowStart, ["slow-1", FAILS, "slow-3"], (), {})
        for agent_id in ("slow-1", FAILS, "slow-3"):
            assert await fake.registry().lookup(agent_id) is None
        assert await host.count() == 0

    run(scenario)
