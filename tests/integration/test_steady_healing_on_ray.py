"""A crash loop beside a healthy sibling, on a real Ray: the looping child backs off by its own
restarts in a row and its supervisor escalates past the intensity, while the sibling, killed
while the loop backs off, is restarted at once, without queueing behind the loop's delay.

Each process is SIGKILLed, as an ``os._exit`` in a handler or the OOM killer would end it. The
Ray cluster is shared by the whole integration session: names here have an ``sh-`` prefix.
"""

from __future__ import annotations

import contextlib
import os
import signal
from typing import Any

import pytest
from ray_helpers import wait_until
from support_agents import Life, Worker

import reach
from reach import ChildSpec, Intensity, SupervisorSpec

pytestmark = pytest.mark.integration

#: The loop's fourth restart in a row waits 2-4 s: long beside any restart's own time.
SLOW = reach.Backoff(base_s=2.0, cap_s=8.0)


async def life(rt: Any, agent_id: str) -> Life:
    reply = await rt.client.request(agent_id, {}, "test.life.ask@1.0", returns=Life,
                                    timeout_ms=30_000)
    return reply.value


async def restarts(sup: reach.SupervisorRef, child: str) -> int:
    return sum(1 for r in (await sup.status()).restarts if r.child == child)


async def kill(rt: Any, agent_id: str) -> None:
    """SIGKILLs the process of an agent's current incarnation."""
    os.kill((await life(rt, agent_id)).pid, signal.SIGKILL)


async def restarted(sup: reach.SupervisorRef, child: str, count: int) -> None:
    async def done() -> bool:
        return await restarts(sup, child) >= count

    await wait_until(done, timeout_s=60)


async def gave_up(sup: reach.SupervisorRef) -> None:
    """Waits for the supervisor to give up; a failure says what it held meanwhile."""
    seen: list[reach.SupervisorStatus] = []

    async def failed() -> bool:
        seen[:] = [await sup.status()]
        return seen[0].state is reach.SupervisorState.FAILED

    try:
        await wait_until(failed, timeout_s=60)
    except pytest.fail.Exception:
        pytest.fail(f"the supervisor never gave up; it held: {describe(seen[0])}")


def describe(status: reach.SupervisorStatus) -> str:
    """A supervisor's state, children (and their hosts) and restarts, with their reasons."""
    children = ", ".join(f"{c.child_id} on {c.host}" for c in status.children)
    restarts = "; ".join(f"{r.child} at {r.at:.3f} after {r.latency_s:.3f} s ({r.reason})"
                         for r in status.restarts)
    return f"state {status.state.value}, children [{children}], restarts [{restarts}]"


async def test_a_crash_loop_backs_off_and_escalates_while_its_sibling_heals_at_once(
    rt: Any
) -> None:
    sup = await rt.supervise(SupervisorSpec(
        "sh-loop", children=[ChildSpec(Worker, "sh-loop-1"), ChildSpec(Worker, "sh-calm-1")],
        intensity=Intensity(5, 120), backoff=SLOW, seed=3))
    try:
        for n in range(1, 4):  # three deaths in a row: at once, at once, then 1-2 s
            await kill(rt, "sh-loop-1")
            await restarted(sup, "sh-loop-1", n)
        await kill(rt, "sh-loop-1")  # its fourth restart in a row waits 2-4 s
        await kill(rt, "sh-calm-1")  # the sibling's first failure
        await restarted(sup, "sh-calm-1", 1)
        assert await restarts(sup, "sh-loop-1") == 3  # the loop still backs off
        assert (await life(rt, "sh-calm-1")).pid > 0  # the sibling answers meanwhile
        await restarted(sup, "sh-loop-1", 4)

        await kill(rt, "sh-loop-1")  # the sixth restart in the period: past the intensity
        await gave_up(sup)
    finally:
        with contextlib.suppress(reach.ReachError, TimeoutError):
            await sup.stop()
