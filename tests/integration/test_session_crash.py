"""The session store killed at random moments during a write storm, 50 times."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
from typing import Any

import pytest
from ray_helpers import wait_until
from support_agents import Talker

import reach

pytestmark = [pytest.mark.integration, pytest.mark.slow]

KILLS = 50
WRITERS = 6
BATCH = 3
PER_SESSION = 27  # below the test store's compaction threshold: every message stays readable


async def test_every_acknowledged_write_survives_50_kills_of_the_store(rt: Any) -> None:
    await rt.spawn(Talker, "ss-crash-peer", placement=reach.Packed(pool="sessions"))
    store = rt.cluster.sessions()
    rng = random.Random(11)
    acked: dict[str, list[str]] = {}  # session -> msg_ids acknowledged, in order
    attempted: list[tuple[str, list[str]]] = []  # every batch ever sent, acknowledged or not
    stop = asyncio.Event()

    async def writer(w: int) -> None:
        n = 0
        while not stop.is_set():
            session = await _open(rt, "ss-crash-peer")
            acked[session.session_id] = []
            while len(acked[session.session_id]) < PER_SESSION and not stop.is_set():
                ids = [f"w{w}-{n}-{k}" for k in range(BATCH)]
                n += 1
                attempted.append((session.session_id, ids))
                batch = [{"msg_id": i, "sender": f"w{w}", "payload": {"text": f"写 {i} ✓"}}
                         for i in ids]
                for _ in range(50):  # resend the same batch until it is acknowledged
                    try:
                        await store.call("append", session.session_id, batch)
                    except reach.AgentUnavailable:  # the store died before answering
                        continue
                    acked[session.session_id].extend(ids)
                    break

    writers = [asyncio.ensure_future(writer(w)) for w in range(WRITERS)]
    kills = 0
    while kills < KILLS:
        await asyncio.sleep(rng.uniform(0.02, 0.2))  # a random moment in the storm
        pid = (await _stats(rt))["pid"]
        os.kill(pid, signal.SIGKILL)
        kills += 1
        await wait_until(lambda pid=pid: _restarted(rt, pid), timeout_s=60)
    stop.set()
    outcomes = await asyncio.gather(*writers, return_exceptions=True)
    crashed = [o for o in outcomes if isinstance(o, BaseException)]
    assert not crashed, f"a writer crashed: {crashed[0]!r}"

    assert await store.integrity() == "ok"
    assert sum(len(v) for v in acked.values()) > 0
    for session_id, ids in acked.items():
        stored = (await store.since(session_id, 0, None)).messages
        seqs = [m.seq for m in stored]
        assert seqs == list(range(1, len(seqs) + 1)), "sequence has a gap or a repeat"
        present = [m.msg_id for m in stored]
        assert len(present) == len(set(present)), "a resent batch was written twice"
        assert set(ids) <= set(present), "an acknowledged message is missing"
    for session_id, ids in attempted:
        present = {m.msg_id for m in (await store.since(session_id, 0, None)).messages}
        assert len(set(ids) & present) in (0, BATCH), "a batch was half-written"


async def _open(rt: Any, peer: str) -> Any:
    for _ in range(50):
        try:
            return await rt.open_session(rt.client.sender, peer)
        except reach.AgentUnavailable:  # the store died before answering
            continue
    raise AssertionError("could not open a session")


async def _stats(rt: Any, timeout_s: float = 10.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            return await rt.cluster.sessions().stats()  # type: ignore[no-any-return]
        except reach.AgentUnavailable:
            await asyncio.sleep(0.1)  # poll: the store is restarting
    raise AssertionError("store never came back")


async def _restarted(rt: Any, old_pid: int) -> bool:
    try:
        return bool((await rt.cluster.sessions().stats())["pid"] != old_pid)
    except reach.AgentUnavailable:
        return False
