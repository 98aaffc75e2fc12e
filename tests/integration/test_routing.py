"""Routing on a real two-node Ray cluster: by ID, by capability, fanout, broadcast, notify."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import pytest
import ray
from ray_helpers import wait_until
from support_agents import Echo, Forward, Forwarder, Info, Recorder, Refunds, Text, TextV11

import reach

pytestmark = pytest.mark.integration


async def test_request_by_id_reaches_a_dedicated_agent_and_keeps_unicode(rt: Any) -> None:
    await rt.spawn(Echo, "r-echo-dedicated")
    reply = await rt.client.request("r-echo-dedicated", Text(text="订单 📦 C:\\tmp"))
    assert reply.envelope.msg_type is reach.MsgType.RESPONSE
    assert reply.envelope.payload == {"text": "r-echo-dedicated:订单 📦 C:\\tmp"}
    assert reply.value == Text(text="r-echo-dedicated:订单 📦 C:\\tmp")
    assert reply.envelope.sender == "r-echo-dedicated"


async def test_packed_agents_share_hosts_and_answer_by_id(rt: Any) -> None:
    infos = await rt.spawn_many(Echo, [f"r-packed-{i}" for i in range(6)],
                                placement=reach.Packed(pool="routing", size=2))
    assert len({i.host for i in infos}) == 2
    for i in range(6):
        reply = await rt.client.request(f"r-packed-{i}", Text(text="hi"), returns=Text)
        assert reply.value.text == f"r-packed-{i}:hi"


async def test_agents_placed_by_resource_run_on_their_node_and_route_across_nodes(
    rt: Any, cluster: Any
) -> None:
    a = await rt.spawn(Echo, "r-node-a", placement=reach.Dedicated(resources={"node_a": 1}))
    b = await rt.spawn(Echo, "r-node-b", placement=reach.Dedicated(resources={"node_b": 1}))
    assert a.node != b.node
    head_node = ray.get_runtime_context().get_node_id()
    reply_a = await rt.client.request("r-node-a", {}, "test.whoami@1.0", returns=Info)
    reply_b = await rt.client.request("r-node-b", {}, "test.whoami@1.0", returns=Info)
    info_a, info_b = reply_a.value, reply_b.value
    assert info_a.node == a.node == head_node
    assert info_b.node == b.node != head_node
    # An agent on node A calls one on node B by ID, without knowing where it runs.
    await rt.spawn(Forwarder, "r-fwd-a", placement=reach.Dedicated(resources={"node_a": 1}))
    await rt.spawn(Forwarder, "r-fwd-b", placement=reach.Dedicated(resources={"node_b": 1}))
    reply = await rt.client.request("r-fwd-a", Forward(to=["r-fwd-b"]), returns=Info)
    assert reply.value.agent_id == "r-fwd-b"


async def test_an_agent_calls_another_from_its_handler_keeping_the_trace(rt: Any) -> None:
    await rt.spawn_many(Forwarder, ["r-chain-1", "r-chain-2", "r-chain-3"],
                        placement=reach.Packed(pool="routing"))
    reply = await rt.client.request("r-chain-1", Forward(to=["r-chain-2", "r-chain-3"]),
                                    returns=Info)
    info = reply.value
    assert info.agent_id == "r-chain-3"
    assert info.hops == ["r-chain-1", "r-chain-2"]
    assert info.trace_id == reply.envelope.trace_id


async def test_deadline_shrinks_along_the_call_chain(rt: Any) -> None:
    await rt.spawn_many(Forwarder, ["r-dl-1", "r-dl-2"], placement=reach.Packed(pool="routing"))
    reply = await rt.client.request("r-dl-1", Forward(to=["r-dl-2"], timeout_ms=60_000),
                                    returns=Info, timeout_ms=3_000)
    info = reply.value
    # The sub-request asked for 60 s but may not outlive its parent's 3 s.
    assert info.remaining_ms is not None
    assert 0 < info.remaining_ms <= 3_000


async def test_capability_discovery_exact_hierarchy_and_normalised(rt: Any) -> None:
    await rt.spawn(Refunds, "r-refund-1", placement=reach.Packed(pool="routing"))
    for query in ("refund.request", "refund", "refund.*", "refund_request", "Refund-Request"):
        found = await rt.client.discover(query)
        assert "r-refund-1" in [a.agent_id for a in found], query
        reply = await rt.client.request_capability(query, Text(text="x"), returns=Text)
        assert reply.value.text == "refund:x"


async def test_discovery_ranks_by_description_words(rt: Any) -> None:
    await rt.spawn(Refunds, "r-rank-refund", placement=reach.Packed(pool="routing"))
    await rt.spawn(Echo, "r-rank-echo", placement=reach.Packed(pool="routing"))

    class Both(Refunds):
        capabilities = ("rank.shared",)

    class Other(Echo):
        capabilities = ("rank.shared",)

    await rt.spawn(Both, "r-rank-both", placement=reach.Packed(pool="routing"))
    await rt.spawn(Other, "r-rank-other", placement=reach.Packed(pool="routing"))
    found = await rt.client.discover("rank.shared", text="退款 for a late order")
    assert [a.agent_id for a in found] == ["r-rank-both", "r-rank-other"]


async def test_unknown_capability_names_close_matches(rt: Any) -> None:
    await rt.spawn(Refunds, "r-close-refund", placement=reach.Packed(pool="routing"))
    with pytest.raises(reach.NoCapableAgent) as err:
        await rt.client.request_capability("refund.reqest", Text(text="x"))
    assert "refund.request" in str(err.value)
    assert err.value.details["capability"] == "refund.reqest"


async def test_fanout_sends_to_the_k_least_loaded_and_gathers(rt: Any) -> None:
    class FanEcho(Echo):
        capabilities = ("fan.echo",)

    await rt.spawn_many(FanEcho, ["r-fan-1", "r-fan-2", "r-fan-3"],
                        placement=reach.Packed(pool="routing"))
    replies = await rt.client.fanout("fan.echo", Text(text="q"), fanout_limit=2)
    assert all(isinstance(r, reach.Reply) for r in replies), replies
    senders = {r.envelope.sender for r in replies if isinstance(r, reach.Reply)}
    assert len(replies) == 2
    assert len(senders) == 2
    # Equal loads are spread round-robin: repeated single sends visit every holder.
    seen = set()
    for _ in range(6):
        reply = await rt.client.request_capability("fan.echo", Text(text="q"))
        seen.add(reply.envelope.sender)
    assert seen == {"r-fan-1", "r-fan-2", "r-fan-3"}


async def test_broadcast_reaches_every_online_holder(rt: Any) -> None:
    class Cast(Echo):
        capabilities = ("cast.echo",)

    ids = ["r-cast-1", "r-cast-2"]
    await rt.spawn_many(Cast, ids, placement=reach.Packed(pool="routing"))
    await rt.spawn(Cast, "r-cast-3")
    replies = await rt.client.broadcast("cast.echo", Text(text="all"))
    assert all(isinstance(r, reach.Reply) for r in replies), replies
    assert sorted(r.envelope.sender for r in replies if isinstance(r, reach.Reply)) == [
        "r-cast-1", "r-cast-2", "r-cast-3"]


async def test_notifications_are_delivered_without_a_reply(rt: Any) -> None:
    await rt.spawn(Recorder, "r-recorder", placement=reach.Packed(pool="routing"))
    for i in range(5):
        await rt.client.notify("r-recorder", Text(text=f"n{i}"))

    async def seen() -> list[str] | None:
        reply = await rt.client.request("r-recorder", {}, "test.whoami@1.0", returns=Info)
        got = reply.value.seen
        return got if len(got) == 5 else None

    assert await wait_until(seen) == [f"n{i}" for i in range(5)]


async def test_a_newer_minor_payload_reaches_an_older_reader(rt: Any) -> None:
    await rt.spawn(Echo, "r-minor", placement=reach.Packed(pool="routing"))
    reply = await rt.client.request("r-minor", TextV11(text="new", lang="zh"), returns=Text)
    assert reply.value.text == "r-minor:new"


async def test_a_major_mismatch_is_a_fatal_schema_incompatible_reply(rt: Any) -> None:
    await rt.spawn(Echo, "r-major", placement=reach.Packed(pool="routing"))
    with pytest.raises(reach.SchemaIncompatible) as err:
        await rt.client.request("r-major", {"text": "x"}, "test.text@2.0")
    assert err.value.severity is reach.Severity.FATAL


async def test_unknown_agent_is_agent_not_found(rt: Any) -> None:
    with pytest.raises(reach.AgentNotFound):
        await rt.client.request("r-nobody-home", Text(text="x"))


async def test_spawning_a_live_id_again_is_refused(rt: Any) -> None:
    await rt.spawn(Echo, "r-dup", placement=reach.Packed(pool="routing"))
    with pytest.raises(reach.AgentAlreadyExists):
        await rt.spawn(Echo, "r-dup")
    with pytest.raises(reach.AgentAlreadyExists):
        await rt.spawn(Echo, "r-dup", placement=reach.Packed(pool="routing"))


async def test_init_again_finds_the_same_registry(rt: Any) -> None:
    again = reach.init()
    try:
        ours, theirs = rt.cluster.registry(), again.cluster.registry()
        assert theirs.handle == ours.handle  # Ray's handles are equal when the actor is one
        assert (await theirs.stats())["incarnation"] == (await ours.stats())["incarnation"]
    finally:
        await again.close()


@pytest.mark.parametrize(("agent_id", "connect"), [
    ("r-shared-1", "rt = reach.init(address={address!r})"),
    ("r-shared-2", "ray.init(address={address!r}); rt = reach.init()"),
], ids=["reach_joins", "after_the_drivers_own_ray_init"])
async def test_a_second_driver_process_finds_the_same_registry_and_agents(
    rt: Any, cluster: Any, agent_id: str, connect: str
) -> None:
    # A driver that connected to Ray itself first (in Ray's default namespace, not reach's)
    # gets the same runtime as one that lets reach.init join.
    await rt.spawn(Echo, agent_id, placement=reach.Packed(pool="routing"))
    script = (
        "import asyncio, ray, reach\n"
        "from support_agents import Text\n"
        "async def main():\n"
        f"    {connect.format(address=cluster.address)}\n"
        f"    reply = await rt.client.request({agent_id!r}, Text(text='from afar'), returns=Text)\n"
        "    print(reply.value.text)\n"
        "    await rt.close()\n"
        "asyncio.run(main())\n"
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode == 0, err.decode("utf-8", "replace")[-2000:]
    # Ray's own log lines (a raylet's warning) may reach this driver's output after the reply.
    assert f"{agent_id}:from afar" in out.decode("utf-8").splitlines(), out.decode("utf-8")
