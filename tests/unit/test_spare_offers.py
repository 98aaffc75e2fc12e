"""The registry's warm spares: a host that was given an agent is never offered again, even when
its last offer crossed the claim that took it (it would be handed out a second time, with the
agent it holds); top-ups count the spares they asked for until these offer themselves, and a
spare beyond what the claims want is told to retire once they have stopped."""

from __future__ import annotations

import asyncio

from policies.spares import SpareSizing
from reach._runtime.names import REGISTRY_NAME
from reach.security.guard import signed_call
from reach.testing import FakeCluster, run

SPARE = "reach.host.spare-1"


def entry(agent_id: str) -> dict[str, object]:
    return {"agent_id": agent_id, "capabilities": ["x.y"], "description": "", "host": SPARE,
            "node": "node-a", "epoch": 0}


async def offer(fake: FakeCluster) -> None:
    data, sig = signed_call(fake.guard(), SPARE, ["node-a", "default"])
    await fake.process(REGISTRY_NAME).offer_spare(SPARE, data, sig)


def test_an_offer_that_crossed_its_claim_is_withdrawn_when_the_host_registers_its_agent() -> None:
    async def scenario(fake: FakeCluster) -> None:
        registry = fake.process(REGISTRY_NAME)
        await offer(fake)
        assert await registry.claim_spare("default", "node-a") == SPARE
        await offer(fake)  # sent with a heartbeat before the claim reached the host
        data, sig = signed_call(fake.guard(), SPARE, [[entry("a-1")], True])
        await registry.register_many(SPARE, data, sig)
        assert await registry.spares() == {}
        assert await registry.claim_spare("default", "node-a") is None

    run(scenario)


def test_a_host_holding_agents_is_not_taken_as_a_spare_by_a_late_offer() -> None:
    async def scenario(fake: FakeCluster) -> None:
        registry = fake.process(REGISTRY_NAME)
        data, sig = signed_call(fake.guard(), SPARE, [[entry("a-2")], True])
        await registry.register_many(SPARE, data, sig)
        await offer(fake)
        assert await registry.spares() == {}

    run(scenario)


async def offer_sized(fake: FakeCluster, host: str, spares: int = 1, max_spares: int = 4) -> bool:
    data, sig = signed_call(fake.guard(), host, ["node-a", "default", spares, max_spares])
    keep: bool = await fake.process(REGISTRY_NAME).offer_spare(host, data, sig)
    return keep


def test_a_claimed_spares_late_offer_is_not_taken_again_before_it_registers_its_agent() -> None:
    async def scenario(fake: FakeCluster) -> None:
        registry = fake.process(REGISTRY_NAME)
        await offer(fake)
        assert await registry.claim_spare("default", "node-a") == SPARE
        assert await offer_sized(fake, SPARE)  # crossed the claim: kept, but not offered
        assert await registry.spares() == {}
        assert await registry.claim_spare("default", "node-a") is None

    run(scenario)


def test_a_top_up_counts_the_spares_it_asked_for_until_they_offer_themselves() -> None:
    async def scenario(fake: FakeCluster) -> None:
        registry = fake.process(REGISTRY_NAME)
        assert await registry.top_up_spares("default", "node-a", 1, 4) == 1
        assert await registry.top_up_spares("default", "node-a", 1, 4) == 0  # one is starting
        assert await offer_sized(fake, "reach.host.s-1")
        stats = (await registry.stats())["spares"]
        assert (stats["offered"], stats["starting"], stats["started"]) == (1, 0, 1)
        assert await registry.top_up_spares("default", "node-b", 1, 4) == 1  # another node's

        assert await registry.claim_spare("default", "node-a") == "reach.host.s-1"
        assert await registry.claim_spare("default", "node-a") is None  # a cold start
        # Two claims in the window: spares plus two, none left offered or starting.
        assert await registry.top_up_spares("default", "node-a", 1, 4) == 3
        assert await registry.top_up_spares("default", "node-a", 1, 2) == 0  # a lower bound
        stats = (await registry.stats())["spares"]
        assert (stats["taken"], stats["missed"], stats["starting"]) == (1, 1, 4)

    run(scenario)


def test_a_spare_told_to_retire_is_refused_again_if_it_offers_once_more() -> None:
    async def scenario(fake: FakeCluster) -> None:
        registry = fake.process(REGISTRY_NAME)
        await asyncio.sleep(SpareSizing().quiet_s)  # the registry has been quiet long enough
        assert await offer_sized(fake, "reach.host.s-1")
        assert not await offer_sized(fake, "reach.host.s-2")  # one more than spares
        assert not await offer_sized(fake, "reach.host.s-2")  # its answer was lost: again
        assert await offer_sized(fake, "reach.host.s-1")
        assert list(await registry.spares()) == ["node-a default"]
        assert (await registry.stats())["spares"]["retired"] == 1

    run(scenario)


def test_a_registry_just_started_retires_no_spare_a_burst_may_still_need() -> None:
    async def scenario(fake: FakeCluster) -> None:
        for i in range(3):  # offers of the spares a previous incarnation sized for a burst
            assert await offer_sized(fake, f"reach.host.s-{i}")
        await asyncio.sleep(SpareSizing().quiet_s)
        kept = [await offer_sized(fake, f"reach.host.s-{i}") for i in range(3)]
        assert kept.count(True) == 1  # quiet since it started: back to spares

    run(scenario)
