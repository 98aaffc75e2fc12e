"""Warm spares keep up on a real Ray: once a restart has claimed a spare, the supervisor's node
keeps more of them, so that dedicated restarts coming faster than one spare is replaced (half a
second's pause, then a new process's start) still each take one.

The Ray cluster is shared by the whole integration session: the agents and the supervisor here
have names of their own (``sk-`` prefix), and the test stops what it started.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from typing import Any

import pytest
from ray_helpers import wait_until
from support_agents import Life, Worker

import reach
from reach import ChildSpec, Intensity, SupervisorSpec
from reach._runtime.spawner import shape_key

pytestmark = pytest.mark.integration


async def life(rt: Any, agent_id: str) -> Life:
    reply = await rt.client.request(agent_id, {}, "test.life.ask@1.0", returns=Life,
                                    timeout_ms=20_000)
    return reply.value


async def host_of(rt: Any, agent_id: str) -> str:
    rec = await rt.cluster.registry().lookup(agent_id)
    assert rec is not None, agent_id
    return str(rec.host)


async def sigkill_host(rt: Any, agent_id: str) -> None:
    """SIGKILLs the process of an agent's host, as a crash would end it."""
    info = await rt.cluster.host(await host_of(rt, agent_id)).info()
    os.kill(int(info["pid"]), signal.SIGKILL)


async def returned(rt: Any, agent_id: str, before: Life) -> Life:
    """Waits until the agent answers from a new incarnation."""

    async def new() -> Life | None:
        try:
            now = await life(rt, agent_id)
        except (reach.AgentUnavailable, reach.AgentNotFound, reach.RequestTimeout):
            return None
        return now if now.token != before.token else None

    found: Life = await wait_until(new, timeout_s=30)
    return found


@pytest.mark.xfail(strict=False, reason=(
    "open defect: on a loaded machine, late in the shared session, the pool sometimes holds no "
    "spare for 30-60 s, before the test's first kill or after it (registry: offered 0, starting "
    "0, median start 8.7 s); "
    "the unit tests on the fake cluster prove the sizing, this one reports what the pool held"))
async def test_dedicated_restarts_faster_than_one_replacement_each_take_a_warm_spare(
    rt: Any
) -> None:
    ids = ["sk-1", "sk-2", "sk-3"]
    sup = await rt.supervise(SupervisorSpec(
        "sk-burst", children=[ChildSpec(Worker, i) for i in ids], intensity=Intensity(20, 10),
        seed=1))
    try:
        shape = shape_key(reach.Dedicated())

        async def offered(count: int) -> list[str] | None:
            """The spares of the shape on any node, once there are ``count``: a restart claims
            its supervisor's node's first, and another node's when that one has none (a
            supervisor that ended right after a claim may have left its node without one)."""
            by_place = await rt.cluster.registry().spares()
            now = [h for place, hosts in by_place.items() if place.endswith(f" {shape}")
                   for h in hosts]
            return now if len(now) >= count else None

        async def pool_held(count: int, timeout_s: float) -> list[str]:
            """The spares once there are ``count``; else the test fails saying what the pool
            held (the registry's offers and figures)."""
            try:
                found: list[str] = await wait_until(lambda: offered(count), timeout_s=timeout_s)
            except pytest.fail.Exception:
                registry = rt.cluster.registry()
                pytest.fail(f"fewer than {count} spares: {await registry.spares()} "
                            f"{(await registry.stats())['spares']}")
            return found

        await pool_held(1, 30)
        before = await life(rt, "sk-1")
        await sigkill_host(rt, "sk-1")  # a claim: the node's pool grows past one spare
        await returned(rt, "sk-1", before)

        ready = await pool_held(2, 60)
        missed = (await rt.cluster.registry().stats())["spares"]["missed"]
        lives = {i: await life(rt, i) for i in ids[1:]}
        for agent_id in ids[1:]:  # back to back: the first one's spare is not yet replaced
            await sigkill_host(rt, agent_id)
        for agent_id in ids[1:]:
            await returned(rt, agent_id, lives[agent_id])
            assert await host_of(rt, agent_id) in ready  # a spare started ahead, not a new host
        assert (await rt.cluster.registry().stats())["spares"]["missed"] == missed
    finally:
        with contextlib.suppress(reach.ReachError, TimeoutError):
            await asyncio.wait_for(sup.stop(), timeout=30)
