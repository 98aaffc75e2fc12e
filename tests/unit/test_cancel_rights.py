"""Who may cancel a request: its own sender, or a caller an ACL rule grants ``reach.cancel``;
anyone else is refused (``not_your_request``), audited, and the request runs on. And the IDs a
cancel names cannot be guessed."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import reach
from policies.acl import CANCEL_RIGHT, Acl, Rule, may_cancel
from reach.client import Client
from reach.errors import AuthError, Severity, TaskCancelled
from reach.protocol import new_id
from reach.security.guard import SecurityConfig, resolve_keyring
from reach.sessions import CANCEL_SCHEMA
from reach.testing import FakeCluster, eventually, run

#: The request IDs the slow agent is handling, in the order they arrived (one process: the fake).
SEEN: list[str] = []


@reach.schema("cancel.wait@1.0")
class Wait(BaseModel):
    seconds: float


@reach.schema("cancel.done@1.0")
class Done(BaseModel):
    slept: float


class Sleeper(reach.Agent):
    capabilities = ("sleep.wait",)
    description = "Sleeps as long as asked, then says so."

    @reach.handler(Wait, returns=Done)
    async def wait(self, ctx: reach.Context, m: Wait) -> Done:
        SEEN.append(ctx.request_envelope.msg_id)
        await asyncio.sleep(m.seconds)
        return Done(slept=m.seconds)


class Canceller(reach.Agent):
    """An agent that cancels whatever request it is told of (the attacker, or an operator)."""

    capabilities = ("ops.cancel",)

    @reach.handler(Wait, returns=Done)
    async def wait(self, ctx: reach.Context, m: Wait) -> Done:
        await ctx.notify("sleeper-1", {"request_id": SEEN[-1], "reason": "mine now"},
                         CANCEL_SCHEMA)
        return Done(slept=0)


async def _started(rt: Any) -> tuple[asyncio.Task[Any], str]:
    SEEN.clear()
    call = asyncio.ensure_future(rt.client.request("sleeper-1", Wait(seconds=5),
                                                   timeout_ms=60_000))

    async def seen() -> bool:
        return bool(SEEN)

    await eventually(seen, every_s=0.01)
    return call, SEEN[-1]


async def _audit(fake: FakeCluster, rt: Any, agent_id: str) -> list[dict[str, Any]]:
    host = (await rt.cluster.registry().lookup(agent_id)).host
    await fake.process(host).flush_audit()
    return list(await fake.audit_log().audit_records(None, None, 100))


def test_a_cancel_from_someone_who_did_not_send_the_request_is_refused_and_audited() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        await rt.spawn(Sleeper, "sleeper-1")
        await rt.spawn(Canceller, "mallory")
        call, request_id = await _started(rt)
        await rt.client.request("mallory", Wait(seconds=0))  # mallory sends its cancel
        reply = await call
        assert reply.value == Done(slept=5)  # the request ran to its end
        audit = await _audit(fake, rt, "sleeper-1")
        refused = [r for r in audit if r["outcome"] == "refused: not_your_request"]
        assert [(r["caller"], r["callee"]) for r in refused] == [("mallory", "sleeper-1")]
        assert request_id

    run(scenario)


def test_a_cancel_sent_as_a_request_by_a_stranger_gets_a_fatal_auth_error() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        await rt.spawn(Sleeper, "sleeper-1")
        call, request_id = await _started(rt)
        stranger = Client(rt.link, "stranger-1")
        with pytest.raises(AuthError) as caught:
            await stranger.request("sleeper-1", {"request_id": request_id, "reason": "x"},
                                   CANCEL_SCHEMA)
        assert caught.value.severity is Severity.FATAL
        assert caught.value.details["reason"] == "not_your_request"
        assert caught.value.details["principal"] == "stranger-1"
        assert (await call).value == Done(slept=5)

    run(scenario)


def test_the_requests_own_sender_cancels_it() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        await rt.spawn(Sleeper, "sleeper-1")
        call, request_id = await _started(rt)
        answer = await rt.client.request("sleeper-1", {"request_id": request_id,
                                                       "reason": "changed my mind"},
                                         CANCEL_SCHEMA)
        assert answer.value == {"cancelled": 1}
        with pytest.raises(TaskCancelled):
            await call

    run(scenario)


def test_a_caller_granted_reach_cancel_by_the_acl_may_cancel_others_requests(
        tmp_path: Path) -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        await rt.spawn(Sleeper, "sleeper-1")
        await rt.spawn(Canceller, "ops-1")
        host = (await rt.cluster.registry().lookup("sleeper-1")).host
        fake.process(host).transport.codec.guard.set_acl(
            Acl((Rule(("ops-*",), (CANCEL_RIGHT,)),)))
        call, _ = await _started(rt)
        await rt.client.request("ops-1", Wait(seconds=0))
        with pytest.raises(TaskCancelled, match="cancelled by ops-1"):
            await call

    run(scenario, security=SecurityConfig(
        sign=True, keyring=resolve_keyring(tmp_path / "keyring.json", create=True)))


def test_only_a_rule_naming_reach_cancel_grants_it_not_a_blanket_allow() -> None:
    blanket = Acl((Rule(("*",), ("*",)),), default_allow=True)
    assert not may_cancel(blanket, "mallory", (), "driver:1").allowed
    assert not may_cancel(Acl(), "mallory", (), "driver:1").allowed
    assert may_cancel(Acl(), "driver:1", (), "driver:1").allowed
    granted = Acl((Rule(("cap:ops.*",), (CANCEL_RIGHT,)),))
    assert may_cancel(granted, "op-7", ("ops.cancel",), "driver:1").allowed
    assert not may_cancel(granted, "op-7", ("sales",), "driver:1").allowed
    denied = Acl((Rule(("op-7",), (CANCEL_RIGHT,), allow=False),
                  Rule(("op-*",), (CANCEL_RIGHT,))))
    assert not may_cancel(denied, "op-7", (), "driver:1").allowed
    assert may_cancel(denied, "op-8", (), "driver:1").allowed


def test_ids_come_from_the_operating_systems_csprng(monkeypatch: pytest.MonkeyPatch) -> None:
    drawn: list[int] = []

    def urandom(n: int) -> bytes:
        drawn.append(n)
        return bytes(range(n))

    monkeypatch.setattr(os, "urandom", urandom)
    assert new_id() == bytes(range(16)).hex()
    assert drawn == [16]
