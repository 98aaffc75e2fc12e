"""Hello nonces are claimed cluster-wide on real Ray: a hello captured at one gateway replica
(its channel on uvicorn, its RemoteHost a Ray actor) and replayed through another replica is
refused there as a replayed nonce (4403), audited, while a fresh hello still gets in."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from channel_helpers import HOST, Channel

from reach.remote.wire import CloseCode

pytestmark = [pytest.mark.integration]


def a_hello(channel: Channel, agent_id: str) -> str:
    return channel.hello(agent_id, ("math.add",))


async def welcomed_then_goodbye(channel: Channel, frame: str) -> None:
    from websockets.asyncio.client import connect

    async with connect(f"{channel.url}/v1/agents/connect",
                       additional_headers={"Authorization": f"Bearer {channel.token}"}) as ws:
        await ws.send(frame)
        assert '"welcome"' in str(await asyncio.wait_for(ws.recv(), 30))
        await ws.send('{"type":"goodbye"}')
        await asyncio.wait_for(ws.wait_closed(), 30)


async def closed_with(channel: Channel, frame: str) -> tuple[int, str]:
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed

    async with connect(f"{channel.url}/v1/agents/connect",
                       additional_headers={"Authorization": f"Bearer {channel.token}"}) as ws:
        await ws.send(frame)
        with pytest.raises(ConnectionClosed) as closed:
            await asyncio.wait_for(ws.recv(), 30)
    assert closed.value.rcvd is not None
    return closed.value.rcvd.code, closed.value.rcvd.reason


async def test_a_hello_replayed_through_another_replica_is_refused_and_audited(rt: Any) -> None:
    first, other = Channel(rt, f"{HOST}-n1"), Channel(rt, f"{HOST}-n2")
    try:
        captured = a_hello(first, "nonce-py-1")
        await welcomed_then_goodbye(first, captured)  # the agent has left: its ID is free
        code, reason = await closed_with(other, captured)
        assert code == CloseCode.BAD_SIGNATURE
        assert reason.startswith("replayed_nonce")
        assert await rt.cluster.registry().lookup("nonce-py-1") is None
        await other.host.flush_audit()
        records = await rt.cluster.audit_log().audit_records(None, "nonce-py-1", 10)
        assert "refused: replayed_nonce" in [r["outcome"] for r in records]
        await welcomed_then_goodbye(other, a_hello(other, "nonce-py-1"))  # a fresh one gets in
    finally:
        first.close()
        other.close()
