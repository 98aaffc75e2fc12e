"""Fenced replies on the fake cluster: when a request's first holder is slow, not dead, and the
request runs again on another holder, at most one of them commits its result; the other's is
discarded and audited, and every caller ends up with the committed reply."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import reach
from policies.tasks import SeverityPolicy, TaskState
from reach._runtime.runner import DISCARDED
from reach.errors import AgentUnavailable
from reach.security.guard import SecurityConfig, resolve_keyring
from reach.testing import FakeCluster, eventually, run


@reach.schema("fence.job@1.0")
class Job(BaseModel):
    text: str


@reach.schema("fence.done@1.0")
class Done(BaseModel):
    text: str
    by: str


class Worker(reach.Agent):
    """Does a job at most once per request ID, taking ``delay_s`` (virtual) seconds to do it."""

    capabilities = ("fence.work",)
    description = "Does jobs, slowly when told to."

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.started: list[str] = []
        self.finished: list[str] = []

    @reach.handler(Job, returns=Done, once=True)
    async def work(self, ctx: reach.Context, job: Job) -> Done:
        self.started.append(ctx.request_envelope.msg_id)
        await asyncio.sleep(self.delay_s)
        self.finished.append(ctx.request_envelope.msg_id)
        return Done(text=job.text, by=self.id)


def signed(tmp_path: Path) -> SecurityConfig:
    """Signing on, so that hosts keep an audit log of the calls they handle."""
    return SecurityConfig(sign=True, keyring=resolve_keyring(tmp_path / "keyring.json",
                                                             create=True))


async def worker(fake: FakeCluster, rt: Any, agent_id: str) -> Worker:
    """The live instance of an agent (the fake cluster runs every process in this one)."""
    host = (await rt.cluster.registry().lookup(agent_id)).host
    found: Worker = fake.process(host).runners[agent_id].agent
    return found



async def discards(rt: Any, agent_id: str) -> list[dict[str, Any]]:
    """The audit records of ``agent_id``'s discarded results, once the host's trail flushed."""
    async def found() -> list[dict[str, Any]]:
        records = await rt.cluster.audit_log().audit_records(None, agent_id, 1000)
        return [r for r in records if r["outcome"] == DISCARDED]

    hits: list[dict[str, Any]] = await eventually(found)
    return hits


def test_a_slow_holders_late_result_is_discarded_after_its_task_failed_over(
    tmp_path: Path,
) -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        sup = await rt.supervise(reach.SupervisorSpec(
            "s", children=[reach.ChildSpec(Worker, "a", args=(5.0,))], seed=7,
            task_policy=SeverityPolicy()))
        task = await sup.submit("fence.work", Job(text="x"), by_capability=True,
                                timeout_ms=60_000, retry_limit=3)
        slow = await worker(fake, rt, "a")
        await eventually(lambda: _true(task.task_id in slow.started))
        await rt.spawn(Worker, "b", args=(0.0,))
        # The owner believes a's host died (as a failed Ray call would make it), though a is
        # only slow: the task fails over to b, under the same request ID.
        owner = fake.process("reach.sup.s").tasks.link.transport
        host_a = (await rt.cluster.registry().lookup("a")).host
        owner.endpoint_died(host_a, AgentUnavailable(f"{host_a} did not answer"))

        result = await task.result()
        assert result.state is TaskState.COMPLETED
        assert [a.agent_id for a in result.attempts] == ["a", "b"]
        assert result.value == Done(text="x", by="b")

        await eventually(lambda: _true(slow.finished == [task.task_id]))  # a did finish...
        recorded = await rt.cluster.sessions().reply_for(task.task_id)
        assert recorded == {"agent_id": "b", "payload": {"text": "x", "by": "b"},
                            "schema": "fence.done@1.0"}  # ...and its result was discarded
        (record,) = await discards(rt, "a")
        assert (record["callee"], record["trace_id"]) == ("a", task.task_id)

        late = await rt.client.request("a", Job(text="x"), msg_id=task.task_id)
        assert late.value == Done(text="x", by="b")
        assert slow.finished == [task.task_id]  # answered from the record, not run again

    run(scenario, security=signed(tmp_path))


def test_a_task_ends_with_the_committed_reply_when_the_fenced_holder_finishes_first(
    tmp_path: Path,
) -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        sup = await rt.supervise(reach.SupervisorSpec(
            "s", children=[reach.ChildSpec(Worker, "a", args=(5.0,))], seed=7,
            task_policy=SeverityPolicy()))
        task = await sup.submit("fence.work", Job(text="x"), by_capability=True,
                                timeout_ms=60_000, retry_limit=3)
        slow = await worker(fake, rt, "a")
        await eventually(lambda: _true(task.task_id in slow.started))
        await rt.spawn(Worker, "b", args=(10.0,))  # the failover holder is slower still
        owner = fake.process("reach.sup.s").tasks.link.transport
        host_a = (await rt.cluster.registry().lookup("a")).host
        owner.endpoint_died(host_a, AgentUnavailable(f"{host_a} did not answer"))

        result = await task.result()
        assert result.state is TaskState.COMPLETED
        recorded = await rt.cluster.sessions().reply_for(task.task_id)
        assert recorded is not None
        assert result.value == Done.model_validate(recorded["payload"])
        assert len(await discards(rt, "a")) == 1

    run(scenario, security=signed(tmp_path))


def test_the_slow_holders_own_caller_gets_the_winners_reply_not_its_own(
    tmp_path: Path,
) -> None:
    async def scenario(fake: FakeCluster) -> None:
        first, failover = fake.runtime(), fake.runtime()
        await first.spawn(Worker, "a", args=(5.0,))
        await first.spawn(Worker, "b", args=(0.0,))
        slow = await worker(fake, first, "a")
        to_a = asyncio.ensure_future(first.client.request("a", Job(text="x"), msg_id="job-1",
                                                          timeout_ms=60_000))
        await eventually(lambda: _true("job-1" in slow.started))
        to_b = await failover.client.request("b", Job(text="x"), msg_id="job-1",
                                             timeout_ms=60_000)
        assert to_b.value == Done(text="x", by="b")

        assert (await to_a).value == Done(text="x", by="b")
        assert slow.finished == ["job-1"]
        recorded = await first.cluster.sessions().reply_for("job-1")
        assert recorded is not None
        assert recorded["agent_id"] == "b"
        assert len(await discards(first, "a")) == 1

    run(scenario, security=signed(tmp_path))


def test_a_fenced_holder_that_finishes_first_answers_retryable_and_the_later_one_commits(
    tmp_path: Path,
) -> None:
    async def scenario(fake: FakeCluster) -> None:
        first, failover = fake.runtime(), fake.runtime()
        await first.spawn(Worker, "a", args=(5.0,))
        await first.spawn(Worker, "b", args=(10.0,))
        slow = await worker(fake, first, "a")
        to_a = asyncio.ensure_future(first.client.request("a", Job(text="x"), msg_id="job-2",
                                                          timeout_ms=60_000))
        await eventually(lambda: _true("job-2" in slow.started))
        to_b = asyncio.ensure_future(failover.client.request("b", Job(text="x"),
                                                             msg_id="job-2", timeout_ms=60_000))

        with pytest.raises(AgentUnavailable, match="being answered by another holder") as err:
            await to_a  # a finished first, but b's claim had fenced it off
        assert err.value.details["reason"] == "fenced"
        assert await first.cluster.sessions().reply_for("job-2") is None
        assert (await to_b).value == Done(text="x", by="b")

        retry = await first.client.request("a", Job(text="x"), msg_id="job-2")
        assert retry.value == Done(text="x", by="b")
        assert slow.finished == ["job-2"]
        assert len(await discards(first, "a")) == 1

    run(scenario, security=signed(tmp_path))


def test_without_an_audit_log_a_discarded_result_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario(fake: FakeCluster) -> None:
        first, failover = fake.runtime(), fake.runtime()
        await first.spawn(Worker, "a", args=(5.0,))
        await first.spawn(Worker, "b", args=(0.0,))
        slow = await worker(fake, first, "a")
        to_a = asyncio.ensure_future(first.client.request("a", Job(text="x"), msg_id="job-3",
                                                          timeout_ms=60_000))
        await eventually(lambda: _true("job-3" in slow.started))
        await failover.client.request("b", Job(text="x"), msg_id="job-3", timeout_ms=60_000)
        assert (await to_a).value.by == "b"
        assert await first.cluster.audit_log().audit_records(None, "a", 1000) == []

    with caplog.at_level(logging.WARNING, logger="reach._runtime.runner"):
        run(scenario)  # signing off: no audit log
    assert any("discarded the result of a for request job-3" in r.getMessage()
               for r in caplog.records)


async def _true(value: bool) -> bool:
    return value
