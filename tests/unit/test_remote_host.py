"""Remote agents on the fake cluster: the gateway's channel, the RemoteHost and the Python client,
all in one event loop on virtual time (a grace period or a deadline costs no wall time)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from remote_sockets import AsgiSocket
from remote_unit_agents import Add, Adder, Calculator, Count, Relay, Sum
from starlette.applications import Starlette

import reach
from reach import clock
from reach.errors import AgentUnavailable, RequestTimeout, Severity
from reach.ports.hosts import CallLimits
from reach.records import AgentStatus
from reach.remote.channel import ChannelOptions, channel_routes
from reach.remote.client import RemoteAgentRunner
from reach.remote.host import start_remote_host
from reach.remote.ports import RemoteHostPort
from reach.remote.wire import (
    CONNECT_PATH,
    CloseCode,
    Declaration,
    agent_secret,
    make_hello,
)
from reach.security.guard import SecurityConfig, resolve_keyring
from reach.testing import FakeCluster, eventually, run
from reach.web.auth import token_for
from reach.web.options import GatewayOptions

HOST = "reach.remote.replica-1"


@dataclass
class Gateway:
    """One replica's channel on the fake cluster, and a way to connect agents to it."""

    fake: FakeCluster
    host: RemoteHostPort
    app: Starlette
    master: bytes | None
    token: str | None
    runners: list[tuple[RemoteAgentRunner, asyncio.Task[Any]]] = field(default_factory=list)

    def socket(self, token: str | None = None) -> AsgiSocket:
        use = token if token is not None else self.token
        headers = {"authorization": f"Bearer {use}"} if use else {}
        return AsgiSocket(self.app, CONNECT_PATH, headers)

    def secret(self, agent_id: str) -> bytes | None:
        return None if self.master is None else agent_secret(self.master, agent_id)

    async def connect(self, agent_id: str, agent: reach.Agent | None = None,
                      ) -> tuple[RemoteAgentRunner, AsgiSocket]:
        """A remote agent connected (welcomed) through the channel."""
        sock = self.socket()
        runner = RemoteAgentRunner(agent or Calculator(), agent_id, self.secret(agent_id),
                                   clock=clock.now)
        task = asyncio.get_running_loop().create_task(runner.run(sock))
        self.runners.append((runner, task))
        await eventually(lambda: _true(runner.conn is not None or task.done()))
        assert runner.conn is not None, task.result()
        return runner, sock

    def kill(self, runner: RemoteAgentRunner) -> None:
        """The agent's process dies: its tasks end, its socket breaks."""
        for owned, task in self.runners:
            if owned is runner:
                task.cancel()
        for handling in list(runner._running.values()):
            handling.cancel()

    async def audit(self, agent_id: str) -> list[dict[str, Any]]:
        await self.host.flush_audit()
        return await self.fake.audit_log().audit_records(None, agent_id, 100)


def second_replica(fake: FakeCluster, gw: Gateway) -> Gateway:
    """Another gateway replica's channel and RemoteHost, beside ``gw``'s (its grace 5 s)."""
    host = start_remote_host(fake, f"{HOST}-b", CallLimits(), 5.0, 1000)
    app = Starlette(routes=channel_routes(fake, GatewayOptions(auth=False), host,
                                          ChannelOptions(max_frame_bytes=4096, grace_s=5.0)))
    return Gateway(fake, host, app, gw.master, gw.token)


async def _true(value: bool) -> bool:
    return value


Scenario = Callable[[FakeCluster, Gateway], Coroutine[Any, Any, None]]


def on_channel(scenario: Scenario, *, signed: Path | None = None, grace_s: float = 5.0,
               queue_limit: int = 1000) -> None:
    async def main(fake: FakeCluster) -> None:
        host = start_remote_host(fake, HOST, CallLimits(), grace_s, queue_limit)
        options = GatewayOptions(auth=signed is not None)
        settings = ChannelOptions(max_frame_bytes=4096, grace_s=grace_s, queue_limit=queue_limit)
        app = Starlette(routes=channel_routes(fake, options, host, settings))
        guard = fake.guard()
        master = guard.keyring.master if guard is not None else None
        token = token_for(guard.keyring, "partner") if guard is not None else None
        gateway = Gateway(fake, host, app, master, token)
        try:
            await scenario(fake, gateway)
        finally:
            for _, task in gateway.runners:
                task.cancel()

    security = None if signed is None else SecurityConfig(
        sign=True, keyring=resolve_keyring(signed / "keyring.json", create=True))
    run(main, security=security)


# -- joining, being found, answering -------------------------------------------------------------


def test_a_remote_agent_is_registered_found_by_capability_and_description_and_answers(
        tmp_path: Path) -> None:
    async def scenario(fake: FakeCluster, gw: Gateway) -> None:
        rt = fake.runtime()
        runner, _ = await gw.connect("calc-1")
        record = await fake.registry().lookup("calc-1")
        assert (record.host, record.status) == (HOST, AgentStatus.ONLINE)
        found = await rt.client.discover("math", text="whole numbers")
        assert [r.agent_id for r in found] == ["calc-1"]
        reply = await rt.client.request("calc-1", Add(a=2, b=3))
        assert reply.value == Sum(total=5, by="calc-1")
        by_cap = await rt.client.request_capability("math.add", Add(a=1, b=1))
        assert by_cap.envelope.sender == "calc-1"
        described = await gw.host.describe(["calc-1"])
        assert {h["schema"] for h in described["calc-1"]} == {
            "unit.add@1.0", "unit.count@1.0", "unit.relay@1.0"}
        assert runner.handled == 2

    on_channel(scenario, signed=tmp_path)


def test_a_remote_agent_streams_a_reply_in_order() -> None:
    async def scenario(fake: FakeCluster, gw: Gateway) -> None:
        rt = fake.runtime()
        await gw.connect("calc-1")
        ticks = [r.value.n async for r in rt.client.stream("calc-1", Count(upto=5))]
        assert ticks == [1, 2, 3, 4, 5]

    on_channel(scenario)


def test_a_remote_agents_errors_reach_the_caller_typed() -> None:
    async def scenario(fake: FakeCluster, gw: Gateway) -> None:
        rt = fake.runtime()
        await gw.connect("calc-1")
        with pytest.raises(reach.ReachError, match="asked to fail") as caught:
            await rt.client.request("calc-1", Add(a=1, b=1, fail="degradable"))
        assert caught.value.severity is Severity.DEGRADABLE
        with pytest.raises(RequestTimeout):
            await rt.client.request("calc-1", Add(a=1, b=1, sleep_s=60), timeout_ms=2000)

    on_channel(scenario)


def test_a_remote_agent_calls_an_agent_of_the_cluster_by_capability(tmp_path: Path) -> None:
    async def scenario(fake: FakeCluster, gw: Gateway) -> None:
        rt = fake.runtime()
        await rt.spawn(Adder, "adder-1", placement=reach.Packed())
        await gw.connect("calc-1")
        reply = await rt.client.request("calc-1", Relay(capability="inner.add", a=4, b=5))
        assert reply.value == Sum(total=9, by="adder-1")
        audit = await gw.audit("calc-1")
        assert any(r["caller"].startswith("driver:") and r["outcome"] == "ok" for r in audit)

    on_channel(scenario, signed=tmp_path)


def test_a_remote_agent_calls_another_remote_agent_by_capability() -> None:
    async def scenario(fake: FakeCluster, gw: Gateway) -> None:
        rt = fake.runtime()
        await gw.connect("calc-1")
        await gw.connect("adder-remote", Adder())
        reply = await rt.client.request("calc-1", Relay(capability="inner.add", a=1, b=2))
        assert reply.value == Sum(total=3, by="adder-remote")

    on_channel(scenario)


# -- disconnects, restarts, death --------------------------------------------------------------


def test_a_caller_waits_for_a_disconnected_agent_and_its_request_is_resent_on_reconnect() -> None:
    async def scenario(fake: FakeCluster, gw: Gateway) -> None:
        rt = fake.runtime()
        first, sock = await gw.connect("calc-1")
        epoch = (await fake.registry().lookup("calc-1")).epoch
        call = asyncio.ensure_future(rt.client.request("calc-1", Add(a=2, b=2, sleep_s=5)))
        await eventually(lambda: _true(bool(first._running)))
        gw.kill(first)
        await sock.drop()
        await asyncio.sleep(2.0)  # the caller waits (virtual time)
        assert not call.done()
        second, _ = await gw.connect("calc-1", Calculator())
        reply = await call
        assert reply.value == Sum(total=4, by="calc-1")
        assert second.handled == 1  # the resent request, run by the new incarnation
        assert second.epoch == (await fake.registry().lookup("calc-1")).epoch == epoch + 1

    on_channel(scenario)


def test_a_send_while_disconnected_waits_up_to_its_deadline_then_fails_retryable() -> None:
    async def scenario(fake: FakeCluster, gw: Gateway) -> None:
        rt = fake.runtime()
        first, sock = await gw.connect("calc-1")
        gw.kill(first)
        await sock.drop()
        started = clock.monotonic()
        with pytest.raises(RequestTimeout) as caught:
            await rt.client.request("calc-1", Add(a=1, b=1), timeout_ms=3000)
        assert caught.value.severity is Severity.RETRYABLE
        assert clock.monotonic() - started == pytest.approx(3.0, abs=0.1)

    on_channel(scenario, grace_s=10.0)


def test_an_agent_not_back_within_the_grace_period_is_dead_to_its_watchers() -> None:
    async def scenario(fake: FakeCluster, gw: Gateway) -> None:
        rt = fake.runtime()
        first, sock = await gw.connect("calc-1")
        watch = asyncio.ensure_future(gw.host.watch_agent("calc-1"))
        call = asyncio.ensure_future(rt.client.request("calc-1", Add(a=1, b=1, sleep_s=60),
                                                       timeout_ms=60_000))
        await eventually(lambda: _true(bool(first._running)))
        gw.kill(first)
        await sock.drop()
        gone = clock.monotonic()
        exit_ = await watch
        assert not exit_.normal
        assert "not back within 5 s" in exit_.reason
        assert clock.monotonic() - gone == pytest.approx(5.0, abs=0.1)
        with pytest.raises(AgentUnavailable):
            await call
        assert await fake.registry().lookup("calc-1") is None
        again, _ = await gw.connect("calc-1")  # a later hello registers it anew
        assert again.epoch > first.epoch

    on_channel(scenario)


def test_goodbye_is_a_normal_exit_at_once() -> None:
    async def scenario(fake: FakeCluster, gw: Gateway) -> None:
        runner, sock = await gw.connect("calc-1")
        watch = asyncio.ensure_future(gw.host.watch_agent("calc-1"))
        await runner.goodbye("done for today")
        exit_ = await watch
        assert exit_.normal
        assert "done for today" in exit_.reason
        assert await fake.registry().lookup("calc-1") is None
        assert sock.closed is not None
        assert sock.closed[0] == CloseCode.NORMAL

    on_channel(scenario)


def test_past_its_queue_a_disconnected_agents_senders_get_a_retryable_error() -> None:
    async def scenario(fake: FakeCluster, gw: Gateway) -> None:
        rt = fake.runtime()
        first, sock = await gw.connect("calc-1")
        gw.kill(first)
        await sock.drop()
        calls = [asyncio.ensure_future(rt.client.request("calc-1", Add(a=i, b=0),
                                                         timeout_ms=20_000))
                 for i in range(5)]
        await asyncio.wait(calls, timeout=1.0)
        refused = [c.exception() for c in calls if c.done()]
        assert len(refused) == 2
        assert all(isinstance(e, AgentUnavailable) and e.details["reason"] == "queue_full"
                   for e in refused)
        waiting = [c for c in calls if not c.done()]
        await gw.connect("calc-1")  # the queued three are delivered on reconnect
        replies = await asyncio.gather(*waiting)
        assert sorted(r.value.total for r in replies) == [0, 1, 2]

    on_channel(scenario, queue_limit=3)


# -- bad input ---------------------------------------------------------------------------------


async def _refused(gw: Gateway, frames: list[str], token: str | None = None) -> tuple[int, str]:
    sock = gw.socket(token)
    for frame in frames:
        await sock.send(frame)
    return await sock.closed_with()


def _hello(gw: Gateway, agent_id: str, secret: bytes | None = None, **changes: Any) -> str:
    frame = make_hello(agent_id, Declaration(capabilities=("math.add",)),
                       secret or gw.secret(agent_id) or b"k" * 32,
                       now_ms=round(clock.now() * 1000), nonce=changes.pop("nonce", "cd" * 16))
    frame.update(changes)
    return json.dumps(frame)


def test_bad_input_closes_with_a_clear_code_is_audited_and_harms_no_one(tmp_path: Path) -> None:
    async def scenario(fake: FakeCluster, gw: Gateway) -> None:
        rt = fake.runtime()
        await gw.connect("calc-1")
        forged = agent_secret(b"\x07" * 32, "spy-1")
        cases = {
            "forged": ([_hello(gw, "spy-1", forged)], None),
            "malformed": (["{not json"], None),
            "first_not_hello": (['{"type":"heartbeat"}'], None),
            "online": ([_hello(gw, "calc-1", nonce="ef" * 16)], None),
            "oversize": ([_hello(gw, "big-1", nonce="01" * 16),
                          json.dumps({"type": "heartbeat", "pad": "x" * 5000})], None),
            "after_goodbye": ([_hello(gw, "bye-1", nonce="02" * 16),
                               '{"type":"goodbye"}', '{"type":"heartbeat"}'], None),
            "no_token": ([_hello(gw, "anon-1", nonce="03" * 16)], "nobody.00"),
        }
        closes = {}
        for name, (frames, token) in cases.items():
            closes[name] = await _refused(gw, frames, token)
        codes = {name: code for name, (code, _) in closes.items()}
        assert codes == {
            "forged": CloseCode.BAD_SIGNATURE, "malformed": CloseCode.MALFORMED,
            "first_not_hello": CloseCode.MALFORMED, "online": CloseCode.ALREADY_ONLINE,
            "oversize": CloseCode.TOO_LARGE, "after_goodbye": CloseCode.AFTER_GOODBYE,
            "no_token": CloseCode.UNAUTHORIZED}
        assert closes["forged"][1].startswith("bad_signature: ")
        assert closes["oversize"][1].startswith("frame_size: ")
        # the agent online all along answers, as does the one that said goodbye, anew
        assert (await rt.client.request("calc-1", Add(a=1, b=2))).value.total == 3
        refusals = {r["outcome"] for r in await gw.audit("spy-1")}
        assert refusals == {"refused: bad_signature"}
        assert "refused: frame_size" in {r["outcome"] for r in await gw.audit("big-1")}
        assert "refused: after_goodbye" in {r["outcome"] for r in await gw.audit("bye-1")}
        assert "refused: already_online" in {r["outcome"] for r in await gw.audit("calc-1")}
        assert await fake.registry().lookup("spy-1") is None

    on_channel(scenario, signed=tmp_path)


def test_a_replayed_hello_is_refused_even_once_the_agent_left(tmp_path: Path) -> None:
    async def scenario(fake: FakeCluster, gw: Gateway) -> None:
        hello = _hello(gw, "calc-9", nonce="99" * 16)
        sock = gw.socket()
        await sock.send(hello)
        assert (await sock.recv_json())["type"] == "welcome"
        await sock.send('{"type":"goodbye"}')
        await sock.closed_with()
        code, reason = await _refused(gw, [hello])
        assert code == CloseCode.BAD_SIGNATURE
        assert reason.startswith("replayed_nonce")

    on_channel(scenario, signed=tmp_path)


def test_a_socket_that_says_nothing_is_closed_after_the_hello_timeout() -> None:
    async def scenario(fake: FakeCluster, gw: Gateway) -> None:
        code, reason = await _refused(gw, [])
        assert code == CloseCode.HELLO_TIMEOUT
        assert reason.startswith("hello_timeout")

    on_channel(scenario)


def test_an_invalid_envelope_is_refused_alone_and_the_connection_stays() -> None:
    async def scenario(fake: FakeCluster, gw: Gateway) -> None:
        rt = fake.runtime()
        sock = gw.socket()
        await sock.send(_hello(gw, "raw-1"))
        assert (await sock.recv_json())["type"] == "welcome"
        await sock.send(json.dumps({"type": "batch", "envelopes": [
            {"msg_id": "m1", "msg_type": "request", "sender": "raw-1", "receiver": "x",
             "payload_schema": "a.b@1.0"},
            {"msg_id": "m2", "msg_type": "notification", "sender": "someone-else",
             "receiver": "x", "payload_schema": "a.b@1.0"}]}))
        errors = [await sock.recv_json(), await sock.recv_json()]
        assert [(e["type"], e["msg_id"]) for e in errors] == [("error", "m1"), ("error", "m2")]
        assert "timeout_ms" in errors[0]["message"]
        assert "sender" in errors[1]["message"]
        call = asyncio.ensure_future(rt.client.request("raw-1", Add(a=1, b=1)))
        frame = await sock.recv_json()
        request = frame["envelope"]
        await sock.send(json.dumps({"type": "envelope", "envelope": {
            "msg_type": "response", "sender": "raw-1", "receiver": request["sender"],
            "request_id": request["msg_id"], "payload": {"total": 2, "by": "raw-1"},
            "payload_schema": "unit.sum@1.0"}}))
        assert (await call).value == Sum(total=2, by="raw-1")

    on_channel(scenario)


def test_a_remote_host_refuses_to_spawn_agents() -> None:
    async def scenario(fake: FakeCluster, gw: Gateway) -> None:
        with pytest.raises(reach.ConfigError, match="remote agents only"):
            await gw.host.add_agents(Calculator, ["c-1"], (), {})

    on_channel(scenario)


# -- remote agents in supervision trees ------------------------------------------------------------


def test_a_supervisor_waits_for_its_remote_child_and_callers_wait_with_it() -> None:
    async def scenario(fake: FakeCluster, gw: Gateway) -> None:
        rt = fake.runtime()
        starting = asyncio.ensure_future(rt.supervise(reach.SupervisorSpec("s", children=[
            reach.RemoteChild("calc-1", connect_within_s=30)])))
        await asyncio.sleep(1.0)
        assert not starting.done()  # waiting for it to connect
        call = asyncio.ensure_future(rt.client.request("calc-1", Add(a=2, b=2),
                                                       timeout_ms=20_000))
        await asyncio.sleep(1.0)
        assert not call.done()  # held, not told that no such agent exists
        await gw.connect("calc-1")
        sup = await starting
        assert (await call).value == Sum(total=4, by="calc-1")
        (child,) = (await sup.status()).children
        assert (child.child_id, child.host) == ("calc-1", HOST)

    on_channel(scenario)


def test_a_remote_child_gone_past_the_grace_is_restarted_when_it_connects_again() -> None:
    async def scenario(fake: FakeCluster, gw: Gateway) -> None:
        rt = fake.runtime()
        first, sock = await gw.connect("calc-1")
        sup = await rt.supervise(reach.SupervisorSpec("s", children=[
            reach.RemoteChild("calc-1", connect_within_s=30)]))
        gw.kill(first)
        await sock.drop()

        async def awaited() -> bool:  # past the 5 s grace: dead to its supervisor, awaited
            record = await fake.registry().lookup("calc-1")
            return record is not None and record.status is AgentStatus.RESTARTING

        gone = clock.monotonic()
        assert await eventually(awaited)  # callers hold while it is awaited
        assert clock.monotonic() - gone >= 5.0
        call = asyncio.ensure_future(rt.client.request("calc-1", Add(a=1, b=2),
                                                       timeout_ms=20_000))
        again, _ = await gw.connect("calc-1")
        assert (await call).value == Sum(total=3, by="calc-1")
        assert again.epoch > first.epoch

        async def restarted() -> list[reach.RestartRecord]:
            return list((await sup.status()).restarts)

        (restart,) = await eventually(restarted)
        assert restart.placement is reach.RestartPlacement.REMOTE
        assert "not back within 5 s" in restart.reason

    on_channel(scenario)


def test_a_remote_child_not_connected_in_time_fails_the_start_and_callers_are_told() -> None:
    async def scenario(fake: FakeCluster, gw: Gateway) -> None:
        rt = fake.runtime()
        with pytest.raises(AgentUnavailable, match="did not connect within 2 s"):
            await rt.supervise(reach.SupervisorSpec("s", children=[
                reach.RemoteChild("calc-1", connect_within_s=2)]))
        with pytest.raises(AgentUnavailable, match="offline"):
            await rt.client.request("calc-1", Add(a=1, b=1), timeout_ms=5_000)

    on_channel(scenario)


def test_a_siblings_failure_leaves_a_remote_child_be_and_stopping_removes_it() -> None:
    async def scenario(fake: FakeCluster, gw: Gateway) -> None:
        rt = fake.runtime()
        remote, sock = await gw.connect("calc-1")
        sup = await rt.supervise(reach.SupervisorSpec(
            "s", strategy=reach.Strategy.ONE_FOR_ALL, children=[
                reach.ChildSpec(Calculator, "local-1"),
                reach.RemoteChild("calc-1")]))
        local = await fake.registry().lookup("local-1")
        assert local is not None
        fake.crash(local.host)
        assert (await rt.client.request("local-1", Add(a=1, b=1),
                                        timeout_ms=10_000)).value.by == "local-1"
        (restart,) = (await sup.status()).restarts
        assert restart.child == "local-1"  # one_for_all restarts only what it can start
        assert remote.conn is not None
        assert sock.closed is None
        assert (await rt.client.request("calc-1", Add(a=1, b=1))).value.by == "calc-1"
        assert await sup.stop() == ["calc-1", "local-1"]
        assert await fake.registry().lookup("calc-1") is None
        await eventually(lambda: _true(sock.closed is not None))

    on_channel(scenario)


# -- a reconnect through another gateway replica ----------------------------------------------


def test_an_agent_reconnecting_through_another_replica_within_the_grace_is_restarted_there(
        ) -> None:
    async def scenario(fake: FakeCluster, gw: Gateway) -> None:
        rt = fake.runtime()
        other = second_replica(fake, gw)
        first, sock = await gw.connect("calc-1")
        epoch = (await fake.registry().lookup("calc-1")).epoch
        watch = asyncio.ensure_future(gw.host.watch_agent("calc-1"))
        taken = asyncio.ensure_future(rt.client.request("calc-1", Add(a=2, b=2, sleep_s=5),
                                                        timeout_ms=30_000))
        await eventually(lambda: _true(bool(first._running)))
        gw.kill(first)
        await sock.drop()
        queued = asyncio.ensure_future(rt.client.request("calc-1", Add(a=1, b=1),
                                                         timeout_ms=30_000))
        await asyncio.sleep(1.0)  # within the grace: the replica it left still holds it
        assert not taken.done()
        assert not queued.done()
        second, _ = await other.connect("calc-1", Calculator())
        assert second.epoch == epoch + 1
        record = await fake.registry().lookup("calc-1")
        assert (record.host, record.epoch) == (f"{HOST}-b", epoch + 1)
        assert (await taken).value == Sum(total=4, by="calc-1")  # resent, pending_policy
        assert (await queued).value == Sum(total=2, by="calc-1")
        assert second.handled == 2
        exit_ = await watch  # its restart, as the replica it left tells its watchers
        assert not exit_.normal
        assert f"reconnected through {HOST}-b" in exit_.reason
        await asyncio.sleep(6.0)  # the first replica's grace period passes: nothing happens
        assert (await fake.registry().lookup("calc-1")).host == f"{HOST}-b"
        assert (await rt.client.request("calc-1", Add(a=3, b=3))).value.total == 6
        other.runners.clear()

    on_channel(scenario)


def test_an_agent_connected_through_one_replica_is_refused_by_another() -> None:
    async def scenario(fake: FakeCluster, gw: Gateway) -> None:
        other = second_replica(fake, gw)
        await gw.connect("calc-1")
        runner = RemoteAgentRunner(Calculator(), "calc-1", None, clock=clock.now)
        sock = other.socket()
        code = await runner.run(sock)
        assert code == CloseCode.ALREADY_ONLINE
        assert (await fake.registry().lookup("calc-1")).host == HOST

    on_channel(scenario)


def test_a_supervised_remote_agent_whose_replica_dies_comes_back_through_another() -> None:
    async def scenario(fake: FakeCluster, gw: Gateway) -> None:
        rt = fake.runtime()
        other = second_replica(fake, gw)
        first, _ = await gw.connect("calc-1")
        sup = await rt.supervise(reach.SupervisorSpec("s", children=[
            reach.RemoteChild("calc-1", connect_within_s=30)]))
        gw.kill(first)
        fake.crash(HOST)  # the replica's host dies with the agent's registration

        async def awaited() -> bool:
            record = await fake.registry().lookup("calc-1")
            return record is not None and record.status is AgentStatus.RESTARTING

        assert await eventually(awaited)
        await other.connect("calc-1", Calculator())  # accepted at once: not 4409
        assert (await rt.client.request("calc-1", Add(a=5, b=5))).value.total == 10
        (restart,) = (await sup.status()).restarts
        assert restart.placement is reach.RestartPlacement.REMOTE
        other.runners.clear()

    on_channel(scenario)


class BackupCalculator(Calculator):
    """A calculator that is only a backup for adding."""

    capabilities = {"math.add": 1, "math.count": 0}  # noqa: RUF012 - read once, as defined


def test_a_remote_agents_declared_priorities_reach_the_registry_and_decide_its_sends() -> None:
    async def scenario(fake: FakeCluster, gw: Gateway) -> None:
        rt = fake.runtime()
        await gw.connect("calc-backup", BackupCalculator())
        await gw.connect("calc-1")
        assert (await fake.registry().lookup("calc-backup")).priorities == (1, 0)
        assert (await fake.registry().lookup("calc-1")).priorities == ()
        found = await rt.client.discover("math.add")
        assert [r.agent_id for r in found] == ["calc-1", "calc-backup"]
        senders = {(await rt.client.request_capability("math.add", Add(a=1, b=1))).envelope.sender
                   for _ in range(6)}
        assert senders == {"calc-1"}

    on_channel(scenario)
