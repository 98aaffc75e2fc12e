"""What an agent asks of its host (``Agent.exit``, its reported availability) goes through the
hooks its host sets before ``on_start``; outside a host both do nothing."""

from __future__ import annotations

from typing import Any

import reach
from reach._runtime.names import REGISTRY_NAME
from reach.records import AgentExit, AgentStatus
from reach.testing import FakeCluster, eventually, run


class Leaver(reach.Agent):
    """Leaves when asked; notes whether its host was known to it when it started."""

    capabilities = ("hooks.leave",)

    def __init__(self) -> None:
        self.hosted_at_start = False

    async def on_start(self) -> None:
        self.hosted_at_start = self._reach_hooks is not None

    @reach.handler(reach.Text, returns=reach.Text)
    async def act(self, ctx: reach.Context, m: reach.Text) -> reach.Text:
        if m.text == "started hosted?":
            return reach.Text(text=str(self.hosted_at_start))
        if m.text == "down":
            self._reach_available(False)
        else:
            self.exit(normal=m.text == "normal", reason=f"asked: {m.text}")
        return reach.Text(text="ok")


def test_outside_a_host_exit_and_availability_do_nothing() -> None:
    agent = Leaver()
    assert agent._reach_hooks is None
    agent.exit(normal=False, reason="no host")
    agent._reach_available(False)


def test_an_agent_that_exits_leaves_its_host_and_its_watcher_hears_how() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        record = await rt.spawn(Leaver, "l-1", placement=reach.Packed())
        started = await rt.client.request("l-1", reach.Text(text="started hosted?"))
        assert started.value == reach.Text(text="True")
        watch = rt.cluster.host(record.host).watch_agent("l-1")
        reply = await rt.client.request("l-1", reach.Text(text="abnormal"))
        assert reply.value == reach.Text(text="ok")  # its reply still goes out
        assert await watch == AgentExit(False, "asked: abnormal")
        assert await rt.cluster.registry().lookup("l-1") is None

    run(scenario)


def test_an_agent_reported_unavailable_stays_offline_through_its_hosts_heartbeats() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        await rt.spawn(Leaver, "l-2", placement=reach.Packed())
        registry = rt.cluster.registry()

        async def status_is(status: AgentStatus) -> bool:
            rec = await registry.lookup("l-2")
            return rec is not None and rec.status is status

        beats: list[str] = []
        registry_proc = fake.process(REGISTRY_NAME)
        heartbeat = registry_proc.heartbeat

        async def counted(host: str, data: bytes, sig: Any) -> Any:
            beats.append(host)
            return await heartbeat(host, data, sig)

        registry_proc.heartbeat = counted
        await rt.client.request("l-2", reach.Text(text="down"))
        assert await eventually(lambda: status_is(AgentStatus.OFFLINE))
        before = len(beats)

        async def several_heartbeats() -> bool:
            return len(beats) >= before + 3

        assert await eventually(several_heartbeats)
        assert await status_is(AgentStatus.OFFLINE)

    run(scenario)
