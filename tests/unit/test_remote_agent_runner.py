"""A remote agent's own process: it obeys a cancel only from the request's sender (reach's host
sends its cancels as that sender), and it sends within the gateway's frame limit."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from pydantic import BaseModel

import reach
from reach.errors import CodecError
from reach.protocol import Envelope, MsgType
from reach.remote.client import ConnectionEnded, RemoteAgentRunner
from reach.remote.wire import FrameType, envelope_json
from reach.sessions import CANCEL_SCHEMA

RELEASE = asyncio.Event()


@reach.schema("rcancel.hold@1.0")
class Hold(BaseModel):
    tag: str


class Holder(reach.Agent):
    capabilities = ("hold.it",)

    @reach.handler(Hold, returns=Hold)
    async def hold(self, ctx: reach.Context, m: Hold) -> Hold:
        await RELEASE.wait()
        return m


class ScriptedSocket:
    """A socket whose incoming frames the test puts, and whose sent frames it reads."""

    def __init__(self) -> None:
        self.incoming: asyncio.Queue[str | None] = asyncio.Queue()
        self.sent: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def send(self, text: str) -> None:
        await self.sent.put(json.loads(text))

    async def recv(self) -> str:
        text = await self.incoming.get()
        if text is None:
            raise ConnectionEnded("closed", details={"close": 1000})
        return text

    async def close(self, code: int = 1000, reason: str = "") -> None:
        self.incoming.put_nowait(None)

    def deliver(self, env: Envelope) -> None:
        self.incoming.put_nowait(json.dumps({"type": FrameType.ENVELOPE.value,
                                             "envelope": envelope_json(env)}))

    async def next_envelope(self) -> dict[str, Any]:
        while True:
            frame = await asyncio.wait_for(self.sent.get(), 10)
            if frame["type"] == FrameType.BATCH.value:
                return dict(frame["envelopes"][0])
            if frame["type"] == FrameType.ENVELOPE.value:
                return dict(frame["envelope"])


def _cancel(sender: str, request_id: str) -> Envelope:
    return Envelope.notification(sender, "holder-1", {"request_id": request_id, "reason": "x"},
                                 CANCEL_SCHEMA)


async def test_a_remote_agent_ignores_a_cancel_from_one_who_did_not_send_the_request() -> None:
    RELEASE.clear()
    sock = ScriptedSocket()
    runner = RemoteAgentRunner(Holder(), "holder-1", None)
    serving = asyncio.ensure_future(runner.run(sock))
    try:
        assert (await asyncio.wait_for(sock.sent.get(), 10))["type"] == FrameType.HELLO.value
        sock.incoming.put_nowait(json.dumps({"type": FrameType.WELCOME.value, "epoch": 1}))
        first = Envelope.request("caller-1", "holder-1", Hold(tag="one"), timeout_ms=60_000)
        second = Envelope.request("caller-1", "holder-1", Hold(tag="two"), timeout_ms=60_000)
        sock.deliver(first)
        sock.deliver(second)
        sock.deliver(_cancel("mallory", first.msg_id))  # not mallory's: ignored
        sock.deliver(_cancel("caller-1", second.msg_id))  # its sender's: obeyed
        cancelled = await sock.next_envelope()
        assert (cancelled["request_id"], cancelled["msg_type"]) == (second.msg_id,
                                                                    MsgType.ERROR.value)
        assert cancelled["error_info"]["code"] == "task_cancelled"
        RELEASE.set()
        answered = await sock.next_envelope()
        assert (answered["request_id"], answered["msg_type"]) == (first.msg_id,
                                                                  MsgType.RESPONSE.value)
        assert answered["payload"] == {"tag": "one"}
    finally:
        RELEASE.set()
        await sock.close()
        await asyncio.wait_for(serving, 10)


async def test_a_remote_agents_batches_are_split_to_the_gateways_frame_limit() -> None:
    sock = ScriptedSocket()
    runner = RemoteAgentRunner(Holder(), "holder-1", None)
    serving = asyncio.ensure_future(runner.run(sock))
    try:
        await asyncio.wait_for(sock.sent.get(), 10)  # the hello
        sock.incoming.put_nowait(json.dumps({"type": FrameType.WELCOME.value, "epoch": 1,
                                             "max_frame_bytes": 2048}))
        notes = [Envelope.notification("holder-1", "peer-1", {"text": f"{i:03d}" + "x" * 200},
                                       "rcancel.note@1.0") for i in range(30)]
        for note in notes:
            runner.send(note)
        big = Envelope.request("holder-1", "peer-1", {"text": "y" * 4000}, "rcancel.note@1.0",
                               timeout_ms=60_000)
        with pytest.raises(CodecError, match="frame limit"):
            await asyncio.wait_for(runner.call(big), 10)  # at once, not at its deadline
        got: list[str] = []
        while len(got) < len(notes):
            frame = await asyncio.wait_for(sock.sent.get(), 10)
            assert len(json.dumps(frame).encode()) <= 2048
            items = frame["envelopes"] if frame["type"] == FrameType.BATCH.value else [
                frame["envelope"]]
            got.extend(i["msg_id"] for i in items)
        assert got == [n.msg_id for n in notes]  # every one, in order
    finally:
        await sock.close()
        await asyncio.wait_for(serving, 10)
