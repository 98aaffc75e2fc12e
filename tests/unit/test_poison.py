"""Poison messages on the fake cluster: a request that kills its agent's process in two
incarnations is quarantined (a ``poison`` dead letter, a fatal PoisonMessage to its caller, an
audit record) and is never delivered a third time, whoever sends it and however: a plain
request retried under a new ID, a session request resent after a restart, a supervised task
retried, a request held while its agent restarts. Innocent requests are not: not those of the
same agent, nor those of host-mates that died with it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import reach
from policies.supervision import Intensity
from reach import PoisonMessage, Severity
from reach._runtime import poison as runtime_poison
from reach.records import AgentStatus, TaskState
from reach.security.guard import SecurityConfig, resolve_keyring, signed_call
from reach.testing import FakeCluster, eventually, run


@reach.schema("poison.order@1.0")
class Order(BaseModel):
    text: str


#: Every request the agents below were handed: (agent ID, text), in order.
HANDED: list[tuple[str, str]] = []


class Fragile(reach.Agent):
    """Kills its own process on an order whose text starts with "poison"; sleeps on "slow"."""

    capabilities = ("poison.fragile",)

    @reach.handler(Order, returns=Order)
    async def take(self, ctx: reach.Context, m: Order) -> Order:
        HANDED.append((self.id, m.text))
        if m.text.startswith("poison"):
            cluster = ctx.courier.link.cluster
            assert isinstance(cluster, FakeCluster)
            rec = await cluster.registry().lookup(self.id)
            assert rec is not None
            cluster.crash(rec.host)  # as os._exit would: this process is gone
            await asyncio.sleep(3600)
        if m.text.startswith("slow"):
            await asyncio.sleep(1.0)
        return Order(text=f"{self.id} took {m.text}")


@reach.schema("poison.story@1.0")
class Story(BaseModel):
    text: str


class Teller(reach.Agent):
    """Streams a story, killing its own process on one that starts with "poison"."""

    capabilities = ("poison.teller",)

    @reach.handler(Story, returns=Order)
    async def tell(self, ctx: reach.Context, m: Story) -> AsyncIterator[Order]:
        HANDED.append((self.id, m.text))
        yield Order(text="once")
        if m.text.startswith("poison"):
            cluster = ctx.courier.link.cluster
            assert isinstance(cluster, FakeCluster)
            rec = await cluster.registry().lookup(self.id)
            assert rec is not None
            cluster.crash(rec.host)
            await asyncio.sleep(3600)
        yield Order(text="upon a time")


@pytest.fixture(autouse=True)
def _fresh() -> None:
    HANDED.clear()


def handed(text: str) -> int:
    return sum(1 for _, t in HANDED if t == text)


def tree(*children: reach.ChildSpec) -> reach.SupervisorSpec:
    return reach.SupervisorSpec("s", intensity=Intensity(50, 60), children=list(children))


async def supervised(rt: Any, agent_id: str = "f-1") -> Any:
    return await rt.supervise(tree(reach.ChildSpec(Fragile, agent_id)))


async def online_again(rt: Any, agent_id: str, above: int) -> int:
    async def back() -> int:
        rec = await rt.cluster.registry().lookup(agent_id)
        ok = rec is not None and rec.status is AgentStatus.ONLINE and rec.epoch > above
        return rec.epoch if ok else 0

    epoch: int = await eventually(back)
    return epoch


async def audit_of(fake: FakeCluster, agent_id: str, what: str) -> list[dict[str, Any]]:
    async def found() -> list[dict[str, Any]]:
        records = await fake.audit_log().audit_records(None, agent_id, 1000)
        return [r for r in records if what in r["outcome"]]

    hits: list[dict[str, Any]] = await eventually(found)
    return hits


def test_a_plain_request_retried_after_killing_two_incarnations_is_never_delivered_again(
) -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        await supervised(rt)
        with pytest.raises(reach.AgentUnavailable):  # the first death: retryable, as before
            await rt.client.request("f-1", Order(text="poison"), timeout_ms=10_000)
        # The user retries: a new request ID, the same content; it kills the next incarnation.
        with pytest.raises(PoisonMessage) as second:
            await rt.client.request("f-1", Order(text="poison"), timeout_ms=10_000)
        assert second.value.severity is Severity.FATAL
        assert second.value.kills == 2
        assert second.value.details["agent_id"] == "f-1"
        with pytest.raises(PoisonMessage):  # a third try is refused before any handler runs
            await rt.client.request("f-1", Order(text="poison"), timeout_ms=10_000)
        assert handed("poison") == 2
        reply = await rt.client.request("f-1", Order(text="fine"), timeout_ms=10_000)
        assert reply.value.text == "f-1 took fine"
        letters = [d for d in await rt.dead_letters() if d.code == "poison"]
        assert letters
        assert {(d.receiver, d.kills, d.msg_type) for d in letters} == {("f-1", 2, "request")}
        quarantined = [d for d in letters if d.msg_id == second.value.details["request_id"]]
        assert quarantined
        assert quarantined[0].trace_id
        (audited, *_) = await audit_of(fake, "f-1", "quarantined")
        assert audited["msg_type"] == "poison"
        assert audited["trace_id"] == quarantined[0].trace_id
        await audit_of(fake, "f-1", "refused: poison")  # the third try, refused by the host

    run(scenario)


def test_a_session_request_is_resent_once_after_a_death_then_ends_failed_as_poison() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        await supervised(rt)
        session = await rt.open_session(rt.client.sender, "f-1")
        with pytest.raises(PoisonMessage) as caught:
            await session.request(Order(text="poison"), timeout_ms=20_000)
        assert handed("poison") == 2  # sent, resent after the restart, and no more
        request_id = str(caught.value.details["request_id"])
        assert await fake.sessions().pending_status(request_id) == "failed"
        assert (await session.request(Order(text="after"))).value.text == "f-1 took after"
        assert any(d.code == "poison" and d.msg_id == request_id
                   for d in await rt.dead_letters())

    run(scenario)


def test_a_supervised_task_is_retried_once_after_a_death_then_fails_as_poison() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        sup = await supervised(rt)
        task = await sup.submit("f-1", Order(text="poison"), timeout_ms=30_000, retry_limit=5)
        result = await task.result()
        assert result.state is TaskState.FAILED
        assert result.error is not None
        assert (result.error.code, result.error.severity) == ("poison", Severity.FATAL)
        assert [a.code for a in result.attempts] == ["agent_unavailable", "poison"]
        assert handed("poison") == 2
        again = await (await sup.submit("f-1", Order(text="poison"))).result()
        assert again.error is not None
        assert again.error.code == "poison"
        assert handed("poison") == 2
        done = await (await sup.submit("f-1", Order(text="fine"))).result()
        assert done.state is TaskState.COMPLETED

    run(scenario)


def test_a_request_held_while_its_agent_restarts_counts_as_any_other() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        await supervised(rt)
        first = asyncio.ensure_future(
            rt.client.request("f-1", Order(text="poison"), timeout_ms=10_000))
        await eventually(lambda: _true(handed("poison") == 1))
        # Sent by another driver while the agent is dead or restarting: held, then delivered
        # to the next incarnation, which it kills; the second death makes it poison for both.
        other = fake.runtime()
        held = asyncio.ensure_future(
            other.client.request("f-1", Order(text="poison"), timeout_ms=10_000))
        with pytest.raises(reach.AgentUnavailable):
            await first
        with pytest.raises(PoisonMessage):
            await held
        assert handed("poison") == 2
        with pytest.raises(PoisonMessage):
            await rt.client.request("f-1", Order(text="poison"), timeout_ms=10_000)
        assert handed("poison") == 2

    run(scenario)


def test_a_quarantine_holds_for_every_sender_and_for_incarnations_started_after_it() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        await supervised(rt)
        for _ in range(2):
            with pytest.raises(reach.ReachError):
                await rt.client.request("f-1", Order(text="poison"), timeout_ms=10_000)
        epoch = await online_again(rt, "f-1", 2)  # the third incarnation
        # The agent dies of something else: its next incarnation registers after the quarantine
        # and refuses the poison too, to a driver that never saw it.
        fake.crash((await rt.cluster.registry().lookup("f-1")).host)
        await online_again(rt, "f-1", epoch)
        stranger = fake.runtime()
        with pytest.raises(PoisonMessage, match="is poison"):
            await stranger.client.request("f-1", Order(text="poison"), timeout_ms=10_000)
        assert handed("poison") == 2
        assert (await stranger.client.request("f-1", Order(text="ok"))).value.text == \
            "f-1 took ok"

    run(scenario)


def test_a_streamed_request_that_kills_two_incarnations_is_quarantined_too() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        await rt.supervise(tree(reach.ChildSpec(Teller, "t-1")))

        async def listen(text: str) -> list[str]:
            return [c.value.text async for c in rt.client.stream(
                "t-1", Story(text=text), timeout_ms=10_000)]

        with pytest.raises(reach.AgentUnavailable):
            await listen("poison")
        with pytest.raises(PoisonMessage):
            await listen("poison")
        with pytest.raises(PoisonMessage):
            await listen("poison")
        assert handed("poison") == 2
        assert await listen("fine") == ["once", "upon a time"]

    run(scenario)


def test_the_same_content_to_another_agent_is_not_quarantined() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        await rt.supervise(tree(reach.ChildSpec(Fragile, "f-1"), reach.ChildSpec(Fragile, "f-2")))
        for _ in range(2):
            with pytest.raises(reach.ReachError):
                await rt.client.request("f-1", Order(text="poison"), timeout_ms=10_000)
        with pytest.raises(reach.AgentUnavailable):  # f-2 has been killed once only
            await rt.client.request("f-2", Order(text="poison"), timeout_ms=10_000)
        assert handed("poison") == 3

    run(scenario)


def test_one_death_seen_by_two_callers_is_one_kill() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        other = fake.runtime()
        await supervised(rt)
        # Two callers send the same content at once: both are in hands when it kills the host.
        calls = [asyncio.ensure_future(c.client.request("f-1", Order(text="poison"),
                                                        timeout_ms=10_000))
                 for c in (rt, other)]
        outcomes = await asyncio.gather(*calls, return_exceptions=True)
        assert all(isinstance(o, reach.AgentUnavailable) for o in outcomes), outcomes
        assert handed("poison") in (1, 2)  # the second may not have been handed over in time

    run(scenario)


def test_innocent_host_mates_are_not_quarantined_by_one_shared_death() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        packed = reach.Packed(pool="mates", size=1)  # one host: every agent dies with it
        await rt.supervise(tree(reach.ChildSpec(Fragile, "x", placement=packed),
                                reach.ChildSpec(Fragile, "y", placement=packed)))
        # y's slow request is in hands when x's poison kills the host they share.
        slow = asyncio.ensure_future(rt.client.request("y", Order(text="slow"),
                                                       timeout_ms=10_000))
        await eventually(lambda: _true(handed("slow") == 1))
        with pytest.raises(reach.AgentUnavailable):
            await rt.client.request("x", Order(text="poison"), timeout_ms=10_000)
        with pytest.raises(reach.AgentUnavailable):
            await slow
        # y's request is retried and answered; x's poison kills the host a second time, with
        # nothing of y's in hands, and is quarantined alone.
        assert (await rt.client.request("y", Order(text="slow"), timeout_ms=10_000)).value
        with pytest.raises(PoisonMessage):
            await rt.client.request("x", Order(text="poison"), timeout_ms=10_000)
        assert (await rt.client.request("y", Order(text="slow"), timeout_ms=10_000)).value
        assert handed("slow") == 3
        letters = [d for d in await rt.dead_letters() if d.code == "poison"]
        assert {d.receiver for d in letters} == {"x"}

    run(scenario)


def test_a_count_of_one_quarantines_at_the_first_death() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        await supervised(rt)
        with pytest.raises(PoisonMessage) as caught:
            await rt.client.request("f-1", Order(text="poison"), timeout_ms=10_000)
        assert caught.value.kills == 1
        with pytest.raises(PoisonMessage):
            await rt.client.request("f-1", Order(text="poison"), timeout_ms=10_000)
        assert handed("poison") == 1

    run(scenario, poison_after=1)


def test_with_signing_on_the_reports_are_signed_and_an_unsigned_one_is_refused(
    tmp_path: Path,
) -> None:
    security = SecurityConfig(sign=True, keyring=resolve_keyring(tmp_path / "keyring.json",
                                                                 create=True))

    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        await supervised(rt)
        with pytest.raises(reach.AgentUnavailable):
            await rt.client.request("f-1", Order(text="poison"), timeout_ms=10_000)
        with pytest.raises(PoisonMessage):
            await rt.client.request("f-1", Order(text="poison"), timeout_ms=10_000)
        forged, _ = signed_call(None, "anyone", [["f-1", 9, "0" * 32, "m", "anyone", "", "x@1.0"]])
        with pytest.raises(reach.AuthError):
            await fake.registry().report_kills("anyone", forged, None)
        assert handed("poison") == 2

    run(scenario, security=security)


def test_no_payload_is_hashed_while_nothing_is_quarantined(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hashed: list[str] = []
    real = runtime_poison.fingerprint

    def counting(receiver: str, schema: str, payload: Any) -> str:
        hashed.append(receiver)
        return real(receiver, schema, payload)

    monkeypatch.setattr(runtime_poison, "fingerprint", counting)

    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        await rt.supervise(tree(reach.ChildSpec(Fragile, "f-1"), reach.ChildSpec(Fragile, "f-2")))
        for i in range(20):
            await rt.client.request("f-1", Order(text=f"fine {i}"))
        assert hashed == []
        for _ in range(2):
            with pytest.raises(reach.ReachError):
                await rt.client.request("f-1", Order(text="poison"), timeout_ms=10_000)
        assert hashed == ["f-1", "f-1"]  # the two reports of a death, by its caller
        for i in range(20):  # f-2's host has nothing quarantined: nothing hashed there
            await rt.client.request("f-2", Order(text=f"fine {i}"))
        assert hashed == ["f-1", "f-1"]

    run(scenario)


async def _true(value: bool) -> bool:
    return value
