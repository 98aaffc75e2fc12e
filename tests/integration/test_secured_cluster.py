"""Security on a real cluster: signed registrations, the ACL enforced at hosts, unknown senders
refused, every call and refusal in the audit log, encrypted sessions.

The session cluster runs with reach's defaults: signing on, call auditing on, allow-all ACL.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from ray_helpers import wait_until
from support_agents import Echo, Forward, Forwarder, Info, Talker, Text

import reach
from reach import Acl, AuthError, Rule, Severity
from reach.client import Client
from reach.security.guard import Guard, SecurityConfig, signed_call
from reach.security.keys import Keyring

pytestmark = pytest.mark.integration

FORGER = "reach.pool.forged.0"


def entry(agent_id: str, host: str = FORGER) -> dict[str, Any]:
    return {"agent_id": agent_id, "capabilities": ["vault.read"], "description": "forged",
            "host": host, "node": "", "epoch": 0}


async def audit_of(rt: Any, agent: str) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = await rt.cluster.audit_log().audit_records(None, agent, 10_000)
    return records


async def test_a_forged_registration_never_enters_the_registry(rt: Any) -> None:
    registry = rt.cluster.registry()
    stranger = Guard(SecurityConfig(keyring="unused"), Keyring.generate())
    data, sig = signed_call(stranger, FORGER, [[entry("forged-1")], True])
    with pytest.raises(AuthError) as excinfo:
        await registry.register_many(FORGER, data, sig)
    assert excinfo.value.details["reason"] == "bad_signature"

    data, _ = signed_call(None, FORGER, [[entry("forged-2")], True])
    with pytest.raises(AuthError) as excinfo:
        await registry.register_many(FORGER, data, None)
    assert excinfo.value.details["reason"] == "unsigned"

    # A genuine signature, but a host registering agents in another host's name.
    ours = rt.transport.codec.guard
    data, sig = signed_call(ours, FORGER, [[entry("forged-3", host="reach.pool.default.0")], True])
    with pytest.raises(AuthError) as excinfo:
        await registry.register_many(FORGER, data, sig)
    assert excinfo.value.details["reason"] == "foreign_host"

    for agent_id in ("forged-1", "forged-2", "forged-3"):
        assert await registry.lookup(agent_id) is None
    assert not [a for a in await rt.agents() if a.agent_id.startswith("forged-")]

    async def all_three() -> list[dict[str, Any]]:
        records = await audit_of(rt, FORGER)
        return records if len(records) >= 3 else []

    records = await wait_until(all_three)  # hosts and the registry flush records in batches
    outcomes = sorted(r["outcome"] for r in records)
    assert outcomes == ["refused: bad_signature", "refused: foreign_host", "refused: unsigned"]


async def test_a_forged_heartbeat_is_refused(rt: Any) -> None:
    stranger = Guard(SecurityConfig(keyring="unused"), Keyring.generate())
    data, sig = signed_call(stranger, FORGER, {"anyone": 0})
    with pytest.raises(AuthError) as excinfo:
        await rt.cluster.registry().heartbeat(FORGER, data, sig)
    assert excinfo.value.details["reason"] == "bad_signature"


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
        direct = await rt.client.request("sec-vault", Forward(to=[]), returns=Info)
        assert direct.value.agent_id == "sec-vault"

        async def refusal_recorded() -> bool:
            return any(r["caller"] == "sec-fwd" and r["outcome"] == "refused: acl"
                       for r in await audit_of(rt, "sec-vault"))

        assert await wait_until(refusal_recorded)
    finally:
        await rt.set_acl(Acl())

    async def allowed() -> Any:
        try:
            return await rt.client.request("sec-fwd", Forward(to=["sec-vault"]), returns=Info)
        except AuthError:
            return None

    reply = await wait_until(allowed)
    assert reply.value.agent_id == "sec-vault"


async def test_a_sender_that_is_not_a_registered_agent_is_refused(rt: Any) -> None:
    await rt.spawn_many(Echo, ["sec-echo"], placement=reach.Packed(pool="security"))
    ghost = Client(rt.link, "ghost-agent")  # signs with the deployment's key, but unregistered
    with pytest.raises(AuthError) as excinfo:
        await ghost.request("sec-echo", Text(text="let me in"))
    assert excinfo.value.details["reason"] == "unknown_principal"
    records = await wait_until(lambda: audit_of(rt, "ghost-agent"))
    assert records[-1]["outcome"] == "refused: unknown_principal"


async def test_every_call_is_audited_with_its_outcome_and_trace(rt: Any) -> None:
    await rt.spawn_many(Echo, ["sec-audited"], placement=reach.Packed(pool="security"))
    reply = await rt.client.request("sec-audited", Text(text="hello"))

    async def recorded() -> list[dict[str, Any]]:
        return list(await rt.cluster.audit_log().audit_records(reply.envelope.trace_id, None, 100))

    records = await wait_until(recorded)
    assert [(r["caller"], r["callee"], r["capability"], r["msg_type"], r["outcome"])
            for r in records] == [(rt.client.sender, "sec-audited", "test.text@1.0", "request",
                                   "ok")]


async def test_an_encrypted_session_carries_plaintext_to_handlers(rt: Any) -> None:
    await rt.spawn(Talker, "sec-talker", placement=reach.Packed(pool="security"))
    session = await rt.open_session(rt.client.sender, "sec-talker", encrypt=True)
    assert session.session_id.startswith("enc-")
    assert session.peer == "sec-talker"
    reply = await session.request(Text(text="秘密 the plan"), returns=Text)
    assert reply.value.text.startswith("sec-talker saw ")
    assert reply.value.text.endswith(" before '秘密 the plan'")


async def test_an_agent_may_not_take_a_name_reserved_for_reach_processes(rt: Any) -> None:
    for agent_id in ("driver:evil", "reach.sup.evil", "reach.pool.x.0"):
        with pytest.raises(reach.ConfigError) as excinfo:
            await rt.spawn_many(Echo, [agent_id], placement=reach.Packed(pool="security"))
        assert excinfo.value.details["agent_id"] == agent_id
        assert await rt.cluster.registry().lookup(agent_id) is None


async def test_only_a_signing_supervisor_or_driver_may_change_an_agents_status(rt: Any) -> None:
    await rt.spawn_many(Echo, ["sec-marked"], placement=reach.Packed(pool="security"))
    registry = rt.cluster.registry()
    stranger = Guard(SecurityConfig(keyring="unused"), Keyring.generate())
    data, sig = signed_call(stranger, "reach.sup.rogue", [["sec-marked"], "offline"])
    with pytest.raises(AuthError) as excinfo:
        await registry.mark("reach.sup.rogue", data, sig)
    assert excinfo.value.details["reason"] == "bad_signature"
    ours = rt.transport.codec.guard
    data, sig = signed_call(ours, "reach.pool.security.0", [["sec-marked"], "offline"])
    with pytest.raises(AuthError) as excinfo:  # a genuine host, but hosts do not mark agents
        await registry.mark("reach.pool.security.0", data, sig)
    assert excinfo.value.details["reason"] == "not_a_supervisor"
    assert (await registry.lookup("sec-marked")).status is reach.AgentStatus.ONLINE


#: A driver of its own process: joins the cluster at RAY_ADDRESS with the keyring named by
#: REACH_KEYRING, and prints how reach.init ended.
DRIVER = '''
import reach
try:
    rt = reach.init()
except reach.AuthError as exc:
    print(f"AuthError {exc.details.get('reason')}: {exc.message}")
    raise SystemExit(3) from None
print("joined")
rt.shutdown()
'''


async def run_driver(address: str, keyring: Path, *, sign: bool = True) -> tuple[int, str]:
    """Runs DRIVER in a process of its own; its exit status and output."""
    script = DRIVER if sign else DRIVER.replace("reach.init()", "reach.init(sign=False)")
    env = {**os.environ, "RAY_ADDRESS": address, "REACH_KEYRING": str(keyring)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, env=env, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode is not None
    return proc.returncode, out.decode("utf-8", "replace")


async def test_a_driver_whose_keyring_is_not_the_clusters_is_refused_at_init(
    rt: Any, cluster: Any, tmp_path: Path
) -> None:
    other = tmp_path / "other-keyring.json"
    Keyring.generate().save(other)
    code, out = await run_driver(cluster.address, other)
    assert code == 3, out[-3000:]
    assert "AuthError bad_signature: this driver's keyring does not match the cluster's" in out

    code, out = await run_driver(cluster.address, other, sign=False)
    assert code == 3, out[-3000:]
    assert "AuthError unsigned: this driver's keyring does not match the cluster's" in out

    # The cluster's own keyring joins (the same driver, the same way): the refusal was the key.
    ours = rt.transport.codec.guard.config.keyring
    code, out = await run_driver(cluster.address, Path(ours))
    assert code == 0, out[-3000:]
    assert "joined" in out.splitlines()  # Ray's own log lines may follow it
