"""OTP-style supervision on a real Ray: restart types, strategies, intensity, escalation."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from ray_helpers import wait_until
from support_agents import Life, Text, Worker, crash_order

import reach
from reach import ChildSpec, Intensity, RestartType, Strategy, SupervisorSpec, SupervisorState

pytestmark = pytest.mark.integration

FAST = reach.Backoff(base_s=0.01, cap_s=0.05)


async def life(rt: Any, agent_id: str) -> Life:
    reply = await rt.client.request(agent_id, {}, "test.life.ask@1.0", returns=Life,
                                    timeout_ms=20_000)
    return reply.value


async def epoch(rt: Any, agent_id: str) -> int:
    rec = await rt.cluster.registry().lookup(agent_id)
    assert rec is not None, agent_id
    return int(rec.epoch)


def child_ids(status: reach.SupervisorStatus) -> list[str]:
    return [c.child_id for c in status.children]


def restarted_children(status: reach.SupervisorStatus) -> list[str]:
    return [r.child for r in status.restarts]


async def changed(rt: Any, agent_id: str, before: Life) -> Life:
    """Waits until the agent answers from a new incarnation."""

    async def new() -> Life | None:
        try:
            now = await life(rt, agent_id)
        except (reach.AgentUnavailable, reach.AgentNotFound, reach.RequestTimeout):
            return None
        return now if now.token != before.token else None

    return await wait_until(new, timeout_s=30)


async def crash(rt: Any, agent_id: str) -> None:
    with pytest.raises(reach.AgentUnavailable):
        await rt.client.request(agent_id, crash_order(), timeout_ms=20_000)


def tree(name: str, *children: ChildSpec | SupervisorSpec, **kw: Any) -> SupervisorSpec:
    kw.setdefault("intensity", Intensity(10, 5))
    return SupervisorSpec(name, children=children, backoff=FAST, seed=1, **kw)


async def test_a_permanent_child_killed_with_os_exit_comes_back_with_a_new_epoch(rt: Any) -> None:
    sup = await rt.supervise(tree("s-perm", ChildSpec(Worker, "s-perm-1")))
    before = await life(rt, "s-perm-1")
    first = await epoch(rt, "s-perm-1")
    await crash(rt, "s-perm-1")
    after = await changed(rt, "s-perm-1", before)
    assert after.pid != before.pid
    assert await epoch(rt, "s-perm-1") > first
    status = await sup.status()
    assert restarted_children(status) == ["s-perm-1"]
    assert status.restarts[0].placement is reach.RestartPlacement.DEDICATED
    await sup.stop()


async def test_transient_children_restart_after_a_crash_but_not_after_a_normal_exit(
    rt: Any
) -> None:
    sup = await rt.supervise(tree(
        "s-trans", ChildSpec(Worker, "s-trans-1", restart=RestartType.TRANSIENT),
        ChildSpec(Worker, "s-trans-2", restart=RestartType.TRANSIENT)))
    before = await life(rt, "s-trans-1")
    await crash(rt, "s-trans-1")
    await changed(rt, "s-trans-1", before)
    await rt.client.request("s-trans-2", Text(text="quit"))

    async def only_the_crashed_one_left() -> bool:
        return child_ids(await sup.status()) == ["s-trans-1"]

    await wait_until(only_the_crashed_one_left)
    assert await rt.cluster.registry().lookup("s-trans-2") is None
    assert restarted_children(await sup.status()) == ["s-trans-1"]
    await sup.stop()


async def test_a_temporary_child_is_never_restarted(rt: Any) -> None:
    sup = await rt.supervise(tree(
        "s-temp", ChildSpec(Worker, "s-temp-1", restart=RestartType.TEMPORARY),
        ChildSpec(Worker, "s-temp-2")))
    await crash(rt, "s-temp-1")

    async def dropped() -> bool:
        return child_ids(await sup.status()) == ["s-temp-2"]

    await wait_until(dropped)
    assert (await sup.status()).restarts == ()
    await sup.stop()


async def test_a_permanent_child_is_restarted_even_after_a_normal_exit(rt: Any) -> None:
    sup = await rt.supervise(tree("s-perm-normal", ChildSpec(Worker, "s-pn-1")))
    before = await life(rt, "s-pn-1")
    await rt.client.request("s-pn-1", Text(text="quit"))
    await changed(rt, "s-pn-1", before)
    await sup.stop()


@pytest.mark.parametrize(("strategy", "restarted"), [
    (Strategy.ONE_FOR_ONE, {"b"}),
    (Strategy.ONE_FOR_ALL, {"a", "b", "c"}),
    (Strategy.REST_FOR_ONE, {"b", "c"}),
])
async def test_each_strategy_restarts_exactly_the_right_siblings(
    rt: Any, strategy: Strategy, restarted: set[str]
) -> None:
    name = f"s-{strategy.value}"
    ids = {k: f"{name}-{k}" for k in "abc"}
    sup = await rt.supervise(tree(
        name, *(ChildSpec(Worker, ids[k], placement=reach.Packed(pool=name)) for k in "abc"),
        strategy=strategy))
    before = {k: await life(rt, ids[k]) for k in "abc"}
    await rt.client.request(ids["b"], Text(text="die"))
    await changed(rt, ids["b"], before["b"])

    async def settled() -> dict[str, Life] | None:
        try:
            now = {k: await life(rt, ids[k]) for k in "abc"}
        except reach.ReachError:
            return None
        return now if {k for k in "abc" if now[k].token != before[k].token} == restarted else None

    assert await wait_until(settled)
    status = await sup.status()
    assert child_ids(status) == [ids[k] for k in "abc"]
    assert {r.child for r in status.restarts} == {ids[k] for k in restarted}
    await sup.stop()


async def test_a_packed_host_killed_takes_its_agents_down_and_they_all_come_back(
    rt: Any
) -> None:
    ids = [f"s-pack-{i}" for i in range(4)]
    sup = await rt.supervise(tree("s-pack", *(
        ChildSpec(Worker, i, placement=reach.Packed(pool="s-pack", size=1)) for i in ids)))
    before = {i: await life(rt, i) for i in ids}
    assert len({b.pid for b in before.values()}) == 1
    await crash(rt, ids[0])
    after = {i: await changed(rt, i, before[i]) for i in ids}
    assert len({a.pid for a in after.values()}) == 1
    assert next(iter(after.values())).pid != next(iter(before.values())).pid
    status = await sup.status()
    assert sorted(restarted_children(status)) == sorted(ids)
    assert {r.placement for r in status.restarts} == {reach.RestartPlacement.PACKED}
    await sup.stop()


async def test_restarts_spaced_further_apart_than_the_period_never_escalate(rt: Any) -> None:
    sup = await rt.supervise(tree("s-spaced", ChildSpec(Worker, "s-spaced-1"),
                                  intensity=Intensity(1, 0.5)))
    for _ in range(3):
        before = await life(rt, "s-spaced-1")
        await crash(rt, "s-spaced-1")
        await changed(rt, "s-spaced-1", before)
        last = (await sup.status()).restarts[-1].at

        async def period_passed(last: float = last) -> bool:
            import time

            return time.time() - last > 0.6

        await wait_until(period_passed)
    status = await sup.status()
    assert status.state is SupervisorState.RUNNING
    assert len(status.restarts) == 3
    await sup.stop()


async def test_exceeding_the_intensity_at_the_root_reaches_the_driver(rt: Any) -> None:
    sup = await rt.supervise(tree("s-root-fail", ChildSpec(Worker, "s-rf-1"),
                                  intensity=Intensity(1, 30)))
    before = await life(rt, "s-rf-1")
    await crash(rt, "s-rf-1")
    await changed(rt, "s-rf-1", before)
    await crash(rt, "s-rf-1")
    with pytest.raises(reach.RestartLimitExceeded, match="s-root-fail"):
        await asyncio.wait_for(sup.wait(), timeout=30)
    rec = await rt.cluster.registry().lookup("s-rf-1")
    assert rec is None or rec.status is not reach.AgentStatus.ONLINE
    assert (await sup.status()).state is SupervisorState.FAILED


async def test_a_child_supervisor_that_gives_up_is_restarted_by_its_parent(rt: Any) -> None:
    inner = SupervisorSpec("s-inner", children=[ChildSpec(Worker, "s-inner-1")],
                           intensity=Intensity(1, 30), backoff=FAST)
    sup = await rt.supervise(tree("s-outer", inner, ChildSpec(Worker, "s-outer-1")))
    outer_before = await life(rt, "s-outer-1")
    before = await life(rt, "s-inner-1")
    await crash(rt, "s-inner-1")
    before = await changed(rt, "s-inner-1", before)
    await crash(rt, "s-inner-1")  # the inner supervisor's second restart in 30 s: it gives up

    async def outer_restarted_inner() -> bool:
        return "s-inner" in restarted_children(await sup.status())

    await wait_until(outer_restarted_inner)
    inner = next(r for r in (await sup.status()).restarts if r.child == "s-inner")
    assert inner.placement is reach.RestartPlacement.SUPERVISOR
    await changed(rt, "s-inner-1", before)
    assert (await life(rt, "s-outer-1")).token == outer_before.token  # one_for_one
    await sup.stop()


async def test_a_child_that_fails_its_own_restart_escalates(rt: Any, tmp_path: Path) -> None:
    marker = tmp_path / "refuse"
    sup = await rt.supervise(tree(
        "s-refuse", ChildSpec(Worker, "s-refuse-1", kwargs={"fail_if_exists": str(marker)}),
        intensity=Intensity(3, 30)))
    await life(rt, "s-refuse-1")
    marker.write_text("no more starts", encoding="utf-8")
    await crash(rt, "s-refuse-1")
    with pytest.raises(reach.RestartLimitExceeded):
        await asyncio.wait_for(sup.wait(), timeout=30)


async def test_children_stop_in_reverse_order_and_a_stuck_one_is_cut_off_at_its_timeout(
    rt: Any
) -> None:
    sup = await rt.supervise(tree(
        "s-order", ChildSpec(Worker, "s-order-1"),
        ChildSpec(Worker, "s-order-2", placement=reach.Packed(pool="s-order")),
        ChildSpec(Worker, "s-order-3", shutdown_timeout_s=0.5)))
    stuck = asyncio.ensure_future(
        rt.client.request("s-order-3", Text(text="sleep60"), timeout_ms=60_000))

    async def in_flight() -> bool:
        return (await life(rt, "s-order-3")).calls == 1

    await wait_until(in_flight)
    order = await asyncio.wait_for(sup.stop(), timeout=30)
    assert order == ["s-order-3", "s-order-2", "s-order-1"]
    with pytest.raises(reach.AgentUnavailable, match="stopped before finishing"):
        await asyncio.wait_for(stuck, timeout=30)
    for i in (1, 2, 3):
        assert await rt.cluster.registry().lookup(f"s-order-{i}") is None


async def test_messages_wait_for_a_restarting_agent_or_become_dead_letters(rt: Any) -> None:
    slow = reach.Backoff(base_s=3.0, cap_s=3.0)
    sup = await rt.supervise(SupervisorSpec("s-hold", children=[ChildSpec(Worker, "s-hold-1")],
                                            backoff=slow, intensity=Intensity(5, 30)))
    # The first restart within the intensity period is immediate (as in OTP), and so is the
    # first repeat; the third one backs off 3 s, long enough to send to the agent while it is
    # restarting.
    first = await life(rt, "s-hold-1")
    await crash(rt, "s-hold-1")
    second = await changed(rt, "s-hold-1", first)
    await crash(rt, "s-hold-1")
    before = await changed(rt, "s-hold-1", second)
    await crash(rt, "s-hold-1")

    async def restarting() -> bool:
        rec = await rt.cluster.registry().lookup("s-hold-1")
        return rec is not None and rec.status is reach.AgentStatus.RESTARTING

    await wait_until(restarting)
    held = asyncio.ensure_future(rt.client.request("s-hold-1", Text(text="held"),
                                                   returns=Text, timeout_ms=30_000))
    with pytest.raises(reach.AgentUnavailable, match="restarting"):
        await rt.client.request("s-hold-1", Text(text="too short"), timeout_ms=200)
    assert (await asyncio.wait_for(held, timeout=30)).value.text == "s-hold-1:held"
    assert (await life(rt, "s-hold-1")).token != before.token
    letters = await rt.dead_letters()
    assert any(d.receiver == "s-hold-1" and d.code == "agent_unavailable" for d in letters)
    await sup.stop()


async def test_a_supervisor_name_cannot_be_taken_twice(rt: Any) -> None:
    sup = await rt.supervise(tree("s-twice", ChildSpec(Worker, "s-twice-1")))
    with pytest.raises(reach.AgentAlreadyExists):
        await rt.supervise(tree("s-twice", ChildSpec(Worker, "s-twice-2")))
    await sup.stop()
