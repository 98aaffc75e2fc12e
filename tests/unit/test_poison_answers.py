"""Poison messages and the answers that clear them, on the fake cluster: a request sent often
with the same content (a health probe) that is in hands at two deaths of its agent, with an
answer in between, is never quarantined and keeps being answered, whoever sent it; the real
poison (killing the next incarnation too, unanswered in between) still is, and an answer of
another content neither saves it nor releases its quarantine. Replies are hashed only when
their process saw their agent die lately, and the answers it reports are signed."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import reach
from policies.poison import REMEMBER_S
from policies.supervision import Intensity
from reach import PoisonMessage
from reach._runtime import poison as runtime_poison
from reach.records import AgentStatus
from reach.security.guard import SecurityConfig, resolve_keyring, signed_call
from reach.testing import FakeCluster, eventually, run


@reach.schema("answers.ping@1.0")
class Ping(BaseModel):
    """A probe: always the same (empty) content."""


@reach.schema("answers.order@1.0")
class Order(BaseModel):
    text: str


@reach.schema("answers.watch@1.0")
class Watch(BaseModel):
    """A streamed probe: always the same (empty) content."""


#: Every request the agents below were handed: (agent ID, what), in order.
HANDED: list[tuple[str, str]] = []


class Probed(reach.Agent):
    """Answers probes slowly (so that one is in hands when the process dies); kills its own
    process on an order whose text starts with "crash" or "poison"."""

    capabilities = ("answers.probed",)

    @reach.handler(Ping, returns=Ping)
    async def ping(self, ctx: reach.Context, m: Ping) -> Ping:
        HANDED.append((self.id, "ping"))
        await asyncio.sleep(0.5)
        return Ping()

    @reach.handler(Watch, returns=Ping)
    async def watch(self, ctx: reach.Context, m: Watch) -> AsyncIterator[Ping]:
        HANDED.append((self.id, "watch"))
        yield Ping()
        await asyncio.sleep(0.5)
        yield Ping()

    @reach.handler(Order, returns=Order)
    async def take(self, ctx: reach.Context, m: Order) -> Order:
        HANDED.append((self.id, m.text))
        if m.text.startswith(("crash", "poison")):
            cluster = ctx.courier.link.cluster
            assert isinstance(cluster, FakeCluster)
            rec = await cluster.registry().lookup(self.id)
            assert rec is not None
            cluster.crash(rec.host)  # as os._exit would: this process is gone
            await asyncio.sleep(3600)
        return Order(text=f"{self.id} took {m.text}")


@pytest.fixture(autouse=True)
def _fresh() -> None:
    HANDED.clear()


def handed(what: str) -> int:
    return sum(1 for _, t in HANDED if t == what)


async def started(what: str, before: int) -> None:
    """Returns once the agent was handed ``what`` once more than ``before`` times."""
    async def more() -> bool:
        return handed(what) > before

    await eventually(more)


async def supervised(rt: Any, *agent_ids: str) -> Any:
    return await rt.supervise(reach.SupervisorSpec(
        "s", intensity=Intensity(50, 60), children=[reach.ChildSpec(Probed, i)
                                                   for i in agent_ids or ("p-1",)]))


async def probe(rt: Any, agent_id: str = "p-1") -> Any:
    return await rt.client.request(agent_id, Ping(), timeout_ms=10_000)


async def die_probed(prober: Any, killer: Any, crash: str, agent_id: str = "p-1") -> None:
    """Kills the agent's process by a request of unique content (``crash``, from ``killer``)
    while a probe from ``prober`` is in its hands; both fail as a death does (retryable)."""
    pings = handed("ping")
    probing = asyncio.ensure_future(probe(prober, agent_id))
    await started("ping", pings)
    with pytest.raises(reach.AgentUnavailable):
        await killer.client.request(agent_id, Order(text=crash), timeout_ms=10_000)
    with pytest.raises(reach.AgentUnavailable):
        await probing


async def poison_letters(rt: Any) -> list[reach.DeadLetter]:
    return [d for d in await rt.dead_letters() if d.code == "poison"]


def test_a_probe_in_hands_at_deaths_with_an_answer_between_is_never_quarantined() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        await supervised(rt)
        for i in range(4):
            await die_probed(rt, rt, f"crash {i}")
            assert await probe(rt)  # the new incarnation answers it: its kills are forgotten
        for _ in range(3):
            assert await probe(rt)
        assert await poison_letters(rt) == []
        assert handed("ping") == 4 + 4 + 3

    run(scenario)


def test_a_streamed_probe_is_cleared_by_its_streams_end() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        await supervised(rt)

        async def watch() -> int:
            return len([c async for c in rt.client.stream("p-1", Watch(), timeout_ms=10_000)])

        for i in range(3):
            watches = handed("watch")
            watching = asyncio.ensure_future(watch())
            await started("watch", watches)
            with pytest.raises(reach.AgentUnavailable):
                await rt.client.request("p-1", Order(text=f"crash {i}"), timeout_ms=10_000)
            with pytest.raises(reach.AgentUnavailable):
                await watching
            assert await watch() == 2
        assert await poison_letters(rt) == []

    run(scenario)


def test_an_answer_to_one_caller_clears_the_kill_another_callers_identical_probe_saw() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt, other = fake.runtime(), fake.runtime()
        await supervised(rt)
        await die_probed(rt, rt, "crash 1")
        assert await probe(rt)
        await die_probed(other, rt, "crash 2")  # the same content, from a process of its own
        assert await probe(other)
        await die_probed(rt, other, "crash 3")
        assert await probe(rt)
        assert await probe(other)
        assert await poison_letters(rt) == []

    run(scenario)


def test_a_probe_in_hands_at_two_deaths_with_no_answer_between_is_quarantined() -> None:
    # The rule cannot tell this probe from poison: it was in the hands of two incarnations in
    # a row, each of which died, and no incarnation answered it in between.
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        await supervised(rt)
        await die_probed(rt, rt, "crash 1")
        pings = handed("ping")
        probing = asyncio.ensure_future(probe(rt))
        await started("ping", pings)
        with pytest.raises(reach.AgentUnavailable):
            await rt.client.request("p-1", Order(text="crash 2"), timeout_ms=10_000)
        with pytest.raises(PoisonMessage):
            await probing
        with pytest.raises(PoisonMessage):
            await probe(rt)
        assert {d.receiver for d in await poison_letters(rt)} == {"p-1"}

    run(scenario)


def test_an_answer_of_another_content_neither_saves_poison_nor_releases_it() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        await supervised(rt)
        with pytest.raises(reach.AgentUnavailable):
            await rt.client.request("p-1", Order(text="poison"), timeout_ms=10_000)
        assert await probe(rt)  # answered between the two deaths: another content
        assert (await rt.client.request("p-1", Order(text="fine"))).value.text == \
            "p-1 took fine"
        with pytest.raises(PoisonMessage):
            await rt.client.request("p-1", Order(text="poison"), timeout_ms=10_000)
        for _ in range(3):
            assert await probe(rt)
            with pytest.raises(PoisonMessage):
                await rt.client.request("p-1", Order(text="poison"), timeout_ms=10_000)
        assert handed("poison") == 2

    run(scenario)


def test_a_probe_answered_between_deaths_keeps_the_real_poison_beside_it_quarantined() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        await supervised(rt)
        # The poison kills two incarnations with a probe in hands each time; the probe is
        # answered in between (and after), the poison never is.
        await die_probed(rt, rt, "poison")
        assert await probe(rt)
        pings = handed("ping")
        probing = asyncio.ensure_future(probe(rt))
        await started("ping", pings)
        with pytest.raises(PoisonMessage):
            await rt.client.request("p-1", Order(text="poison"), timeout_ms=10_000)
        with pytest.raises(reach.AgentUnavailable):
            await probing
        assert await probe(rt)
        assert await probe(rt)
        assert handed("poison") == 2
        letters = await poison_letters(rt)
        assert letters
        assert {(d.receiver, d.kills) for d in letters} == {("p-1", 2)}

    run(scenario)


def test_a_session_request_and_a_task_still_end_as_poison_beside_answered_probes() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        sup = await supervised(rt, "p-1", "p-2")
        session = await rt.open_session(rt.client.sender, "p-1")
        turn = asyncio.ensure_future(session.request(Order(text="poison s"), timeout_ms=20_000))
        task = await sup.submit("p-2", Order(text="poison t"), timeout_ms=30_000, retry_limit=5)
        # Probes answered meanwhile, by every incarnation in turn, clear none of the poison.
        while not turn.done():
            for agent_id in ("p-1", "p-2"):
                with contextlib.suppress(reach.AgentUnavailable):
                    await probe(rt, agent_id)
        with pytest.raises(PoisonMessage):
            await turn
        result = await task.result()
        assert result.error is not None
        assert result.error.code == "poison"
        assert handed("poison s") == 2
        assert handed("poison t") == 2
        assert await probe(rt, "p-1")
        assert await probe(rt, "p-2")

    run(scenario)


def test_replies_are_hashed_only_from_an_agent_this_process_saw_die_and_until_answered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hashed: list[str] = []
    real = runtime_poison.fingerprint

    def counting(receiver: str, schema: str, payload: Any) -> str:
        hashed.append(receiver)
        return real(receiver, schema, payload)

    monkeypatch.setattr(runtime_poison, "fingerprint", counting)

    async def scenario(fake: FakeCluster) -> None:
        rt, killer = fake.runtime(), fake.runtime()
        await supervised(rt, "p-1", "p-2")
        for _ in range(5):
            assert await probe(rt)
        assert hashed == []
        await die_probed(rt, killer, "crash")
        assert hashed.count("p-1") == 2  # the two reports: the probe's, the crash's
        hashed.clear()
        assert await probe(rt)  # this process's suspect: hashed once, and answered
        assert hashed == ["p-1"]
        for _ in range(5):
            assert await probe(rt)
            assert await probe(rt, "p-2")
        assert hashed == ["p-1"]

    run(scenario)


def test_with_signing_on_answers_are_signed_and_an_unsigned_one_is_refused(
    tmp_path: Path,
) -> None:
    security = SecurityConfig(sign=True, keyring=resolve_keyring(tmp_path / "keyring.json",
                                                                 create=True))

    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        await supervised(rt)
        for i in range(3):
            await die_probed(rt, rt, f"crash {i}")
            assert await probe(rt)
        assert await poison_letters(rt) == []
        forged, _ = signed_call(None, "anyone", [["p-1", 9, "0" * 32]])
        with pytest.raises(reach.AuthError):
            await fake.registry().forget_kills("anyone", forged, None)

    run(scenario, security=security)


def test_the_registry_forgets_only_the_kills_of_incarnations_before_the_answer() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        await supervised(rt)
        registry = fake.registry()
        print_ = runtime_poison.fingerprint("p-1", "answers.ping@1.0", {})
        report = ["p-1", 1, print_, "m-1", "x", "", "answers.ping@1.0"]
        data, sig = signed_call(None, "x", [report])
        assert await registry.report_kills("x", data, sig) == [(1, False)]
        data, sig = signed_call(None, "x", [["p-1", 1, print_]])  # the same incarnation
        assert await registry.forget_kills("x", data, sig) == 0
        data, sig = signed_call(None, "x", [["p-1", 2, print_], ["p-1", 2, "f" * 32]])
        assert await registry.forget_kills("x", data, sig) == 1
        data, sig = signed_call(None, "x", [[*report[:1], 2, *report[2:]]])
        assert await registry.report_kills("x", data, sig) == [(1, False)]
        rec = await registry.lookup("p-1")
        assert rec is not None
        assert rec.status is AgentStatus.ONLINE

    run(scenario)


def test_a_process_forgets_what_it_reported_once_answered_or_expired() -> None:
    suspects = runtime_poison.Suspects()
    assert not suspects
    suspects.add("a", "p", 0.0)
    suspects.add("a", "q", 5.0)
    assert "a" in suspects
    assert not suspects.take("a", "r", 6.0)  # not reported: nothing to tell
    assert suspects.take("a", "q", 6.0)
    assert not suspects.take("a", "q", 7.0)  # told once
    # Past the ledger's memory the registry forgot the kill too: nothing to tell, and the
    # agent's replies are hashed no more.
    assert not suspects.take("a", "p", REMEMBER_S + 1.0)
    assert not suspects


def test_a_process_remembers_a_bounded_number_of_reported_contents(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(runtime_poison, "MAX_LOCAL_SUSPECTS", 2)
    monkeypatch.setattr(runtime_poison, "MAX_SUSPECT_AGENTS", 2)
    suspects = runtime_poison.Suspects()
    for i, print_ in enumerate(("p", "q", "p", "r")):
        suspects.add("a", print_, float(i))
    assert set(suspects["a"]) == {"p", "r"}  # q, the least recently reported, went first
    suspects.add("b", "p", 5.0)
    suspects.add("c", "p", 6.0)
    assert set(suspects) == {"b", "c"}
