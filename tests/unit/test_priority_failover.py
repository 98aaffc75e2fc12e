"""Capability priorities on the fake cluster: what the registry and discovery show of them, and
a spawn's priority refused before anything starts (virtual time, no Ray)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel

import reach
from reach.errors import ConfigError, Severity
from reach.records import AgentStatus
from reach.testing import FakeCluster, run


@reach.schema("prio.ask@1.0")
class Ask(BaseModel):
    text: str = ""
    sleep_s: float = 0.0
    fail: str = ""


@reach.schema("prio.answer@1.0")
class Answer(BaseModel):
    by: str
    incarnation: int


#: Agents whose next start waits until the test sets their event (a restart that takes a while).
HELD: dict[str, asyncio.Event] = {}
#: Starts per agent ID, this test module's (each scenario uses IDs of its own).
STARTS: dict[str, int] = {}


class Refunds(reach.Agent):
    """The primary of ``refund.issue`` and a backup of ``refund.status``, by its class."""

    capabilities = {"refund.issue": 0, "refund.status": 1}  # noqa: RUF012 - read once, as defined
    description = "Issues refunds."

    async def on_start(self) -> None:
        STARTS[self.id] = STARTS.get(self.id, 0) + 1
        held = HELD.get(self.id)
        if held is not None:
            await held.wait()

    @reach.handler(Ask, returns=Answer)
    async def ask(self, ctx: reach.Context, m: Ask) -> Answer:
        if m.sleep_s:
            await asyncio.sleep(m.sleep_s)
        if m.fail:
            raise reach.ReachError(f"asked to fail {m.fail}", severity=Severity(m.fail))
        return Answer(by=self.id, incarnation=STARTS[self.id])


def pool(name: str) -> reach.Packed:
    return reach.Packed(pool=name, size=2)


async def who(rt: Any, capability: str = "refund.issue") -> str:
    reply = await rt.client.request_capability(capability, Ask(), returns=Answer,
                                               timeout_ms=20_000)
    by: str = reply.value.by
    return by


async def status_of(rt: Any, agent_id: str) -> AgentStatus:
    rec = await rt.cluster.registry().lookup(agent_id)
    assert rec is not None
    status: AgentStatus = rec.status
    return status


def test_discovery_lists_the_primary_first_with_each_capabilitys_priority() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        await rt.spawn(Refunds, "d-backup", placement=pool("a"), priority={"refund.issue": 1})
        await rt.spawn(Refunds, "d-primary", placement=pool("b"))
        await rt.spawn(Refunds, "d-status", placement=pool("b"), priority={"refund.status": 0})
        found = await rt.client.discover("refund.issue")
        assert [r.agent_id for r in found][-1] == "d-backup"
        by_id = {r.agent_id: r for r in found}
        assert by_id["d-primary"].priorities == (0, 1)
        assert by_id["d-backup"].priorities == (1, 1)
        assert by_id["d-backup"].priority_of("refund.issue") == 1
        assert by_id["d-status"].priorities == ()  # every capability at 0: nothing to carry
        status_holders = await rt.client.discover("refund.status")
        assert status_holders[0].agent_id == "d-status"
        assert (await rt.cluster.registry().lookup("d-backup")).priorities == (1, 1)

    run(scenario)


def test_a_spawn_with_a_bad_priority_is_refused_before_anything_starts() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        with pytest.raises(ConfigError, match="not one of the agent's capabilities"):
            await rt.spawn(Refunds, "bad-1", priority={"order.query": 1})
        with pytest.raises(ConfigError, match="at least 0"):
            await rt.spawn_many(Refunds, ["bad-2"], priority=-1)
        assert await rt.cluster.registry().lookup("bad-1") is None
        assert await rt.cluster.registry().hosts() == []

    run(scenario)
