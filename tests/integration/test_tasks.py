"""Tasks under a supervisor: retry with failover, degrade, abort with cancellation, history."""

from __future__ import annotations

from typing import Any

import pytest
from ray_helpers import wait_until
from support_agents import Fanner, Forward, Forwarder, Life, Text, Worker

import reach
from reach import ChildSpec, SupervisorSpec, TaskState

pytestmark = pytest.mark.integration

FAST = reach.Backoff(base_s=0.01, cap_s=0.05)


class Flaky(Worker):
    capabilities = ("task.flaky",)


class AlsoFlaky(Worker):
    capabilities = ("task.flaky",)


async def life(rt: Any, agent_id: str) -> Life:
    reply = await rt.client.request(agent_id, {}, "test.life.ask@1.0", returns=Life)
    return reply.value


async def test_retryable_errors_fail_over_between_holders_until_the_retry_limit(
    rt: Any
) -> None:
    sup = await rt.supervise(SupervisorSpec("t-failover", backoff=FAST, seed=3, children=[
        ChildSpec(Flaky, "t-a-flaky", placement=reach.Packed(pool="tasks")),
        ChildSpec(AlsoFlaky, "t-b-also-flaky", placement=reach.Packed(pool="tasks"))]))
    # Both hold task.flaky; the flaky one sorts first, so it gets the first attempt.
    task = await sup.submit("task.flaky", Text(text="retryable"), by_capability=True)
    result = await task.result()
    assert result.state is TaskState.FAILED  # both raise retryable for this text: limit reached
    assert {a.agent_id for a in result.attempts} == {"t-a-flaky", "t-b-also-flaky"}
    assert len(result.attempts) == 4  # the first try and three retries
    assert [a.decision for a in result.attempts] == ["retry", "retry", "retry", "fail"]
    assert result.attempts[0].why == "retryable: fail over"  # the other holder was untried
    assert result.error is not None
    assert result.error.code == "reach_error"

    task = await sup.submit("t-a-flaky", Text(text="retryable"), retry_limit=1)
    result = await task.result()
    assert [a.agent_id for a in result.attempts] == ["t-a-flaky", "t-a-flaky"]
    await sup.stop()


async def test_a_policy_without_failover_retries_on_the_same_holder(rt: Any) -> None:
    policy = reach.SeverityPolicy(backoff=FAST, failover=False)
    sup = await rt.supervise(SupervisorSpec("t-stay", backoff=FAST, seed=3, task_policy=policy,
                                            children=[
        ChildSpec(Flaky, "t-stay-a", placement=reach.Packed(pool="tasks")),
        ChildSpec(AlsoFlaky, "t-stay-b", placement=reach.Packed(pool="tasks"))]))
    result = await (await sup.submit("task.flaky", Text(text="retryable"), by_capability=True,
                                     retry_limit=2)).result()
    assert result.state is TaskState.FAILED
    assert len({a.agent_id for a in result.attempts}) == 1, result.attempts
    assert [a.why for a in result.attempts[:2]] == ["retryable: same agent"] * 2
    await sup.stop()


async def test_failover_completes_on_the_healthy_holder(rt: Any) -> None:
    class Broken(Worker):
        capabilities = ("task.mixed",)

        @reach.handler(Text, returns=Text)
        async def act(self, ctx: reach.Context, m: Text) -> Text:
            raise reach.AgentUnavailable("my database is down")

    class Healthy(Worker):
        capabilities = ("task.mixed",)

    sup = await rt.supervise(SupervisorSpec("t-mixed", backoff=FAST, seed=3, children=[
        ChildSpec(Broken, "t-m-a-broken", placement=reach.Packed(pool="tasks")),
        ChildSpec(Healthy, "t-m-b-healthy", placement=reach.Packed(pool="tasks"))]))
    result = await (await sup.submit("task.mixed", Text(text="hello"),
                                     by_capability=True)).result()
    assert result.state is TaskState.COMPLETED
    assert result.value == Text(text="t-m-b-healthy:hello")
    assert [(a.agent_id, a.outcome) for a in result.attempts] == [
        ("t-m-a-broken", "error"), ("t-m-b-healthy", "ok")]
    assert result.attempts[0].code == "agent_unavailable"
    # Never assigned to two agents at once: each attempt starts after the previous one ended.
    first, second = result.attempts
    assert second.started >= first.ended
    await sup.stop()


async def test_a_degradable_error_finishes_degraded_with_the_partial_result(rt: Any) -> None:
    sup = await rt.supervise(SupervisorSpec("t-degrade", backoff=FAST, children=[
        ChildSpec(Worker, "t-degrade-1", placement=reach.Packed(pool="tasks"))]))
    result = await (await sup.submit("t-degrade-1", Text(text="degrade"))).result()
    assert result.state is TaskState.DEGRADED
    assert result.partial is True
    assert result.value == {"rows": 5, "of": 10}
    assert result.error is not None
    assert result.error.severity is reach.Severity.DEGRADABLE
    await sup.stop()


async def test_a_fatal_error_aborts_and_cancels_outstanding_sub_requests(rt: Any) -> None:
    sup = await rt.supervise(SupervisorSpec("t-abort", backoff=FAST, children=[
        ChildSpec(Fanner, "t-fanner", placement=reach.Packed(pool="tasks")),
        ChildSpec(Worker, "t-slow", placement=reach.Packed(pool="tasks")),
        ChildSpec(Worker, "t-fatal", placement=reach.Packed(pool="tasks"))]))
    task = await sup.submit("t-fanner", Forward(to=["t-slow", "t-fatal"], text="fatal"))
    result = await task.result()
    assert result.state is TaskState.FAILED
    assert result.error is not None
    assert result.error.severity is reach.Severity.FATAL
    assert [a.decision for a in result.attempts] == ["abort"]

    async def slow_was_cancelled() -> Life | None:
        info = await life(rt, "t-slow")
        return info if task.task_id in info.cancelled else None

    assert await wait_until(slow_was_cancelled)
    await sup.stop()


async def test_errors_travel_up_the_chain_and_only_the_task_owner_retries(rt: Any) -> None:
    sup = await rt.supervise(SupervisorSpec("t-chain", backoff=FAST, children=[
        ChildSpec(Forwarder, "t-front", placement=reach.Packed(pool="tasks")),
        ChildSpec(Worker, "t-back", placement=reach.Packed(pool="tasks"))]))
    before = (await life(rt, "t-back")).calls

    result = await (await sup.submit(
        "t-front", {"to": ["t-back"], "text": "unused"}, "test.forward@1.0",
        retry_limit=2)).result()
    # t-front forwards a Forward payload that t-back (a Worker) cannot read: a fatal
    # schema error raised by t-back, carried up through t-front to the owner, which aborts.
    assert result.state is TaskState.FAILED
    assert result.attempts[0].code == "schema_incompatible"
    after = (await life(rt, "t-back")).calls
    assert after == before  # the handler never ran: refused before delivery to it
    await sup.stop()


async def test_a_retryable_error_deep_in_the_chain_is_retried_by_the_owner_not_the_caller(
    rt: Any
) -> None:
    class Relay(reach.Agent):
        capabilities = ("task.relay",)

        @reach.handler(Text, returns=Text)
        async def relay(self, ctx: reach.Context, m: Text) -> Text:
            reply = await ctx.request("t-deep-worker", Text(text="retryable"), returns=Text)
            return reply.value

    sup = await rt.supervise(SupervisorSpec("t-deep", backoff=FAST, children=[
        ChildSpec(Relay, "t-deep-relay", placement=reach.Packed(pool="tasks")),
        ChildSpec(Worker, "t-deep-worker", placement=reach.Packed(pool="tasks"))]))
    result = await (await sup.submit("t-deep-relay", Text(text="go"), retry_limit=2)).result()
    assert result.state is TaskState.FAILED
    assert [a.agent_id for a in result.attempts] == ["t-deep-relay"] * 3
    assert {a.severity for a in result.attempts} == {"retryable"}
    calls = (await life(rt, "t-deep-worker")).calls
    assert calls == 3  # once per owner attempt: the relay never retried on its own
    await sup.stop()


async def test_a_task_can_be_cancelled_and_its_handler_is_cancelled_too(rt: Any) -> None:
    sup = await rt.supervise(SupervisorSpec("t-cancel", backoff=FAST, children=[
        ChildSpec(Worker, "t-cancel-1", placement=reach.Packed(pool="tasks"))]))
    task = await sup.submit("t-cancel-1", Text(text="sleep60"), timeout_ms=120_000)

    async def running() -> bool:
        return (await life(rt, "t-cancel-1")).calls == 1

    await wait_until(running)
    result = await task.cancel()
    assert result.state is TaskState.CANCELLED
    assert result.error is not None
    assert result.error.code == "task_cancelled"
    assert (await task.result()) == result  # the ended task keeps its result

    async def handler_cancelled() -> bool:
        return task.task_id in (await life(rt, "t-cancel-1")).cancelled

    await wait_until(handler_cancelled)
    await sup.stop()


async def test_a_task_that_runs_out_of_time_fails_with_request_timeout(rt: Any) -> None:
    sup = await rt.supervise(SupervisorSpec("t-late", backoff=FAST, children=[
        ChildSpec(Worker, "t-late-1", placement=reach.Packed(pool="tasks"))]))
    result = await (await sup.submit("t-late-1", Text(text="sleep30"),
                                     timeout_ms=300)).result()
    assert result.state is TaskState.FAILED
    assert result.error is not None
    assert result.error.code == "request_timeout"
    await sup.stop()


async def test_an_agent_submits_a_task_to_a_supervisor_and_awaits_it(rt: Any) -> None:
    class Delegator(reach.Agent):
        capabilities = ("task.delegate",)

        @reach.handler(Text, returns=Text)
        async def delegate(self, ctx: reach.Context, m: Text) -> Text:
            sup = ctx.supervisor("t-delegate")
            task = await sup.submit("t-delegate-worker", Text(text=m.text), returns=Text)
            result = await task.result()
            assert result.value is not None
            return Text(text=f"{result.state}:{result.value.text}")

    sup = await rt.supervise(SupervisorSpec("t-delegate", backoff=FAST, children=[
        ChildSpec(Worker, "t-delegate-worker", placement=reach.Packed(pool="tasks")),
        ChildSpec(Delegator, "t-delegator", placement=reach.Packed(pool="tasks"))]))
    reply = await rt.client.request("t-delegator", Text(text="via a task"), returns=Text)
    assert reply.value.text == "completed:t-delegate-worker:via a task"
    with pytest.raises(reach.AgentNotFound):
        rt.find_supervisor("t-no-such-supervisor")
    found = rt.find_supervisor("t-delegate")
    assert (await found.status()).name == "t-delegate"
    await sup.stop()


async def test_waiting_on_an_unknown_task_is_task_not_found(rt: Any) -> None:
    sup = await rt.supervise(SupervisorSpec("t-unknown", backoff=FAST, children=[]))
    with pytest.raises(reach.TaskNotFound):
        await reach.TaskHandle(sup._port, "no-such-task").result()
    with pytest.raises(reach.TaskNotFound):
        await reach.TaskHandle(sup._port, "no-such-task").cancel()
    await sup.stop()


async def test_supervisor_decisions_are_in_the_verifiable_audit_log(
    rt: Any, sessions_db: Any
) -> None:
    from reach.tools import audit

    sup = await rt.supervise(SupervisorSpec("t-audited", backoff=FAST, children=[
        ChildSpec(Worker, "t-audited-1", placement=reach.Packed(pool="tasks"))]))
    task = await sup.submit("t-audited-1", Text(text="degrade"))
    result = await task.result()
    # The decision and the policy's reason for it, as the task's history has them.
    outcome = f"degrade: reach_error ({result.attempts[0].why})"
    assert result.attempts[0].why

    async def audited() -> dict[str, dict[str, Any]] | None:
        # Two writers, each flushing in its own time: the host that handled the call, and the
        # supervisor that decided on its error.
        records = await rt.cluster.audit_log().audit_records(task.task_id, None, 1000)
        return {r["msg_type"]: r for r in records} if len(records) >= 2 else None

    by_type = await wait_until(audited)
    assert sorted(by_type) == ["request", "task"]
    call, decision = by_type["request"], by_type["task"]
    assert (call["caller"], call["callee"]) == ("reach.sup.t-audited", "t-audited-1")
    assert call["outcome"] == "error: reach_error"
    assert (decision["caller"], decision["callee"]) == ("reach.sup.t-audited", "t-audited-1")
    assert decision["outcome"] == outcome
    verdict = audit.verify(sessions_db)
    assert verdict.ok
    assert verdict.records >= 2
    on_disk = audit.records(sessions_db, trace_id=task.task_id)
    assert [r["outcome"] for r in on_disk if r["msg_type"] == "task"] == [outcome]
    await sup.stop()
