"""Reserved means reserved: no agent takes a name of reach's own processes, whichever entry
names it (spawn, a host called directly, a remote agent's hello, an A2A proxy), and the one rule
(``check_agent_ids``) covers every name reach gives its processes and principals."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable
from pathlib import Path
from typing import TypeVar

import pytest
from a2a.types.a2a_pb2 import AgentCard, AgentInterface, AgentSkill
from remote_unit_agents import Adder
from test_remote_host import Gateway, on_channel

import reach
from reach import clock
from reach._runtime import names
from reach._runtime.names import (
    DEDICATED_PREFIX,
    RESERVED_PREFIXES,
    check_agent_ids,
    is_endpoint,
    is_reserved,
    reserved_prefix,
)
from reach.a2a.client.proxy import connect, proxy_spec
from reach.errors import ConfigError
from reach.ports.hosts import CallLimits, HostShape
from reach.remote.wire import CAPABILITY_PREFIX, CloseCode, Declaration, make_hello
from reach.testing import FakeCluster, run

T = TypeVar("T")


async def within(step: Awaitable[T], seconds: float = 30.0) -> T:
    """``step``, or a TimeoutError after ``seconds`` (virtual: no wall time), never a hang."""
    return await asyncio.wait_for(step, seconds)

#: One ID under each reserved prefix, the names the probe registered among them (the registry,
#: any ``reach.`` name, a gateway replica's inbox, which task metadata discloses), and the
#: prefixes in another case.
RESERVED = ["reach.registry", "reach.anything", "reach.inbox.3f9a0c1d", "reach.sessions",
            "reach.host.x", "reach.pool.default.0", "reach.sup.root", "reach.remote.other",
            "REACH.Registry", "driver:evil", "Driver:evil", "a2a:partner", "cap:math.add"]
#: IDs that only look like them.
ALLOWED = ["reachy", "reach-registry", "my.reach.agent", "driverx", "a2a-agent", "capital",
           "calc-1"]
#: Reserved IDs a remote agent's hello can carry (the wire's IDs have no ``:``).
WIRE_RESERVED = [i for i in RESERVED if ":" not in i]


class Echo(reach.Agent):
    """Any agent: the name is what is refused."""

    capabilities = ("echo",)


@pytest.mark.parametrize("agent_id", RESERVED)
def test_every_reserved_prefix_is_refused_by_the_one_rule_with_a_config_error(
        agent_id: str) -> None:
    assert is_reserved(agent_id)
    with pytest.raises(ConfigError) as refused:
        check_agent_ids("fine-1", agent_id)
    details = refused.value.details
    assert (details["agent_id"], details["setting"]) == (agent_id, "agent_id")
    assert details["prefix"] == reserved_prefix(agent_id)
    assert agent_id.casefold().startswith(str(details["prefix"]))


@pytest.mark.parametrize("agent_id", ALLOWED)
def test_names_that_only_look_reserved_are_free(agent_id: str) -> None:
    assert not is_reserved(agent_id)
    check_agent_ids(agent_id)


def test_every_name_reach_gives_its_own_processes_and_principals_is_reserved() -> None:
    given = [v for k, v in vars(names).items()
             if k.endswith(("_PREFIX", "_NAME")) and isinstance(v, str)]
    assert len(given) >= 9
    assert all(is_reserved(f"{v}x") for v in given), given
    assert CAPABILITY_PREFIX in RESERVED_PREFIXES  # the wire's and the ACL's capability syntax
    # whoever signs as one of reach's own processes holds a reserved name
    assert all(is_reserved(i) for i in RESERVED if is_endpoint(i))


@pytest.mark.parametrize("placement", [reach.Packed(pool="p"), reach.Dedicated()],
                         ids=["packed", "dedicated"])
def test_a_spawn_under_a_reserved_id_is_refused_before_any_host_starts(
        placement: reach.Placement) -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        for agent_id in RESERVED:
            with pytest.raises(ConfigError) as refused:
                await rt.spawn(Echo, agent_id, placement=placement)
            assert refused.value.details["agent_id"] == agent_id
            assert await fake.registry().lookup(agent_id) is None
        assert fake.names(DEDICATED_PREFIX) == []  # no host started for a doomed spawn
        assert (await rt.spawn(Echo, "echo-1", placement=placement)).agent_id == "echo-1"

    run(scenario)


def test_a_host_called_directly_refuses_a_reserved_id_too() -> None:
    async def scenario(fake: FakeCluster) -> None:
        host = fake.start_host("reach.pool.p.0", HostShape(lasting=True), CallLimits())
        for agent_id in RESERVED:
            with pytest.raises(ConfigError):
                await host.add_agents(Adder, ["ok-1", agent_id], (), {})
            assert await fake.registry().lookup(agent_id) is None
        assert await fake.registry().lookup("ok-1") is None  # nothing of a refused batch

    run(scenario)


def test_a_supervised_child_under_a_reserved_id_does_not_start() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        with pytest.raises(ConfigError) as refused:
            await rt.supervise(reach.SupervisorSpec("s", children=[
                reach.ChildSpec(Echo, "reach.registry", reach.Packed(pool="p"))]))
        assert refused.value.details["prefix"] == "reach."
        assert await fake.registry().lookup("reach.registry") is None

    run(scenario)


def test_a_remote_agent_saying_hello_as_a_reserved_id_is_closed_4400_and_audited(
        tmp_path: Path) -> None:
    async def scenario(fake: FakeCluster, gw: Gateway) -> None:
        for n, agent_id in enumerate([*WIRE_RESERVED, "driver:evil"]):
            secret = gw.secret(agent_id)
            assert secret is not None
            frame = make_hello(agent_id, Declaration(capabilities=("math.add",)), secret,
                               now_ms=round(clock.now() * 1000), nonce=f"{n:032x}")
            sock = gw.socket()
            await sock.send(json.dumps(frame))
            code, reason = await within(sock.closed_with())
            assert code == CloseCode.MALFORMED, (agent_id, reason)
            # the wire's IDs have no ":": such an ID is refused as malformed before the host
            assert reason.startswith("reserved_id" if ":" not in agent_id else "agent_id")
            assert await fake.registry().lookup(agent_id) is None
        for agent_id in WIRE_RESERVED:
            outcomes = [r["outcome"] for r in await gw.audit(agent_id)]
            assert outcomes == ["refused: reserved_id"], agent_id
        await gw.connect("calc-1")  # an honest agent still gets in

    on_channel(scenario, signed=tmp_path)


def _card() -> AgentCard:
    return AgentCard(name="Refund Agent", description="Issues refunds.", version="1",
                     supported_interfaces=[AgentInterface(url="http://remote.example:4000/a2a",
                                                          protocol_binding="JSONRPC",
                                                          protocol_version="1.0")],
                     skills=[AgentSkill(id="refunds.issue", name="Refund")])


@pytest.mark.parametrize("agent_id", ["reach.registry", "a2a:refunds", "driver:x", "cap:x"])
def test_an_a2a_proxy_under_a_reserved_id_is_refused_before_its_card_is_read(
        agent_id: str) -> None:
    with pytest.raises(ConfigError) as refused:  # nothing listens there: no fetch was tried
        asyncio.run(proxy_spec("http://127.0.0.1:9/.well-known/agent-card.json",
                               agent_id=agent_id))
    assert refused.value.details["agent_id"] == agent_id
    assert asyncio.run(proxy_spec(_card(), agent_id="refunds-1")).agent_id == "refunds-1"


def test_connecting_an_a2a_agent_under_a_reserved_id_registers_nothing() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        with pytest.raises(ConfigError):
            await connect(rt, _card(), agent_id="reach.inbox.replica-1")
        assert await fake.registry().lookup("reach.inbox.replica-1") is None

    run(scenario)
