"""The registry's warm spares: a host that was given an agent is never offered again, even when
its last offer crossed the claim that took it (it would be handed out a second time, with the
agent it holds)."""

from __future__ import annotations

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
