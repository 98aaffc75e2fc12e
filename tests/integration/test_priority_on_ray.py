"""Failover by capability priority on a real Ray: with a primary and a backup holder under a
supervisor, every send by capability goes to the primary; once its process is SIGKILLed, to the
backup for as long as its restart lasts (none is lost); and back to the primary once it returns.

The primary's restart is held open by a gate file its start waits on, so that the traffic in
between is watched for as long as the test needs: no figure of time is asserted.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from priority_agents import Answered, Ask, Refunds
from ray_helpers import wait_until

import reach
from reach import ChildSpec, Intensity, SupervisorSpec

pytestmark = pytest.mark.integration

PRIMARY, BACKUP = "pr-primary", "pr-backup"
#: Requests sent in each phase, one after another.
ROUNDS = 20


async def ask(rt: Any) -> Answered:
    """One request by capability; a lost one (any error) fails the test."""
    reply = await rt.client.request_capability("refund.issue", Ask(), returns=Answered,
                                               timeout_ms=30_000)
    answered: Answered = reply.value
    return answered


async def record(rt: Any, agent_id: str) -> reach.AgentRecord:
    rec: reach.AgentRecord | None = await rt.cluster.registry().lookup(agent_id)
    assert rec is not None, agent_id
    return rec


async def test_traffic_goes_to_the_primary_moves_to_the_backup_while_it_restarts_and_comes_back(
    rt: Any, tmp_path: Path,
) -> None:
    gate = tmp_path / "primary-held"  # while it exists, a start of the primary waits
    sup = await rt.supervise(SupervisorSpec("pr-tree", children=[
        ChildSpec(Refunds, PRIMARY, kwargs={"gate": str(gate)}),
        ChildSpec(Refunds, BACKUP, priority=1),
    ], intensity=Intensity(20, 10), backoff=reach.Backoff(base_s=0.01, cap_s=0.05), seed=1))
    try:
        primary, backup = await record(rt, PRIMARY), await record(rt, BACKUP)
        assert (primary.priorities, backup.priorities) == ((0, 1), (1, 1))
        found = await rt.client.discover("refund.issue")
        assert [r.agent_id for r in found] == [PRIMARY, BACKUP]

        before = [await ask(rt) for _ in range(ROUNDS)]
        assert {a.agent_id for a in before} == {PRIMARY}
        (dead_pid,) = {a.pid for a in before}

        gate.touch()
        os.kill(dead_pid, signal.SIGKILL)

        async def restarting() -> bool:
            return (await record(rt, PRIMARY)).status is reach.AgentStatus.RESTARTING

        async def seen_dead() -> bool:  # this driver found the primary's host gone
            return bool(rt.directory.gone_among([primary]))

        await wait_until(restarting)
        await wait_until(seen_dead)
        during = [await ask(rt) for _ in range(ROUNDS)]
        assert {a.agent_id for a in during} == {BACKUP}
        assert (await record(rt, PRIMARY)).status is reach.AgentStatus.RESTARTING  # still held

        gate.unlink()

        async def primary_again() -> Answered | None:
            answered = await ask(rt)
            return answered if answered.agent_id == PRIMARY else None

        back = await wait_until(primary_again)
        assert back.pid != dead_pid  # its new incarnation, in another process
        after = [await ask(rt) for _ in range(ROUNDS)]
        assert {a.agent_id for a in after} == {PRIMARY}
        again = await record(rt, PRIMARY)
        assert again.epoch > primary.epoch
        assert again.priorities == (0, 1)
        (restart,) = (await sup.status()).restarts
        assert restart.child == PRIMARY
    finally:
        gate.unlink(missing_ok=True)
        with contextlib.suppress(reach.ReachError, TimeoutError):
            await asyncio.wait_for(sup.stop(), timeout=30)
