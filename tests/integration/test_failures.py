"""Errors a caller can act on: timeouts, loops, handler errors, dead hosts, heartbeats."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest
import ray
from ray_helpers import HEARTBEAT_S, MISSES, kill_and_wait, wait_until
from support_agents import (
    Crashing,
    Echo,
    Faulty,
    Forward,
    Forwarder,
    Info,
    Recorder,
    Slow,
    Streamer,
    Text,
)

import reach

pytestmark = pytest.mark.integration


async def test_a_slow_agent_times_out_without_hanging_the_caller(rt: Any) -> None:
    await rt.spawn(Slow, "f-slow", placement=reach.Packed(pool="failures"))
    with pytest.raises(reach.RequestTimeout) as err:
        await rt.client.request("f-slow", Text(text="30"), timeout_ms=300)
    assert err.value.severity is reach.Severity.RETRYABLE
    assert err.value.details["agent_id"] == "f-slow"


async def test_a_cycle_in_the_call_chain_is_refused_as_loop_detected(rt: Any) -> None:
    await rt.spawn_many(Forwarder, ["f-loop-a", "f-loop-b"],
                        placement=reach.Packed(pool="failures"))
    with pytest.raises(reach.LoopDetected) as err:
        await rt.client.request("f-loop-a", Forward(to=["f-loop-b", "f-loop-a"]))
    assert err.value.severity is reach.Severity.FATAL
    assert "f-loop-a -> f-loop-b -> f-loop-a" in str(err.value)


async def test_a_chain_longer_than_the_maximum_is_refused(rt: Any) -> None:
    ids = [f"f-long-{i}" for i in range(18)]
    await rt.spawn_many(Forwarder, ids, placement=reach.Packed(pool="failures"))
    with pytest.raises(reach.LoopDetected) as err:
        await rt.client.request(ids[0], Forward(to=ids[1:]))
    assert err.value.details["max_hops"] == 16
    # A chain within the limit goes through.
    reply = await rt.client.request(ids[0], Forward(to=ids[1:10]), returns=Info)
    assert reply.value.agent_id == ids[9]


async def spawned(rt: Any, cls: type[reach.Agent], agent_id: str) -> None:
    """Spawns ``agent_id`` in the failures pool unless an earlier test did (each test runs
    alone too)."""
    with contextlib.suppress(reach.AgentAlreadyExists):
        await rt.spawn(cls, agent_id, placement=reach.Packed(pool="failures"))


async def test_a_handler_reach_error_keeps_its_severity(rt: Any) -> None:
    await spawned(rt, Faulty, "f-faulty")
    with pytest.raises(reach.ReachError) as err:
        await rt.client.request("f-faulty", Text(text="degrade"))
    assert err.value.severity is reach.Severity.DEGRADABLE
    assert err.value.suggestion == "use the partial answer"


async def test_an_unexpected_handler_exception_is_retryable_and_names_its_type(rt: Any) -> None:
    await spawned(rt, Faulty, "f-faulty")
    with pytest.raises(reach.HandlerError) as err:
        await rt.client.request("f-faulty", Text(text="missing-key"))
    assert err.value.severity is reach.Severity.RETRYABLE
    assert err.value.details["type"] == "KeyError"
    assert "missing-key" in str(err.value)
    # The agent survived its handler's exception: it answers the next request itself (a dead
    # agent would be AgentUnavailable or AgentNotFound, not its own degradable error).
    with pytest.raises(reach.ReachError) as again:
        await rt.client.request("f-faulty", Text(text="degrade"))
    assert again.value.severity is reach.Severity.DEGRADABLE
    assert again.value.suggestion == "use the partial answer"


async def test_a_constructor_that_raises_fails_the_spawn_clearly(rt: Any) -> None:
    with pytest.raises(RuntimeError, match="constructor refuses to start"):
        await rt.spawn(Crashing, "f-crash", placement=reach.Packed(pool="failures"))
    with pytest.raises(reach.AgentNotFound):
        await rt.client.request("f-crash", Text(text="x"))


async def test_streamed_replies_arrive_in_order(rt: Any) -> None:
    await spawned(rt, Streamer, "f-stream")
    chunks = [c.value.text async for c in rt.client.stream("f-stream", Text(text="s"),
                                                            returns=Text)]
    assert chunks == ["s-0", "s-1", "s-2"]


async def test_an_error_mid_stream_arrives_typed_after_the_chunks(rt: Any) -> None:
    await spawned(rt, Streamer, "f-stream")
    got: list[str] = []
    with pytest.raises(reach.AgentUnavailable, match="mid-stream"):
        async for chunk in rt.client.stream("f-stream", Text(text="boom"), returns=Text):
            got.append(chunk.value.text)
    assert got == ["boom-0", "boom-1", "boom-2"]


async def test_a_host_killed_mid_request_is_agent_unavailable_not_a_hang(rt: Any) -> None:
    info = await rt.spawn(Slow, "f-doomed")
    host = rt.cluster.host(info.host)
    call = asyncio.ensure_future(rt.client.request("f-doomed", Text(text="60"), timeout_ms=60_000))

    async def in_flight() -> bool:
        return bool((await host.info())["agents"].get("f-doomed"))

    await wait_until(in_flight)
    ray.kill(host.handle)  # from outside, as a crash: the driver is not told
    with pytest.raises(reach.AgentUnavailable) as err:
        await asyncio.wait_for(call, timeout=30)
    assert err.value.severity is reach.Severity.RETRYABLE


async def test_a_dead_host_goes_offline_after_missed_heartbeats(rt: Any) -> None:
    class Lonely(Echo):
        capabilities = ("lonely.echo",)

    info = await rt.spawn(Lonely, "f-lonely")
    assert [a.agent_id for a in await rt.client.discover("lonely.echo")] == ["f-lonely"]
    ray.kill(rt.cluster.host(info.host).handle)
    registry = rt.cluster.registry()

    async def offline() -> bool:
        return (await registry.lookup("f-lonely")).status is reach.AgentStatus.OFFLINE

    await wait_until(offline, timeout_s=HEARTBEAT_S * MISSES + 10)
    # Discovery no longer offers it (once the client's one-second holder cache has expired).
    async def not_offered() -> bool:
        try:
            await rt.client.discover("lonely.echo")
        except reach.NoCapableAgent:
            return True
        return False

    await wait_until(not_offered)
    with pytest.raises(reach.NoCapableAgent):
        await rt.client.request_capability("lonely.echo", Text(text="x"))
    with pytest.raises(reach.AgentUnavailable):
        await rt.client.request("f-lonely", Text(text="x"))


async def test_the_registry_rebuilds_its_table_after_a_restart(rt: Any) -> None:
    await rt.spawn(Echo, "f-survivor", placement=reach.Packed(pool="failures"))
    registry = rt.cluster.registry()
    before = (await registry.stats())["incarnation"]
    ray.kill(registry.handle, no_restart=False)

    async def known_again() -> bool:
        try:
            stats = await registry.stats()
            rec = await registry.lookup("f-survivor")
        except reach.AgentUnavailable:
            return False
        restarted = stats["incarnation"] != before
        return restarted and rec is not None and rec.status is reach.AgentStatus.ONLINE

    await wait_until(known_again, timeout_s=30)
    rt.directory.drop("f-survivor")
    reply = await rt.client.request("f-survivor", Text(text="back"), returns=Text)
    assert reply.value.text == "f-survivor:back"


async def test_a_notification_to_a_dead_host_becomes_a_dead_letter(rt: Any) -> None:
    info = await rt.spawn(Recorder, "f-dead-letter")
    await rt.client.notify("f-dead-letter", Text(text="first"))
    await kill_and_wait(rt.cluster.host(info.host))
    # Refused at once (the host is known gone) or failed after leaving: a dead letter either way.
    with contextlib.suppress(reach.AgentUnavailable):
        await rt.client.notify("f-dead-letter", Text(text="into the void"))

    async def lettered() -> list[reach.DeadLetter]:
        return [d for d in await rt.dead_letters() if d.receiver == "f-dead-letter"]

    letters = await wait_until(lettered)
    assert letters[0].msg_type == "notification"
    assert letters[0].code == "agent_unavailable"


async def test_an_agent_unknown_to_a_restarted_registry_is_awaited_while_marked_restarting(
        rt: Any) -> None:
    # What a supervisor does when its registry lost the agent (it died with the same node):
    # marks it restarting. Callers then wait for it (a retryable error at their deadline), not
    # a fatal AgentNotFound; marked offline, it is reported offline.
    from reach.security.guard import signed_call

    registry = rt.cluster.registry()
    data, sig = signed_call(rt.transport.codec.guard, rt.client.sender,
                            [["f-lost-1"], "restarting"])
    await registry.mark(rt.client.sender, data, sig)
    assert (await registry.lookup("f-lost-1")).status is reach.AgentStatus.RESTARTING
    with pytest.raises(reach.AgentUnavailable) as excinfo:
        await rt.client.request("f-lost-1", Text(text="are you back?"), timeout_ms=500)
    assert excinfo.value.details.get("restarting") is True
    await rt.spawn(Echo, "f-lost-1")  # its restart registers it: the placeholder is replaced
    reply = await rt.client.request("f-lost-1", Text(text="are you back?"))
    assert reply.value == Text(text="f-lost-1:are you back?")
    info = await registry.lookup("f-lost-1")
    assert (info.status, info.capabilities) == (reach.AgentStatus.ONLINE,
                                                ("echo.say", "order.query"))
    data, sig = signed_call(rt.transport.codec.guard, rt.client.sender, [["f-lost-2"], "offline"])
    await registry.mark(rt.client.sender, data, sig)
    assert await registry.lookup("f-lost-2") is None  # only "restarting" leaves a mark
