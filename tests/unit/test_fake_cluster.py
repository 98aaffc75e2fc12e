"""The runtime's logic on the fake cluster: routing, batching, holds, timeouts, restarts and tasks,
in milliseconds of wall time (the clock is virtual; see reach.testing)."""

from __future__ import annotations

import asyncio
import gc
import time
from typing import Any

import pytest
from pydantic import BaseModel

import reach
from actors.host_agents import YOUNG_GC_THRESHOLD, raise_young_gc_threshold
from policies.supervision import Intensity, RestartType, Strategy
from policies.tasks import SeverityPolicy, TaskState
from reach import clock
from reach._runtime.names import POOL_PREFIX, REGISTRY_NAME
from reach.errors import (
    AgentNotFound,
    AgentUnavailable,
    HandlerError,
    NoCapableAgent,
    RequestTimeout,
    RestartLimitExceeded,
    Severity,
)
from reach.records import AgentStatus, RestartPlacement, SupervisorState
from reach.testing import FakeCluster, eventually, run


@reach.schema("fake.ask@1.0")
class Ask(BaseModel):
    text: str
    sleep_s: float = 0.0
    fail: str = ""  # a severity to fail with, or "crash" for a plain exception


@reach.schema("fake.answer@1.0")
class Answer(BaseModel):
    text: str
    by: str
    runs: int = 0


class Echo(reach.Agent):
    """Answers with the text it got (after sleeping, or failing, when asked to)."""

    capabilities = ("echo.say",)
    description = "Repeats what it hears."

    def __init__(self) -> None:
        self.runs = 0

    @reach.handler(Ask, returns=Answer)
    async def say(self, ctx: reach.Context, m: Ask) -> Answer:
        self.runs += 1
        if m.sleep_s:
            await asyncio.sleep(m.sleep_s)
        if m.fail == "crash":
            raise ValueError("boom")
        if m.fail:
            raise reach.ReachError(f"asked to fail {m.fail}", severity=Severity(m.fail),
                                   partial={"text": "half"})
        return Answer(text=m.text, by=self.id, runs=self.runs)


class Once(Echo):
    """Runs at most once per request ID."""

    capabilities = ("echo.once",)

    @reach.handler(Ask, returns=Answer, once=True)
    async def say(self, ctx: reach.Context, m: Ask) -> Answer:
        return await super().say(ctx, m)


class Relay(reach.Agent):
    """Asks an echo agent by capability and answers with what it said."""

    capabilities = ("relay.say",)

    @reach.handler(Ask, returns=Answer)
    async def say(self, ctx: reach.Context, m: Ask) -> Answer:
        reply = await ctx.request_capability("echo.say", m, returns=Answer)
        return reply.value


def packed(pool: str = "p") -> reach.Packed:
    return reach.Packed(pool=pool, size=2)


# -- routing and the transport ----------------------------------------------------------------


def test_a_caller_gets_the_handlers_model_with_the_envelope_at_hand() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        await rt.spawn(Echo, "e-1")
        reply = await rt.client.request("e-1", Ask(text="你好"))
        assert isinstance(reply.value, Answer)
        assert reply.value == Answer(text="你好", by="e-1", runs=1)
        assert reply.envelope.sender == "e-1"
        assert reply.envelope.payload_schema == "fake.answer@1.0"

    run(scenario)


def test_many_requests_to_one_host_travel_in_few_calls() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        await rt.spawn_many(Echo, ["e-1"], placement=packed())
        host = (await rt.cluster.registry().lookup("e-1")).host
        replies = await asyncio.gather(*(rt.client.request("e-1", Ask(text=str(i)))
                                         for i in range(300)))
        assert [r.value.text for r in replies] == [str(i) for i in range(300)]
        assert fake.calls[(host, "deliver")] <= 3

    run(scenario)


def test_slow_replies_come_back_batched_through_the_inbox() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        await rt.spawn(Echo, "e-1")
        replies = await asyncio.gather(*(rt.client.request("e-1", Ask(text=str(i), sleep_s=1))
                                         for i in range(100)))
        assert len(replies) == 100
        takes = sum(n for (name, method), n in fake.calls.items() if method == "take")
        assert takes <= 5  # the 100 late replies arrive together, not one call each

    run(scenario)


def test_sends_by_capability_share_one_registry_call_under_load() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        await rt.spawn_many(Echo, [f"e-{i}" for i in range(10)], placement=packed())
        before = fake.calls[(REGISTRY_NAME, "discover")]
        replies = await asyncio.gather(*(
            rt.client.request_capability("echo.say", Ask(text="x", sleep_s=0.5))
            for _ in range(2000)))
        spread = {r.value.by for r in replies}
        assert len(spread) == 10  # least loaded first: every holder took its share
        # 2,000 concurrent misses and a few seconds of traffic: a handful of discover calls
        assert fake.calls[(REGISTRY_NAME, "discover")] - before <= 5

    run(scenario)


def test_a_request_past_its_deadline_times_out_without_waiting_in_real_time() -> None:
    async def scenario(fake: FakeCluster) -> float:
        rt = fake.runtime()
        await rt.spawn(Echo, "e-1")
        started = clock.monotonic()
        with pytest.raises(RequestTimeout, match="within 5000 ms"):
            await rt.client.request("e-1", Ask(text="x", sleep_s=60), timeout_ms=5000)
        return clock.monotonic() - started

    assert run(scenario) == pytest.approx(5.0, abs=0.1)


def test_an_unknown_agent_is_agent_not_found_and_an_unknown_capability_names_close_tags() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        await rt.spawn(Echo, "e-1")
        with pytest.raises(AgentNotFound):
            await rt.client.request("nobody", Ask(text="x"))
        with pytest.raises(NoCapableAgent, match=r"echo\.say"):
            await rt.client.request_capability("echo.sya", Ask(text="x"))

    run(scenario)


def test_a_handler_calling_by_capability_keeps_the_trace_and_the_hop_chain() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        await rt.spawn(Relay, "r-1")
        await rt.spawn(Echo, "e-1", placement=packed())
        reply = await rt.client.request("r-1", Ask(text="hop"))
        assert reply.value.by == "e-1"

    run(scenario)


def test_a_stale_route_is_resolved_again_and_the_request_resent() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        await rt.spawn(Echo, "e-1", placement=packed("a"))
        first = await rt.client.request("e-1", Ask(text="one"))
        old_host = (await rt.cluster.registry().lookup("e-1")).host
        # Another driver moves the agent: this driver's cached route now points at a host
        # that no longer has it.
        other = fake.runtime()
        await other.stop("e-1")
        await other.spawn(Echo, "e-1", placement=packed("b"))
        again = await rt.client.request("e-1", Ask(text="two"))
        assert first.value.runs == 1
        assert again.value.runs == 1
        assert (await rt.cluster.registry().lookup("e-1")).host != old_host

    run(scenario)


def test_a_notification_to_a_host_that_is_gone_becomes_a_dead_letter() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        await rt.spawn(Echo, "e-1")
        host = (await rt.cluster.registry().lookup("e-1")).host
        fake.crash(host)
        with pytest.raises(AgentUnavailable):
            await rt.client.notify("e-1", Ask(text="x"))

        async def lettered() -> bool:
            return any(d.receiver == "e-1" for d in await rt.dead_letters())

        assert await eventually(lettered)

    run(scenario)


def test_a_dead_host_fails_its_waiting_callers_at_once_not_at_their_deadline() -> None:
    async def scenario(fake: FakeCluster) -> float:
        rt = fake.runtime()
        await rt.spawn(Echo, "e-1")
        host = (await rt.cluster.registry().lookup("e-1")).host
        call = asyncio.ensure_future(rt.client.request("e-1", Ask(text="x", sleep_s=60),
                                                       timeout_ms=30_000))
        await handling(fake, rt, "e-1")
        started = clock.monotonic()
        fake.crash(host)
        with pytest.raises(AgentUnavailable):
            await call
        return clock.monotonic() - started

    assert run(scenario) < 1.0  # the watch's grace, not the 30 s deadline


# -- the registry ---------------------------------------------------------------------------


def test_a_host_that_misses_its_heartbeats_has_its_agents_marked_offline() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        await rt.spawn(Echo, "e-1")
        host = (await rt.cluster.registry().lookup("e-1")).host
        fake.crash(host)

        async def offline() -> bool:
            rec = await rt.cluster.registry().lookup("e-1")
            return rec is not None and rec.status is AgentStatus.OFFLINE

        assert await eventually(offline, within_s=10)  # interval 1 s x 3 misses
        with pytest.raises(AgentUnavailable, match="offline"):
            await rt.client.request("e-1", Ask(text="x"))

    run(scenario)


def test_a_restarted_registry_rebuilds_its_table_from_heartbeats_with_epochs_kept() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        await rt.spawn_many(Echo, ["e-1", "e-2"], placement=packed())
        epochs = {r.agent_id: r.epoch for r in await rt.agents()}
        fake.crash(REGISTRY_NAME)

        async def rebuilt() -> bool:
            return {r.agent_id for r in await rt.cluster.registry().agents()} == set(epochs)

        assert await eventually(rebuilt, within_s=10)
        after = {r.agent_id: r.epoch for r in await rt.agents()}
        assert all(after[a] >= epochs[a] for a in epochs)
        reply = await rt.client.request("e-2", Ask(text="back"))
        assert reply.value.by == "e-2"

    run(scenario)


# -- supervision ----------------------------------------------------------------------------


def test_a_supervised_packed_agent_is_restarted_and_held_requests_reach_it() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        sup = await rt.supervise(reach.SupervisorSpec("s", children=[
            reach.ChildSpec(Echo, "e-1", placement=packed())]))
        host = (await rt.cluster.registry().lookup("e-1")).host
        fake.crash(host)
        reply = await rt.client.request("e-1", Ask(text="after"), timeout_ms=20_000)
        assert reply.value.text == "after"
        assert reply.value.runs == 1
        status = await sup.status()
        assert [r.placement for r in status.restarts] == [RestartPlacement.PACKED]
        assert (await rt.cluster.registry().lookup("e-1")).epoch == 2

    run(scenario)


def test_one_for_all_restarts_every_child_in_start_order() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        sup = await rt.supervise(reach.SupervisorSpec(
            "s", strategy=Strategy.ONE_FOR_ALL, intensity=Intensity(5, 10), children=[
                reach.ChildSpec(Echo, "a"), reach.ChildSpec(Echo, "b"),
                reach.ChildSpec(Echo, "c")]))
        fake.crash((await rt.cluster.registry().lookup("b")).host)

        async def restarted() -> Any:
            status = await sup.status()
            return len(status.restarts) == 3 and status

        status = await eventually(restarted)
        assert [r.child for r in status.restarts] == ["a", "b", "c"]
        assert [c.child_id for c in status.children] == ["a", "b", "c"]

    run(scenario)


def test_a_temporary_child_is_not_restarted() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        sup = await rt.supervise(reach.SupervisorSpec("s", children=[
            reach.ChildSpec(Echo, "t", restart=RestartType.TEMPORARY),
            reach.ChildSpec(Echo, "p")]))
        fake.crash((await rt.cluster.registry().lookup("t")).host)

        async def dropped() -> bool:
            return [c.child_id for c in (await sup.status()).children] == ["p"]

        assert await eventually(dropped)
        assert (await sup.status()).restarts == ()

    run(scenario)


def test_past_its_intensity_a_supervisor_gives_up_and_the_driver_hears_it() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        sup = await rt.supervise(reach.SupervisorSpec(
            "s", intensity=Intensity(1, 60), children=[reach.ChildSpec(Echo, "e-1")]))
        fake.crash((await rt.cluster.registry().lookup("e-1")).host)

        async def restarted_once() -> bool:
            return len((await sup.status()).restarts) == 1

        assert await eventually(restarted_once)
        fake.crash((await rt.cluster.registry().lookup("e-1")).host)
        with pytest.raises(RestartLimitExceeded, match="restart intensity"):
            await sup.wait()
        assert (await sup.status()).state is SupervisorState.FAILED

    run(scenario)


# -- tasks ----------------------------------------------------------------------------------


def _tree(*children: reach.ChildSpec, policy: Any = None) -> reach.SupervisorSpec:
    return reach.SupervisorSpec("s", children=list(children), seed=7,
                                task_policy=policy or SeverityPolicy())


def test_a_retryable_error_fails_over_to_another_holder() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        sup = await rt.supervise(_tree(reach.ChildSpec(Echo, "a", placement=packed()),
                                       reach.ChildSpec(Echo, "b", placement=packed())))
        task = await sup.submit("echo.say", Ask(text="x", fail="retryable"),
                                by_capability=True, retry_limit=1)
        result = await task.result()
        assert result.state is TaskState.FAILED
        assert sorted(a.agent_id for a in result.attempts) == ["a", "b"]
        assert [a.decision for a in result.attempts] == ["retry", "fail"]
        assert result.attempts[0].why == "retryable: fail over"

    run(scenario)


def test_without_failover_a_retry_goes_to_the_same_agent() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        sup = await rt.supervise(_tree(reach.ChildSpec(Echo, "a", placement=packed()),
                                       reach.ChildSpec(Echo, "b", placement=packed()),
                                       policy=SeverityPolicy(failover=False)))
        task = await sup.submit("echo.say", Ask(text="x", fail="retryable"),
                                by_capability=True, retry_limit=2)
        result = await task.result()
        assert len({a.agent_id for a in result.attempts}) == 1
        assert len(result.attempts) == 3
        assert result.attempts[0].why == "retryable: same agent"

    run(scenario)


def test_a_degradable_error_ends_the_task_degraded_with_its_partial_result() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        sup = await rt.supervise(_tree(reach.ChildSpec(Echo, "a")))
        result = await (await sup.submit("a", Ask(text="x", fail="degradable"))).result()
        assert result.state is TaskState.DEGRADED
        assert result.partial
        assert result.value == {"text": "half"}

    run(scenario)


def test_a_fatal_error_aborts_the_task_at_once() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        sup = await rt.supervise(_tree(reach.ChildSpec(Echo, "a")))
        result = await (await sup.submit("a", Ask(text="x", fail="fatal"))).result()
        assert result.state is TaskState.FAILED
        assert [a.decision for a in result.attempts] == ["abort"]
        assert result.error is not None
        assert result.error.severity is Severity.FATAL

    run(scenario)


def test_a_plain_exception_is_a_retryable_handler_error_and_the_agent_lives_on() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        await rt.spawn(Echo, "e-1")
        with pytest.raises(HandlerError, match="ValueError: boom"):
            await rt.client.request("e-1", Ask(text="x", fail="crash"))
        assert (await rt.client.request("e-1", Ask(text="ok"))).value.runs == 2

    run(scenario)


def test_a_cancelled_task_cancels_its_running_handler() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        sup = await rt.supervise(_tree(reach.ChildSpec(Echo, "a")))
        task = await sup.submit("a", Ask(text="x", sleep_s=600), timeout_ms=1_000_000)
        await handling(fake, rt, "a")
        result = await task.cancel()
        assert result.state is TaskState.CANCELLED

    run(scenario)


def test_a_task_retried_after_a_timeout_runs_an_effectively_once_handler_once() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        await rt.spawn(Once, "o-1")
        first = await rt.client.request("o-1", Ask(text="x"), msg_id="req-1")
        again = await rt.client.request("o-1", Ask(text="x"), msg_id="req-1")
        assert first.value.runs == again.value.runs == 1
        other = await rt.client.request("o-1", Ask(text="x"), msg_id="req-2")
        assert other.value.runs == 2

    run(scenario)


# -- sessions and closing -------------------------------------------------------------------


def test_a_session_knows_its_parties_and_its_negotiated_timeout() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        await rt.spawn(Echo, "e-1")
        session = await rt.open_session(rt.client.sender, "e-1", reach.Terms(timeout_ms=2000))
        assert session.peer == "e-1"
        assert session.terms.timeout_ms == 2000
        reply = await session.request(Ask(text="turn"))
        assert reply.value.text == "turn"
        context = await session.context()
        assert [m.kind for m in context.messages] == ["request", "reply"]
        with pytest.raises(RequestTimeout):
            await session.request(Ask(text="slow", sleep_s=10))  # the session's 2 s
        again = await rt.session(session.session_id)
        assert (again.initiator, again.responder) == (rt.client.sender, "e-1")

    run(scenario)


def test_close_lets_queued_notifications_leave_first() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        await rt.spawn(Echo, "e-1")
        host = (await rt.cluster.registry().lookup("e-1")).host
        for i in range(50):
            await rt.client.notify("e-1", Ask(text=str(i)))
        await rt.close()
        assert fake.process(host).runners["e-1"].handled == 50

    run(scenario)



def test_pool_hosts_are_named_by_their_pool() -> None:
    async def scenario(fake: FakeCluster) -> list[str]:
        rt = fake.runtime()
        await rt.spawn_many(Echo, ["e-1", "e-2", "e-3"], placement=packed("q"))
        return fake.names(POOL_PREFIX)

    assert run(scenario) == ["reach.pool.q.0", "reach.pool.q.1"]


def test_restarts_further_apart_than_the_period_never_exceed_the_intensity() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        sup = await rt.supervise(reach.SupervisorSpec(
            "s", intensity=Intensity(1, 5), children=[reach.ChildSpec(Echo, "e-1")]))
        for n in range(1, 4):
            fake.crash((await rt.cluster.registry().lookup("e-1")).host)

            async def restarted(n: int = n) -> bool:
                return len((await sup.status()).restarts) == n

            assert await eventually(restarted)
            await asyncio.sleep(6)  # past the period: the last restart no longer counts
        assert (await sup.status()).state is SupervisorState.RUNNING

    run(scenario)


def test_rest_for_one_restarts_the_failed_child_and_those_started_after_it() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        sup = await rt.supervise(reach.SupervisorSpec(
            "s", strategy=Strategy.REST_FOR_ONE, intensity=Intensity(5, 10), children=[
                reach.ChildSpec(Echo, "a"), reach.ChildSpec(Echo, "b"),
                reach.ChildSpec(Echo, "c")]))
        epochs = {r.agent_id: r.epoch for r in await rt.agents()}
        fake.crash((await rt.cluster.registry().lookup("b")).host)

        async def restarted() -> Any:
            status = await sup.status()
            return len(status.restarts) == 2 and status

        status = await eventually(restarted)
        assert [r.child for r in status.restarts] == ["b", "c"]
        after = {r.agent_id: r.epoch for r in await rt.agents()}
        assert after["a"] == epochs["a"]
        assert after["b"] > epochs["b"]

    run(scenario)


def test_a_nested_supervisor_past_its_intensity_is_restarted_by_its_parent() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        root = await rt.supervise(reach.SupervisorSpec(
            "root", intensity=Intensity(3, 60), children=[
                reach.SupervisorSpec("inner", intensity=Intensity(0, 60), children=[
                    reach.ChildSpec(Echo, "e-1", placement=packed())])]))
        fake.crash((await rt.cluster.registry().lookup("e-1")).host)

        async def escalated() -> Any:
            status = await root.status()
            return [r.child for r in status.restarts] == ["inner"] and status

        status = await eventually(escalated)
        assert status.subtree["inner"].state is SupervisorState.RUNNING
        reply = await rt.client.request("e-1", Ask(text="back"), timeout_ms=20_000)
        assert reply.value.by == "e-1"

    run(scenario)


def test_a_session_request_is_resent_to_a_restarted_receiver_and_answered_once() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        await rt.supervise(reach.SupervisorSpec("s", children=[
            reach.ChildSpec(Echo, "e-1", placement=packed())]))
        session = await rt.open_session(rt.client.sender, "e-1")
        host = (await rt.cluster.registry().lookup("e-1")).host
        turn = asyncio.ensure_future(session.request(Ask(text="slow", sleep_s=3),
                                                     timeout_ms=60_000))
        await handling(fake, rt, "e-1")
        fake.crash(host)  # mid-request: the supervisor restarts it, the request is resent
        reply = await turn
        assert reply.value.text == "slow"
        context = await session.context()
        assert [m.kind for m in context.messages] == ["request", "reply"]

    run(scenario)


def test_signed_calls_on_the_fake_cluster_and_the_acl_refuses_a_caller(tmp_path: Any) -> None:
    from reach.errors import AuthError
    from reach.security.guard import SecurityConfig, resolve_keyring

    keyring = resolve_keyring(tmp_path / "keyring.json", create=True)

    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        await rt.spawn(Echo, "e-1")
        await rt.spawn(Relay, "r-1")
        assert (await rt.client.request("r-1", Ask(text="x"))).value.by == "e-1"
        await rt.set_acl(reach.Acl((reach.Rule(callers=("r-*",), capabilities=("echo.*",),
                                               allow=False),)))

        async def applied() -> bool:  # hosts apply it by their next heartbeat
            try:
                await rt.client.request("r-1", Ask(text="x"))
            except AuthError:
                return True
            return False

        await eventually(applied)
        with pytest.raises(AuthError, match="access denied"):
            await rt.client.request("r-1", Ask(text="x"))

    run(scenario, security=SecurityConfig(sign=True, keyring=keyring))


def test_a_dead_hosts_watch_does_not_fail_the_retry_of_the_same_request_elsewhere() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        sup = await rt.supervise(_tree(reach.ChildSpec(Echo, "a"), reach.ChildSpec(Echo, "b")))
        first = await sup.submit("echo.say", Ask(text="x", sleep_s=2), by_capability=True,
                                 retry_limit=3)

        async def assigned() -> str:
            return _running_on(fake)

        victim = await eventually(assigned)
        await handling(fake, rt, victim)
        fake.crash((await rt.cluster.registry().lookup(victim)).host)
        # Another request to the dead host fails at once and fails the first task's attempt
        # too; the task retries (same request ID) on the other agent well before the dead
        # host's watch, which noted that request ID, gives up on it.
        await sup.submit(victim, Ask(text="y"), retry_limit=0)
        done = await first.result()
        assert done.state is TaskState.COMPLETED
        assert len(done.attempts) == 2
        assert done.attempts[1].agent_id != victim

    run(scenario)


def _running_on(fake: FakeCluster) -> str:
    """The agent supervisor ``s``'s only task runs on now ("" before it is assigned)."""
    (task,) = fake.process("reach.sup.s").tasks.tasks.values()
    return task.assigned or ""


async def handling(fake: FakeCluster, rt: Any, agent_id: str) -> None:
    """Returns once ``agent_id``'s handler is running (a request is in flight there)."""
    host = (await rt.cluster.registry().lookup(agent_id)).host
    runner = fake.process(host).runners[agent_id]

    async def busy() -> bool:
        return bool(runner.inflight)

    await eventually(busy, every_s=0.01)


def test_a_late_reply_from_an_earlier_holder_of_the_request_id_is_not_taken_for_the_new_one(
) -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        await rt.spawn_many(Echo, ["a", "b"], placement=packed())
        with pytest.raises(RequestTimeout):
            await rt.client.request("a", Ask(text="x", sleep_s=3), msg_id="m-1", timeout_ms=1000)
        # The same request ID, retried on b; a's reply arrives (at 3 s) while b still works.
        reply = await rt.client.request("b", Ask(text="x", sleep_s=5), msg_id="m-1",
                                        timeout_ms=10_000)
        assert reply.value.by == "b"

    run(scenario)


def test_replies_queued_for_a_caller_leave_with_its_next_call_and_streams_keep_order() -> None:
    from reach._runtime.transport import STREAM_END_SCHEMA, Transport
    from reach.errors import ReachError
    from reach.protocol import Envelope, MsgType

    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        caller = rt.transport.endpoint
        transport = Transport("reach.host.replies", fake)
        plain = Envelope.request("c-1", "e-1", Ask(text="a"))
        streamed = Envelope.request("c-1", "e-1", Ask(text="b"))
        failed = Envelope.request("c-1", "e-1", Ask(text="c"))
        posted = [plain.reply(Answer(text="a", by="e-1")),
                  Envelope(msg_type=MsgType.EVENT, sender="e-1", receiver="c-1",
                           payload={"text": "b1", "by": "e-1"}, payload_schema="fake.answer@1.0",
                           request_id=streamed.msg_id),
                  streamed.reply({"chunks": 1}, STREAM_END_SCHEMA, sender="e-1"),
                  failed.fail(ReachError("no"), sender="e-1"),
                  Envelope.notification("e-1", "c-1", Ask(text="note"))]
        for env in posted:
            transport.post(caller, env)  # queued: its outbox sends on the next iteration
        taken = transport.take_replies(caller)
        # The plain reply and the error ride back; the stream's chunk and end, and what is not
        # a reply, keep their places in the outbox.
        assert [e.msg_id for e in taken] == [posted[0].msg_id, posted[3].msg_id]
        assert transport.take_replies(caller) == []
        assert transport.take_replies("reach.host.nobody") == []
        await transport.flush()

    run(scenario)


def test_a_slow_reply_rides_back_on_the_callers_next_call_to_its_host() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        await rt.spawn(Echo, "e-1", placement=packed())
        inbox = rt.transport.endpoint
        delivered = fake.process(inbox).deliver

        async def loaded(frame: bytes, reply_to: str) -> Any:  # a busy machine's Ray call
            await asyncio.sleep(0.02)
            return await delivered(frame, reply_to)

        fake.process(inbox).deliver = loaded
        # Slow requests: while the host's call to the inbox is under way, the replies that
        # follow queue up, and the caller's next call to the host takes them back with it.
        calls = [asyncio.ensure_future(rt.client.request("e-1", Ask(text=str(i),
                                                                    sleep_s=0.01 * (i % 7))))
                 for i in range(200)]
        for i in range(0, 200, 5):
            await asyncio.sleep(0.005)
            calls.append(asyncio.ensure_future(rt.client.request("e-1", Ask(text=f"x{i}"))))
        replies = await asyncio.gather(*calls)
        assert len(replies) == 240
        host = (await rt.cluster.registry().lookup("e-1")).host
        through_inbox = (await rt.cluster.host(host).info())["envelopes_sent"]
        assert through_inbox < 130  # half the late replies rode back on the caller's next calls

    run(scenario)


def test_a_hosts_info_says_how_much_cpu_its_process_has_used() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        await rt.spawn(Echo, "e-1", placement=packed())
        host = rt.cluster.host((await rt.cluster.registry().lookup("e-1")).host)
        before = (await host.info())["cpu_s"]
        await asyncio.gather(*(rt.client.request("e-1", Ask(text=str(i))) for i in range(300)))
        after = (await host.info())["cpu_s"]
        # (the fake cluster's hosts share this process: its CPU time is theirs)
        assert 0 < before < after <= time.process_time()

    run(scenario)


@pytest.fixture
def gc_thresholds() -> Any:
    saved = gc.get_threshold()
    yield
    gc.set_threshold(*saved)


@pytest.mark.usefixtures("gc_thresholds")
def test_a_host_collects_young_garbage_in_batches_of_ten_thousand() -> None:
    gc.set_threshold(700, 10, 10)  # Python's default

    async def scenario(fake: FakeCluster) -> None:
        await fake.runtime().spawn(Echo, "e-1", placement=packed())

    run(scenario)  # (the fake cluster's hosts live in this process)
    assert gc.get_threshold() == (YOUNG_GC_THRESHOLD, 10, 10)
    gc.set_threshold(50_000, 5, 5)  # an application's own, higher: kept
    raise_young_gc_threshold()
    assert gc.get_threshold() == (50_000, 5, 5)
    gc.set_threshold(0)  # collecting turned off: it stays off
    raise_young_gc_threshold()
    assert gc.get_threshold()[0] == 0
