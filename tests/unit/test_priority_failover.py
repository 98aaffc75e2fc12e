"""Failover by capability priority on the fake cluster: a primary takes every send by capability
while it is live, a backup takes them while it is not, and the primary's return takes them back;
discovery, fanout, supervised tasks and the gateway's router follow the same order (virtual
time, no Ray)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from pydantic import BaseModel

import reach
from policies.tasks import TaskState
from reach.errors import ConfigError, Severity
from reach.gateway.deploy import start_gateway
from reach.gateway.server import GatewayServer
from reach.records import AgentStatus
from reach.testing import FakeCluster, eventually, run
from reach.web.options import GatewayOptions


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


class OwnTags(reach.Agent):
    """An agent whose capabilities are its instance's, as an A2A proxy's are its card's."""

    def __init__(self, tags: tuple[str, ...]) -> None:
        self.__dict__.update(capabilities=tags)

    @reach.handler(Ask, returns=Answer)
    async def ask(self, ctx: reach.Context, m: Ask) -> Answer:
        return Answer(by=self.id, incarnation=1)


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


def test_every_send_by_capability_goes_to_the_primary_however_busy_it_is() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        await rt.spawn(Refunds, "busy-primary", placement=pool("a"))
        await rt.spawn(Refunds, "idle-backup", placement=pool("b"), priority=1)
        slow = [asyncio.ensure_future(rt.client.request("busy-primary", Ask(sleep_s=5)))
                for _ in range(5)]
        # Concurrent sends: without priorities the idle backup would take most of them.
        picked = await asyncio.gather(*(who(rt) for _ in range(20)))
        assert set(picked) == {"busy-primary"}
        await asyncio.gather(*slow)

    run(scenario)


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
        assert await who(rt, "refund.status") == "d-status"
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


def test_a_priority_applies_to_the_capabilities_an_agent_holds_as_it_starts() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        await rt.spawn(OwnTags, "o-backup", args=(("refund.issue",),), placement=pool("oa"),
                       priority=1)
        await rt.spawn(Refunds, "o-primary", placement=pool("ob"))
        assert (await rt.cluster.registry().lookup("o-backup")).priorities == (1,)
        assert {await who(rt) for _ in range(5)} == {"o-primary"}
        with pytest.raises(ConfigError, match="not one of the agent's capabilities"):
            await rt.spawn(OwnTags, "o-bad", args=(("refund.issue",),), placement=pool("oa"),
                           priority={"refund.status": 1})
        assert await rt.cluster.registry().lookup("o-bad") is None

    run(scenario)


def test_a_killed_primary_sends_traffic_to_the_backup_until_it_is_back() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        sup = await rt.supervise(reach.SupervisorSpec("prio", children=[
            reach.ChildSpec(Refunds, "k-primary", placement=pool("ka")),
            reach.ChildSpec(Refunds, "k-backup", placement=pool("kb"), priority=1),
        ]))
        assert {await who(rt) for _ in range(10)} == {"k-primary"}
        HELD["k-primary"] = asyncio.Event()  # its restart waits until the test lets it go
        fake.crash((await rt.cluster.registry().lookup("k-primary")).host)

        async def restarting() -> bool:
            return await status_of(rt, "k-primary") is AgentStatus.RESTARTING

        await eventually(restarting)
        assert {await who(rt) for _ in range(10)} == {"k-backup"}  # none lost, none held
        HELD.pop("k-primary").set()

        async def primary_again() -> bool:
            return await who(rt) == "k-primary"

        await eventually(primary_again)
        assert {await who(rt) for _ in range(10)} == {"k-primary"}
        assert STARTS["k-primary"] == 2
        assert (await rt.cluster.registry().lookup("k-primary")).priorities == (0, 1)
        assert (await rt.cluster.registry().lookup("k-backup")).priorities == (1, 1)
        await sup.stop()

    run(scenario)


def test_a_caller_that_found_the_primarys_host_dead_sends_to_the_backup_at_once() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        await rt.spawn(Refunds, "g-primary", placement=pool("ga"))
        await rt.spawn(Refunds, "g-backup", placement=pool("gb"), priority=1)
        assert await who(rt) == "g-primary"
        fake.crash((await rt.cluster.registry().lookup("g-primary")).host)
        await asyncio.sleep(0)  # this driver hears of the death (its watch of the host fails)
        # Nobody restarts it and its heartbeats are not missed yet: the registry still lists
        # it online, but this driver knows better.
        assert await status_of(rt, "g-primary") is AgentStatus.ONLINE
        assert {await who(rt) for _ in range(5)} == {"g-backup"}

    run(scenario)


def test_with_every_holder_restarting_a_send_by_capability_fails_as_it_did_without_priorities(
) -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        # Both hosts of the pool are killed: two failures, within the intensity.
        sup = await rt.supervise(reach.SupervisorSpec("all-down", children=[
            reach.ChildSpec(Refunds, "a-primary", placement=pool("aa")),
            reach.ChildSpec(Refunds, "a-backup", placement=pool("aa"), priority=1),
        ], intensity=reach.Intensity(2, 5.0)))
        assert await who(rt) == "a-primary"
        hosts = {(await rt.cluster.registry().lookup(a)).host for a in ("a-primary", "a-backup")}
        HELD["a-primary"], HELD["a-backup"] = asyncio.Event(), asyncio.Event()
        for host in hosts:
            fake.crash(host)

        async def both_restarting() -> bool:
            return all([await status_of(rt, a) is AgentStatus.RESTARTING
                        for a in ("a-primary", "a-backup")])

        await eventually(both_restarting)
        with pytest.raises(reach.NoCapableAgent):
            await who(rt)
        HELD.pop("a-backup").set()

        async def answered() -> str | None:
            try:
                return await who(rt)
            except reach.NoCapableAgent:
                return None

        assert await eventually(answered) == "a-backup"  # the first one back
        HELD.pop("a-primary").set()

        async def primary_again() -> bool:
            return await who(rt) == "a-primary"

        await eventually(primary_again)
        await sup.stop()

    run(scenario)


def test_fanout_fills_from_the_primary_then_the_first_backups() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        await rt.spawn(Refunds, "f-second", placement=pool("fa"), priority=2)
        await rt.spawn(Refunds, "f-first", placement=pool("fa"), priority=1)
        await rt.spawn(Refunds, "f-primary", placement=pool("fb"))
        replies = await rt.client.fanout("refund.issue", Ask(), fanout_limit=2, returns=Answer)
        assert [r.value.by for r in replies if not isinstance(r, reach.ReachError)] == [
            "f-primary", "f-first"]
        await rt.stop("f-primary")
        replies = await rt.client.fanout("refund.issue", Ask(), fanout_limit=2, returns=Answer)
        assert [r.value.by for r in replies if not isinstance(r, reach.ReachError)] == [
            "f-first", "f-second"]

    run(scenario)


def test_a_task_by_capability_fails_over_from_the_primary_to_the_backup_and_starts_there_next(
) -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        sup = await rt.supervise(reach.SupervisorSpec("tasks", seed=3, children=[
            reach.ChildSpec(Refunds, "t-backup-2", placement=pool("ta"), priority=2),
            reach.ChildSpec(Refunds, "t-backup", placement=pool("ta"), priority=1),
            reach.ChildSpec(Refunds, "t-primary", placement=pool("tb")),
        ]))
        failing = await sup.submit("refund.issue", Ask(fail="retryable"), by_capability=True,
                                   retry_limit=2)
        result = await failing.result()
        assert result.state is TaskState.FAILED
        assert [a.agent_id for a in result.attempts] == ["t-primary", "t-backup", "t-backup-2"]
        ok = await (await sup.submit("refund.issue", Ask(), by_capability=True,
                                     returns=Answer)).result()
        assert ok.state is TaskState.COMPLETED
        assert ok.value is not None
        assert ok.value.by == "t-primary"
        await sup.stop()

    run(scenario)


def test_the_gateways_router_sends_by_capability_to_the_primary() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        await rt.spawn(Refunds, "gw-backup", placement=pool("gwa"), priority=1)
        await rt.spawn(Refunds, "gw-primary", placement=pool("gwb"))
        start_gateway(fake, GatewayOptions(auth=False))
        server: GatewayServer = fake.services["reach-gateway"]
        async with httpx.AsyncClient(transport=httpx.ASGITransport(server.app),
                                     base_url="http://gw",
                                     headers={"A2A-Version": "1.0"}) as client:
            for rid in range(5):
                message = {"messageId": f"m-{rid}", "role": "ROLE_USER",
                           "parts": [{"data": {"text": "refund"}}],
                           "metadata": {"capability": "refund.issue"}}
                reply = await client.post("/", json={"jsonrpc": "2.0", "id": rid,
                                                      "method": "SendMessage",
                                                      "params": {"message": message}})
                task = reply.json()["result"]["task"]
                assert task["status"]["state"] == "TASK_STATE_COMPLETED"
                assert task["artifacts"][0]["parts"][0]["data"]["by"] == "gw-primary"
        await server.close()

    run(scenario)
