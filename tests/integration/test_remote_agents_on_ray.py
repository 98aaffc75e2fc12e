"""Remote agents on real Ray: the WebSocket channel served by uvicorn (as a gateway replica would
serve it), its RemoteHost a Ray actor, and agents outside the cluster in processes of their own:
the JavaScript reference agent (Node, ``ws``) and the Python client (``reach connect``).

- The Node agent registers, is discovered by capability and description, answers requests from
  the driver and from a reach agent, and streams a reply;
- it is killed mid-request, the caller waits, a new Node process reconnects (its restart: epoch
  + 1) and the request completes;
- a forged hello is refused (4403) and audited; the other agents go on answering.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from channel_helpers import HOST, ROOT, Channel, Process
from node_tools import NODE, NPM, needs_node
from ray_helpers import start_gateway, wait_until
from remote_agents import Add, Asker, AskMath, Count, Sum

import reach
from reach.remote.wire import CloseCode, Declaration, agent_secret, frame_text, make_hello

JS = ROOT / "clients" / "js"

pytestmark = [pytest.mark.integration]



@pytest.fixture(scope="module")
def channel(rt: Any) -> Iterator[Channel]:
    made = Channel(rt)
    try:
        yield made
    finally:
        made.close()


@pytest.fixture(scope="module")
def node_modules() -> Path:
    """clients/js/node_modules, installed from the lock file when missing."""
    if not (JS / "node_modules" / "ws" / "package.json").exists():
        assert NPM is not None
        done = subprocess.run([NPM, "ci", "--no-audit", "--no-fund"], cwd=JS, check=False,
                              capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            pytest.fail(f"npm ci failed in {JS}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return JS / "node_modules"


def node_agent(channel: Channel, agent_id: str) -> Process:
    assert NODE is not None
    return Process([NODE, str(JS / "reach-agent.mjs"), "--gateway", channel.url, "--id",
                    agent_id, "--token", channel.token, "--secret", channel.secret(agent_id)])


async def welcomed(process: Process, count: int = 1) -> dict[str, Any]:
    async def check() -> Any:
        found = process.welcomes()
        return found[count - 1] if len(found) >= count else None

    welcome: dict[str, Any] = await wait_until(check, timeout_s=30)
    return welcome


@needs_node
async def test_the_node_agent_is_found_answers_a_reach_agent_and_streams(
        rt: Any, channel: Channel, node_modules: Path) -> None:
    node = await node_agent(channel, "calc-js-1").start()
    try:
        welcome = await welcomed(node)
        record = await rt.cluster.registry().lookup("calc-js-1")
        assert (record.host, record.epoch) == (HOST, welcome["epoch"])
        found = await rt.client.discover("math", text="javascript calculator")
        assert found[0].agent_id == "calc-js-1"
        reply = await rt.client.request("calc-js-1", Add(a=20, b=22))
        assert reply.value == Sum(total=42, by="calc-js-1")
        await rt.spawn(Asker, "asker-1", placement=reach.Packed(pool="remote-tests"))
        asked = await rt.client.request("asker-1", AskMath(capability="math.add", a=1, b=2,
                                                           text="javascript"))
        assert asked.value == Sum(total=3, by="calc-js-1")
        ticks = [r.value.n async for r in rt.client.stream("calc-js-1", Count(upto=4))]
        assert ticks == [1, 2, 3, 4]
    finally:
        await node.stop()


@needs_node
async def test_the_node_agent_killed_mid_request_reconnects_and_the_request_completes(
        rt: Any, channel: Channel, node_modules: Path) -> None:
    first = await node_agent(channel, "calc-js-2").start()
    second: Process | None = None
    try:
        epoch = (await welcomed(first))["epoch"]
        call = asyncio.ensure_future(rt.client.request("calc-js-2", Add(a=2, b=3, sleep_s=3),
                                                       timeout_ms=30_000))

        async def taken() -> bool:  # the request reached the Node agent
            info = await channel.host.info()
            return bool(info["agents"].get("calc-js-2"))

        await wait_until(taken)
        await first.kill()

        async def disconnected() -> bool:  # the channel saw the death: its grace runs
            return "calc-js-2" not in (await channel.host.info())["connected"]

        await wait_until(disconnected)
        assert not call.done()  # the caller waits for the agent's restart
        second = await node_agent(channel, "calc-js-2").start()
        again = await welcomed(second)
        assert again["restarted"] is True
        assert again["epoch"] == epoch + 1
        reply = await asyncio.wait_for(call, 30)
        assert reply.value == Sum(total=5, by="calc-js-2")
        assert (await rt.cluster.registry().lookup("calc-js-2")).epoch == epoch + 1
    finally:
        await first.kill()
        if second is not None:
            await second.stop()


async def test_a_forged_hello_is_refused_and_audited_and_others_are_unaffected(
        rt: Any, channel: Channel) -> None:
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed

    agent = await reach_connect(channel, "calc-py-1").start()
    try:
        await welcomed_py(rt, "calc-py-1")
        forged = make_hello("spy-1", Declaration(capabilities=("math.add",)),
                            agent_secret(b"\x05" * 32, "spy-1"),
                            now_ms=round(time.time() * 1000),
                            nonce=os.urandom(16).hex())
        async with connect(f"{channel.url}/v1/agents/connect",
                           additional_headers={"Authorization": f"Bearer {channel.token}"}) as ws:
            await ws.send(frame_text(forged))
            with pytest.raises(ConnectionClosed) as closed:
                await ws.recv()
        assert closed.value.rcvd is not None
        assert closed.value.rcvd.code == CloseCode.BAD_SIGNATURE
        assert closed.value.rcvd.reason.startswith("bad_signature")
        assert await rt.cluster.registry().lookup("spy-1") is None
        await channel.host.flush_audit()
        records = await rt.cluster.audit_log().audit_records(None, "spy-1", 10)
        assert [r["outcome"] for r in records] == ["refused: bad_signature"]
        assert records[0]["caller"] == "a2a:remote-tests"
        reply = await rt.client.request("calc-py-1", Add(a=1, b=1))
        assert reply.value == Sum(total=2, by="calc-py-1")
    finally:
        assert await agent.stop() == 0  # goodbye, then exit 0


def reach_connect(channel: Channel, agent_id: str) -> Process:
    return Process([sys.executable, "-m", "reach.remote", "--gateway", channel.url,
                    "remote_agents:PyCalculator", "--id", agent_id, "--token", channel.token,
                    "--secret", channel.secret(agent_id)],
                   env={"PYTHONPATH": os.pathsep.join((str(ROOT / "tests" / "integration"),
                                                       str(ROOT)))})


async def welcomed_py(rt: Any, agent_id: str) -> None:
    async def online() -> Any:
        return await rt.cluster.registry().lookup(agent_id)

    await wait_until(online, timeout_s=30)


async def test_a_python_agent_through_reach_connect_streams_and_leaves_with_goodbye(
        rt: Any, channel: Channel) -> None:
    agent = await reach_connect(channel, "calc-py-2").start()
    await welcomed_py(rt, "calc-py-2")
    watch = asyncio.ensure_future(channel.host.watch_agent("calc-py-2"))
    ticks = [r.value.n async for r in rt.client.stream("calc-py-2", Count(upto=3))]
    assert ticks == [1, 2, 3]
    assert await agent.stop() == 0
    exit_ = await asyncio.wait_for(watch, 20)
    assert exit_.normal
    assert await rt.cluster.registry().lookup("calc-py-2") is None


@needs_node
async def test_the_node_agent_connects_through_the_gateway_on_serve_and_answers(
        rt: Any, channel: Channel, node_modules: Path) -> None:
    """The same Node agent, dialing the gateway's Serve application at /v1/agents/connect
    (its host: the RemoteHost of the gateway replica), found and called like any agent."""
    name = "reach-gateway-remote"
    url = await asyncio.to_thread(start_gateway, rt, name=name)
    assert NODE is not None
    node = await Process([NODE, str(JS / "reach-agent.mjs"), "--gateway", url, "--id",
                          "calc-js-gw", "--token", channel.token, "--secret",
                          channel.secret("calc-js-gw")]).start()
    try:
        welcome = await welcomed(node)
        record = await rt.cluster.registry().lookup("calc-js-gw")
        assert record.host.startswith("reach.remote.")
        assert record.host != HOST  # the gateway replica's host, not this module's channel
        assert record.epoch == welcome["epoch"]
        reply = await rt.client.request("calc-js-gw", Add(a=40, b=2))
        assert reply.value == Sum(total=42, by="calc-js-gw")
    finally:
        await node.stop()
        await asyncio.to_thread(rt.stop_gateway, name)


async def test_a_supervised_python_agent_that_leaves_is_awaited_and_comes_back_restarted(
        rt: Any, channel: Channel) -> None:
    first = await reach_connect(channel, "calc-py-3").start()
    second: Process | None = None
    await welcomed_py(rt, "calc-py-3")
    sup = await rt.supervise(reach.SupervisorSpec("remote-tree", children=[
        reach.RemoteChild("calc-py-3", connect_within_s=60)]))
    try:
        epoch = (await rt.cluster.registry().lookup("calc-py-3")).epoch
        assert await first.stop() == 0  # goodbye: a permanent child is awaited again

        async def awaited() -> bool:
            record = await rt.cluster.registry().lookup("calc-py-3")
            return record is not None and record.status is reach.AgentStatus.RESTARTING

        await wait_until(awaited)
        call = asyncio.ensure_future(rt.client.request("calc-py-3", Add(a=3, b=4),
                                                       timeout_ms=60_000))
        await asyncio.sleep(0.5)
        assert not call.done()  # held while its supervisor waits for it
        second = await reach_connect(channel, "calc-py-3").start()
        reply = await asyncio.wait_for(call, 60)
        assert reply.value == Sum(total=7, by="calc-py-3")
        assert (await rt.cluster.registry().lookup("calc-py-3")).epoch > epoch

        async def restarted() -> Any:
            return [r for r in (await sup.status()).restarts if r.child == "calc-py-3"]

        (restart,) = await wait_until(restarted)
        assert restart.placement is reach.RestartPlacement.REMOTE
    finally:
        await sup.stop()
        await first.kill()
        if second is not None:
            await second.kill()
    assert await rt.cluster.registry().lookup("calc-py-3") is None  # stopping removed it


async def test_a_python_agent_killed_mid_request_comes_back_through_another_replica(
        rt: Any, channel: Channel) -> None:
    other = Channel(rt, f"{HOST}-b")
    first = await reach_connect(channel, "calc-py-4").start()
    second: Process | None = None
    try:
        await welcomed_py(rt, "calc-py-4")
        epoch = (await rt.cluster.registry().lookup("calc-py-4")).epoch
        call = asyncio.ensure_future(rt.client.request("calc-py-4", Add(a=4, b=5, sleep_s=3),
                                                       timeout_ms=60_000))

        async def taken() -> bool:
            info = await channel.host.info()
            return bool(info["agents"].get("calc-py-4"))

        await wait_until(taken)
        await first.kill()
        second = await reach_connect(other, "calc-py-4").start()  # the other replica

        async def moved() -> bool:
            record = await rt.cluster.registry().lookup("calc-py-4")
            return record is not None and record.host == f"{HOST}-b"

        await wait_until(moved)
        reply = await asyncio.wait_for(call, 60)
        assert reply.value == Sum(total=9, by="calc-py-4")
        assert (await rt.cluster.registry().lookup("calc-py-4")).epoch == epoch + 1
    finally:
        await first.kill()
        if second is not None:
            await second.stop()
        other.close()
