"""Durable sessions on a real SQLite file and a real Ray: negotiation, context, compaction,
recovery of pending requests, effectively-once handlers."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import pytest
import ray
from ray_helpers import wait_until
from support_agents import Asker, CancellingAsker, Forward, Summariser, Talker, Text

import reach
from reach import ChildSpec, SupervisorSpec, Terms

pytestmark = pytest.mark.integration

FAST = reach.Backoff(base_s=0.01, cap_s=0.05)


def lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


async def kill_host_of(rt: Any, agent_id: str) -> None:
    """SIGKILLs the process of an agent's host."""
    rec = await rt.cluster.registry().lookup(agent_id)
    info = await rt.cluster.host(rec.host).info()
    os.kill(info["pid"], signal.SIGKILL)


async def test_opening_a_session_negotiates_terms_with_the_responder(rt: Any) -> None:
    await rt.spawn(Talker, "ss-neg", placement=reach.Packed(pool="sessions"))
    session = await rt.open_session(rt.client.sender, "ss-neg",
                                    Terms(max_message_bytes=1 << 20, timeout_ms=5000))
    assert session.terms.max_message_bytes == 64 * 1024  # capped by the responder's limit
    assert session.terms.timeout_ms == 5000
    assert (session.initiator, session.responder) == (rt.client.sender, "ss-neg")
    found = await rt.session(session.session_id)  # read back from the store
    assert (found.terms, found.initiator, found.responder) == (
        session.terms, rt.client.sender, "ss-neg")
    with pytest.raises(reach.SessionRefused) as err:
        await rt.open_session(rt.client.sender, "ss-neg", Terms(streaming=True))
    assert err.value.details["setting"] == "streaming"
    with pytest.raises(reach.SessionRefused) as err:
        await rt.open_session(rt.client.sender, "ss-neg", Terms(message_format="json"))
    assert err.value.details["setting"] == "message_format"


async def test_messages_are_numbered_in_order_and_read_back_with_context_and_resume(
    rt: Any
) -> None:
    await rt.spawn(Talker, "ss-ctx", placement=reach.Packed(pool="sessions"))
    session = await rt.open_session(rt.client.sender, "ss-ctx")
    seqs = [await session.append("me", {"text": f"m{i} 订单"}) for i in range(8)]
    assert seqs == list(range(1, 9))
    context = await session.context(last_n=3)
    assert [m.seq for m in context.messages] == [6, 7, 8]
    assert context.messages[-1].payload == {"text": "m7 订单"}
    resumed = await session.since(5)
    assert [m.seq for m in resumed.messages] == [6, 7, 8]
    assert resumed.folded is False
    # An append retried with the same msg_id (its acknowledgement was lost) is not doubled.
    again = await session.append("me", {"text": "once"}, msg_id="fixed-id")
    assert await session.append("me", {"text": "once"}, msg_id="fixed-id") == again


async def test_compaction_folds_old_messages_into_the_summary_and_keeps_the_last_ones(
    rt: Any
) -> None:
    await rt.spawn(Talker, "ss-fold", placement=reach.Packed(pool="sessions"))
    session = await rt.open_session(rt.client.sender, "ss-fold")
    for i in range(45):  # the test store folds past 30 messages, keeping the last 10
        await session.append("me", {"text": f"line {i}"})

    async def folded() -> reach.SessionContext | None:
        context = await session.context(last_n=100)
        return context if context.folded_upto > 0 else None

    context = await wait_until(folded)
    assert "#1 me: line 0" in context.summary
    assert len(context.messages) <= 30
    assert context.messages[-1].payload == {"text": "line 44"}
    assert context.messages[0].seq == context.folded_upto + 1
    resumed = await session.since(3)
    assert resumed.folded is True
    assert "line 3" in resumed.summary


async def test_a_twelve_turn_conversation_survives_its_responder_being_killed_mid_request(
    rt: Any, tmp_path: Path
) -> None:
    runs, marker = tmp_path / "runs", tmp_path / "slept"
    sup = await rt.supervise(SupervisorSpec("ss-conv", backoff=FAST, children=[
        ChildSpec(Talker, "ss-bob", kwargs={"runs": str(runs), "slow_marker": str(marker)})]))
    session = await rt.open_session(rt.client.sender, "ss-bob")
    replies = []
    for turn in range(1, 13):
        text = f"slow turn {turn}" if turn == 7 else f"turn {turn}"
        call = asyncio.ensure_future(session.request(Text(text=text), returns=Text,
                                                     timeout_ms=60_000))
        if turn == 7:
            await wait_until(lambda: _true_if(marker.exists()))
            await kill_host_of(rt, "ss-bob")
        replies.append((await call).value.text)
    # Each turn saw every acknowledged message before it: 2 per earlier turn, plus its request.
    for turn, text in enumerate(replies, start=1):
        assert f"saw {2 * turn - 1} before" in text, text
    context = await session.context(last_n=100)
    kinds = [(m.seq, m.kind) for m in context.messages]
    assert len(kinds) == 24
    assert [s for s, _ in kinds] == list(range(1, 25))
    assert [k for _, k in kinds] == ["request", "reply"] * 12
    requests = [m.msg_id for m in context.messages if m.kind == "request"]
    store = rt.cluster.sessions()
    statuses = [await store.pending_status(r) for r in requests]
    assert statuses == ["answered"] * 12
    # Turn 7 ran twice (the first run was killed before it finished), every other turn once.
    counts = {r: sum(1 for line in lines(runs) if line.startswith(r)) for r in requests}
    assert counts[requests[6]] == 2
    assert all(c == 1 for r, c in counts.items() if r != requests[6])
    await sup.stop()


async def _true_if(value: bool) -> bool:
    return value


async def test_a_request_retried_after_a_crash_runs_its_handler_once(
    rt: Any, tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    sup = await rt.supervise(SupervisorSpec("ss-once", backoff=FAST, children=[
        ChildSpec(Talker, "ss-once-1", kwargs={"runs": str(runs)})]))
    session = await rt.open_session(rt.client.sender, "ss-once-1")
    # One request of the session, built once and sent twice (as a resend after a crash is).
    courier = rt.client.courier
    env = courier.build_request("ss-once-1", Text(text="pay 10 EUR"),
                                session_id=session.session_id, timeout_ms=60_000)
    first = await courier.call(env)
    registry = rt.cluster.registry()
    before = (await registry.lookup("ss-once-1")).epoch
    await kill_host_of(rt, "ss-once-1")

    async def back() -> bool:
        rec = await registry.lookup("ss-once-1")
        return rec is not None and rec.status is reach.AgentStatus.ONLINE and rec.epoch > before

    await wait_until(back)
    retried = await courier.call(env)  # the same request, after the crash
    assert retried.payload == first.payload
    assert sum(1 for line in lines(runs) if line.startswith(env.msg_id)) == 1
    await sup.stop()


@pytest.mark.parametrize(("asker", "outcome"), [(Asker, "answered"),
                                                (CancellingAsker, "cancelled")])
async def test_a_restarted_requester_resends_or_cancels_its_pending_request_exactly_once(
    rt: Any, tmp_path: Path, asker: type[reach.Agent], outcome: str
) -> None:
    name = f"ss-{outcome}"
    runs, outcomes, marker = tmp_path / "runs", tmp_path / "outcomes", tmp_path / "slept"
    sup = await rt.supervise(SupervisorSpec(name, backoff=FAST, children=[
        ChildSpec(Talker, f"{name}-bob", kwargs={"runs": str(runs), "slow_marker": str(marker)}),
        ChildSpec(asker, f"{name}-alice", kwargs={"outcomes": str(outcomes)})]))
    session = await rt.open_session(f"{name}-alice", f"{name}-bob")
    await rt.client.notify(f"{name}-alice", Forward(to=[session.session_id, f"{name}-bob"],
                                                    text="slow3", timeout_ms=60_000))
    await wait_until(lambda: _true_if(marker.exists()))  # bob is working on it
    await kill_host_of(rt, f"{name}-alice")  # alice dies while she waits for bob

    recovered = await wait_until(
        lambda: _true_if([x for x in lines(outcomes) if x.startswith("recovered")]))
    (request_id,) = [x.split()[1] for x in recovered]
    assert recovered[0].split()[2] == outcome
    assert await rt.cluster.sessions().pending_status(request_id) == outcome
    assert sum(1 for line in lines(runs) if line.startswith(request_id)) == 1
    assert not [x for x in lines(outcomes) if x.startswith("answered ")]  # not both
    await sup.stop()


async def test_an_unknown_session_is_session_not_found(rt: Any) -> None:
    with pytest.raises(reach.SessionNotFound):
        await rt.session("ss-no-such-session")
    # A handle made by hand on a session the store does not have: it reads and writes nothing.
    ghost = reach.Session("ss-no-such-session", Terms(), rt.client.sender, "nobody", rt.client)
    with pytest.raises(reach.SessionNotFound):
        await ghost.append("me", {"text": "hello?"})
    with pytest.raises(reach.SessionNotFound):
        await ghost.context()
    with pytest.raises(reach.SessionNotFound):
        await ghost.since(0)


async def test_an_agent_can_be_the_summariser(rt: Any, tmp_path: Path) -> None:
    from actors.sessions import SessionStore
    from reach._ray.ports import RaySessions

    await rt.spawn(Summariser, "ss-summariser", placement=reach.Packed(pool="sessions"))
    name = "reach.sessions.summarised"  # a second store, beside the deployment's own
    handle = ray.remote(SessionStore).options(name=name, namespace="reach").remote(
        rt.cluster, str(tmp_path / "summarised.db"), name=name, compact_after=6, keep_last=2,
        summariser="ss-summariser")

    async def started() -> Any:
        try:
            return rt.cluster.endpoint(name)
        except reach.AgentUnavailable:  # its name is not registered yet
            return None

    await wait_until(started)
    store = RaySessions(handle, name)  # the second store's sessions
    try:
        await store.open_session("ss-sum", "me", "you", {}, {})
        for i in range(9):
            await store.call("append", "ss-sum", [{"msg_id": f"m{i}", "sender": "me",
                                                   "payload": {"text": f"line {i}"}}])

        async def folded() -> reach.SessionContext | None:
            context = await store.context("ss-sum", 100)
            return context if context.folded_upto > 0 else None

        context = await wait_until(folded)
        assert context.summary == f"{context.folded_upto} messages folded by ss-summariser"
        assert [m.payload["text"] for m in context.messages][-1] == "line 8"
    finally:
        ray.kill(handle)
        rt.cluster.forget(name)


async def test_a_payload_the_store_cannot_encode_is_refused_not_hung(rt: Any) -> None:
    import datetime

    await rt.spawn(Talker, "ss-bad-payload", placement=reach.Packed(pool="sessions"))
    session = await rt.open_session(rt.client.sender, "ss-bad-payload")
    with pytest.raises(reach.ProtocolError, match="cannot store"):
        await session.append("me", {"when": datetime.datetime(2026, 11, 30)})
    assert await session.append("me", {"text": "still works"}) == 1


async def test_concurrent_audit_writes_keep_one_unbroken_chain(
    rt: Any, sessions_db: Path
) -> None:
    from reach.tools import audit

    batches = [[{"caller": f"c{i}", "callee": "x", "capability": "", "msg_type": "test",
                 "outcome": "ok", "trace_id": f"audit-storm-{i}"}] * 3 for i in range(20)]
    store = rt.cluster.audit_log()
    seqs = await asyncio.gather(*(store.audit(b) for b in batches))
    flat = [s for batch in seqs for s in batch]
    assert len(set(flat)) == 60
    assert audit.verify(sessions_db).ok
