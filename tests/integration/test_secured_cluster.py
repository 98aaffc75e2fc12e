"""Security on a real cluster: signed registrations, the ACL enforced at hosts, unknown senders
refused, every call and refusal in the audit log, encrypted sessions.

The session cluster runs with reach's defaults: signing on, call auditing on, allow-all ACL.
"""

from __future__ import annotations

from typing import Any

import pytest
import ray
from conftest import wait_until
from support_agents import Echo, Forward, Forwarder, Talker, Text

import reach
from reach import Acl, AuthError, Rule, Severity
from reach.client import Client
from reach.guard import Guard, SecurityConfig, signed_call
from reach.names import STORE_NAME
from reach.security import Keyring

pytestmark = pytest.mark.integration

FORGER = "reach.pool.forged.0"


def entry(agent_id: str, host: str = FORGER) -> dict[str, Any]:
    return {"agent_id": agent_id, "capabilities": ["vault.read"], "description": "forged",
            "host": host, "node": "", "epoch": 0}


async def audit_of(agent: str) -> list[dict[str, Any]]:
    store = ray.get_actor(STORE_NAME, namespace="reach")
    records: list[dict[str, Any]] = await store.audit_records.remote(None, agent, 10_000)
    return records


async def test_a_forged_registration_never_enters_the_registry(rt: Any) -> None:
    stranger = Guard(SecurityConfig(keyring="unused"), Keyring.generate())
    data, sig = signed_call(stranger, FORGER, [[entry("forged-1")], True])
    with pytest.raises(AuthError) as excinfo:
        await rt.registry.register_many.remote(FORGER, data, sig)
    assert excinfo.value.details["reason"] == "bad_signature"

    data, _ = signed_call(None, FORGER, [[entry("forged-2")], True])
    with pytest.raises(AuthError) as excinfo:
        await rt.registry.register_many.remote(FORGER, data, None)
    assert excinfo.value.details["reason"] == "unsigned"

    # A genuine signature, but a host registering agents in another host's name.
    ours = rt.transport.codec.guard
    data, sig = signed_call(ours, FORGER, [[entry("forged-3", host="reach.pool.default.0")], True])
    with pytest.raises(AuthError) as excinfo:
        await rt.registry.register_many.remote(FORGER, data, sig)
    assert excinfo.value.details["reason"] == "foreign_host"

    for agent_id in ("forged-1", "forged-2", "forged-3"):
        assert await rt.registry.lookup.remote(agent_id) is None
    assert not [a for a in await rt.agents() if a.agent_id.startswith("forged-")]
    async def all_three() -> list[dict[str, Any]]:
        records = await audit_of(FORGER)
        return records if len(records) >= 3 else []

    records = await wait_until(all_three)  # hosts and the registry flush records in batches
    outcomes = sorted(r["outcome"] for r in records)
    assert outcomes == ["refused: bad_signature", "refused: foreign_host", "refused: unsigned"]


async def test_a_forged_heartbeat_is_refused(rt: Any) -> None:
    stranger = Guard(SecurityConfig(keyring="unused"), Keyring.generate())
    data, sig = signed_call(stranger, FORGER, {"anyone": 0})
    with pytest.raises(AuthError):
        await rt.registry.heartbeat.remote(FORGER, data, sig)


async def test_the_acl_refuses_a_call_with_a_fatal_auth_error_and_audits_it(rt: Any) -> None:
    await rt.spawn_many(Forwarder, ["sec-vault", "sec-fwd"],
                        placement=reach.Packed(pool="security"))
    # sec-fwd may not call test.* capabilities; drivers still may.
    version = await rt.set_acl(Acl((Rule(("sec-fwd",), ("test.*",), allow=False),)))
    assert version >= 1
    try:
        async def refused() -> Any:
            try:
                await rt.client.request("sec-fwd", Forward(to=["sec-vault"]))
            except AuthError as exc:
                return exc
            return None

        error = await wait_until(refused)  # hosts apply the ACL by their next heartbeat
        assert error.severity is Severity.FATAL
        assert error.details["reason"] == "acl"
        assert "sec-fwd may not call test.forward" in error.message
        direct = await rt.client.request("sec-vault", Forward(to=[]))
        assert direct.payload["agent_id"] == "sec-vault"
        async def refusal_recorded() -> bool:
            return any(r["caller"] == "sec-fwd" and r["outcome"] == "refused: acl"
                       for r in await audit_of("sec-vault"))

        assert await wait_until(refusal_recorded)
    finally:
        await rt.set_acl(Acl())

    async def allowed() -> Any:
        try:
            return await rt.client.request("sec-fwd", Forward(to=["sec-vault"]))
        except AuthError:
            return None

    reply = await wait_until(allowed)
    assert reply.payload["agent_id"] == "sec-vault"


async def test_a_sender_that_is_not_a_registered_agent_is_refused(rt: Any) -> None:
    await rt.spawn_many(Echo, ["sec-echo"], placement=reach.Packed(pool="security"))
    ghost = Client(rt.link, "ghost-agent")  # signs with the deployment's key, but unregistered
    with pytest.raises(AuthError) as excinfo:
        await ghost.request("sec-echo", Text(text="let me in"))
    assert excinfo.value.details["reason"] == "unknown_principal"
    records = await wait_until(lambda: audit_of("ghost-agent"))
    assert records[-1]["outcome"] == "refused: unknown_principal"


async def test_every_call_is_audited_with_its_outcome_and_trace(rt: Any) -> None:
    await rt.spawn_many(Echo, ["sec-audited"], placement=reach.Packed(pool="security"))
    reply = await rt.request("sec-audited", Text(text="hello"))

    async def recorded() -> list[dict[str, Any]]:
        store = ray.get_actor(STORE_NAME, namespace="reach")
        return list(await store.audit_records.remote(reply.trace_id, None, 100))

    records = await wait_until(recorded)
    assert [(r["caller"], r["callee"], r["capability"], r["msg_type"], r["outcome"])
            for r in records] == [(rt.client.sender, "sec-audited", "test.text@1.0", "request",
                                   "ok")]


async def test_an_encrypted_session_carries_plaintext_to_handlers(rt: Any) -> None:
    await rt.spawn(Talker, "sec-talker", placement=reach.Packed(pool="security"))
    session = await rt.open_session(rt.client.sender, "sec-talker", encrypt=True)
    assert session.session_id.startswith("enc-")
    reply = await session.request(rt.client, "sec-talker", Text(text="秘密 the plan"))
    assert reply.payload["text"].startswith("sec-talker saw ")
    assert reply.payload["text"].endswith(" before '秘密 the plan'")


async def test_an_agent_may_not_take_a_name_reserved_for_reach_processes(rt: Any) -> None:
    for agent_id in ("driver:evil", "reach.sup.evil", "reach.pool.x.0"):
        with pytest.raises(reach.ConfigError) as excinfo:
            await rt.spawn_many(Echo, [agent_id], placement=reach.Packed(pool="security"))
        assert excinfo.value.details["agent_id"] == agent_id
        assert await rt.registry.lookup.remote(agent_id) is None


async def test_only_a_signing_supervisor_or_driver_may_change_an_agents_status(rt: Any) -> None:
    await rt.spawn_many(Echo, ["sec-marked"], placement=reach.Packed(pool="security"))
    stranger = Guard(SecurityConfig(keyring="unused"), Keyring.generate())
    data, sig = signed_call(stranger, "reach.sup.rogue", [["sec-marked"], "offline"])
    with pytest.raises(AuthError) as excinfo:
        await rt.registry.mark.remote("reach.sup.rogue", data, sig)
    assert excinfo.value.details["reason"] == "bad_signature"
    ours = rt.transport.codec.guard
    data, sig = signed_call(ours, "reach.pool.security.0", [["sec-marked"], "offline"])
    with pytest.raises(AuthError) as excinfo:  # a genuine host, but hosts do not mark agents
        await rt.registry.mark.remote("reach.pool.security.0", data, sig)
    assert excinfo.value.details["reason"] == "not_a_supervisor"
    assert (await rt.registry.lookup.remote("sec-marked"))["status"] == "online"
