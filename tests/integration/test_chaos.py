"""A short run of the chaos benchmark: agents SIGKILLed under load lose and hang no task."""

from __future__ import annotations

from typing import Any

import pytest

from reach.bench import chaos

pytestmark = [pytest.mark.integration, pytest.mark.slow]


async def test_no_task_is_lost_or_hung_while_agents_and_packed_hosts_are_killed(
    rt: Any, cluster: Any
) -> None:
    figures = await chaos.run(tasks=150, inflight=20, kill_every_ms=200,
                              address=cluster.address)
    assert figures["kills"] > 0
    assert figures["restarts"] > 0
    assert figures["lost"] == 0, figures["lost_detail"]
    assert figures["hung"] == 0
    assert figures["completed"] + figures["degraded"] + figures["failed"] == 150
