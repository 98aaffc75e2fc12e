"""Hello nonces are claimed cluster-wide, in the registry: a hello seen by one gateway replica
is refused by every other; the registry's set expires and is bounded, with a clear refusal when
full; after a registry restart the time window alone bounds a replay."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest
from test_remote_host import HOST, Gateway, on_channel, second_replica

from actors.hello_nonces import NONCE_TTL_MAX_S
from reach import clock
from reach._runtime.names import REGISTRY_NAME
from reach.errors import AgentUnavailable, AuthError
from reach.remote.wire import HELLO_WINDOW_S, CloseCode, Declaration, make_hello
from reach.security.guard import SecurityConfig, resolve_keyring, signed_call
from reach.testing import FakeCluster, run

T = TypeVar("T")


async def within(step: Awaitable[T], seconds: float = 30.0) -> T:
    """``step``, or a TimeoutError after ``seconds`` (virtual: no wall time), never a hang."""
    return await asyncio.wait_for(step, seconds)


def hello(gw: Gateway, agent_id: str, nonce: str) -> str:
    secret = gw.secret(agent_id)
    assert secret is not None
    return json.dumps(make_hello(agent_id, Declaration(capabilities=("math.add",)), secret,
                                 now_ms=round(clock.now() * 1000), nonce=nonce))


async def welcomed(gw: Gateway, frame: str) -> None:
    """Says ``frame`` through ``gw``, is welcomed, and leaves with goodbye."""
    sock = gw.socket()
    await sock.send(frame)
    assert (await within(sock.recv_json()))["type"] == "welcome"
    await sock.send('{"type":"goodbye"}')
    await within(sock.closed_with())


async def refused(gw: Gateway, frame: str) -> tuple[int, str]:
    sock = gw.socket()
    await sock.send(frame)
    code, reason = await within(sock.closed_with())
    return code, reason


def test_a_hello_replayed_through_another_replica_is_refused_as_a_replayed_nonce(
        tmp_path: Path) -> None:
    async def scenario(fake: FakeCluster, gw: Gateway) -> None:
        other = second_replica(fake, gw)
        captured = hello(gw, "calc-7", "77" * 16)
        await welcomed(gw, captured)  # the agent has left: only the nonce stands in the way
        code, reason = await refused(other, captured)
        assert (code, reason.split(":")[0]) == (CloseCode.BAD_SIGNATURE, "replayed_nonce")
        assert await fake.registry().lookup("calc-7") is None
        outcomes = [r["outcome"] for r in await other.audit("calc-7")]
        assert "refused: replayed_nonce" in outcomes
        # while it is connected, a replay through another replica is a replay too
        live = hello(gw, "calc-8", "88" * 16)
        sock = gw.socket()
        await sock.send(live)
        assert (await within(sock.recv_json()))["type"] == "welcome"
        code, reason = await refused(other, live)
        assert reason.startswith("replayed_nonce")
        await welcomed(other, hello(gw, "calc-9", "99" * 16))  # a fresh hello gets in

    on_channel(scenario, signed=tmp_path)


def test_after_a_registry_restart_the_time_window_still_bounds_a_replay(tmp_path: Path) -> None:
    async def scenario(fake: FakeCluster, gw: Gateway) -> None:
        captured = hello(gw, "calc-7", "71" * 16)
        await welcomed(gw, captured)
        fake.crash(REGISTRY_NAME)  # comes back empty: the nonce is forgotten
        await asyncio.sleep(HELLO_WINDOW_S + 1)
        code, reason = await refused(gw, captured)
        assert (code, reason.split(":")[0]) == (CloseCode.BAD_SIGNATURE, "replay_window")

    on_channel(scenario, signed=tmp_path)


def signed_claim(fake: FakeCluster, signer: str, nonce: str, expires_at: float,
                 ) -> asyncio.Future[bool]:
    data, sig = signed_call(fake.guard(), signer, [nonce, expires_at])
    return asyncio.ensure_future(fake.registry().claim_nonce(signer, data, sig))


def on_signed(tmp_path: Path,
              scenario: Callable[[FakeCluster], Coroutine[Any, Any, None]]) -> None:
    security = SecurityConfig(sign=True, keyring=resolve_keyring(tmp_path / "keyring.json",
                                                                 create=True))
    run(scenario, security=security)


def test_the_registry_claims_a_nonce_once_and_forgets_it_once_expired(tmp_path: Path) -> None:
    async def scenario(fake: FakeCluster) -> None:
        now = clock.now()
        assert await signed_claim(fake, HOST, "aa" * 16, now + 60)
        assert not await signed_claim(fake, f"{HOST}-b", "aa" * 16, now + 60)
        await asyncio.sleep(61)
        assert await signed_claim(fake, HOST, "bb" * 16, clock.now() + 60)
        assert fake.process(REGISTRY_NAME).nonces.held.keys() == {"bb" * 16}  # the expired dropped
        assert await signed_claim(fake, HOST, "aa" * 16, clock.now() + 60)
        # a caller cannot make one last for ever
        assert await signed_claim(fake, HOST, "cc" * 16, clock.now() + 1e9)
        assert fake.process(REGISTRY_NAME).nonces.held["cc" * 16] <= clock.now() + NONCE_TTL_MAX_S

    on_signed(tmp_path, scenario)


def test_a_full_nonce_set_refuses_clearly_until_nonces_expire(tmp_path: Path) -> None:
    async def scenario(fake: FakeCluster) -> None:
        fake.process(REGISTRY_NAME).nonces.limit = 3
        now = clock.now()
        for n in range(3):
            assert await signed_claim(fake, HOST, f"{n:032x}", now + 10 + n)
        with pytest.raises(AgentUnavailable) as full:
            await signed_claim(fake, HOST, "ff" * 16, now + 10)
        assert full.value.details["reason"] == "nonce_limit"
        assert len(fake.process(REGISTRY_NAME).nonces) == 3  # bounded: nothing was added
        await asyncio.sleep(10.5)  # the first expires
        assert await signed_claim(fake, HOST, "ff" * 16, clock.now() + 10)

    on_signed(tmp_path, scenario)


def test_only_a_remote_agents_host_may_claim_nonces(tmp_path: Path) -> None:
    async def scenario(fake: FakeCluster) -> None:
        with pytest.raises(AuthError) as refused_:
            await signed_claim(fake, "reach.pool.default.0", "aa" * 16, clock.now() + 60)
        assert refused_.value.details["reason"] == "not_a_remote_host"
        assert await signed_claim(fake, HOST, "aa" * 16, clock.now() + 60)

    on_signed(tmp_path, scenario)


def test_a_full_nonce_set_closes_a_hello_with_4503_so_the_agent_comes_back_later(
        tmp_path: Path) -> None:
    async def scenario(fake: FakeCluster, gw: Gateway) -> None:
        fake.process(REGISTRY_NAME).nonces.limit = 1
        await welcomed(gw, hello(gw, "calc-1", "01" * 16))
        code, reason = await refused(gw, hello(gw, "calc-2", "02" * 16))
        assert (code, reason.split(":")[0]) == (CloseCode.UNAVAILABLE, "nonce_limit")
        assert await fake.registry().lookup("calc-2") is None

    on_channel(scenario, signed=tmp_path)
