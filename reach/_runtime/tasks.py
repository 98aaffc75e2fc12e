"""Tasks: work a supervisor owns from submission to an end, deciding on every error.

The owner sends the task's request to an agent (by ID, or the least-loaded holder of a
capability), and on an error asks its task policy: retry (on another holder when the decision
says to fail over, else on the same agent), finish degraded with the partial result, abort
(cancelling every handler still running under the task's trace), or fail. A task is assigned to
one agent at a time, never two, and every attempt is recorded: which agent, which error, what was
decided and why. Where the owner traces, each attempt is a span (:data:`SpanName.TASK_ATTEMPT
<reach.spans.SpanName>`) with its agent, its number and, when it failed, the error, the
decision and why; an attempt after the first links to the first. A task's trace is that of the
span current where it was submitted (an A2A caller's), or else a trace of its own whose ID is
the task's.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link as SpanLink
from opentelemetry.trace import Span, SpanKind

from policies.tasks import (
    FINAL_STATE,
    TERMINAL,
    Action,
    Decision,
    TaskPolicy,
    TaskState,
    transition,
)
from reach import clock
from reach._runtime.courier import Courier
from reach._runtime.link import Link
from reach._runtime.metrics import FLUSH_S, metrics
from reach._runtime.tracer import TRACING, event, failed, start
from reach.errors import (
    ErrorInfo,
    InvalidTransition,
    ReachError,
    RequestTimeout,
    TaskCancelled,
    TaskNotFound,
)
from reach.ports.cluster import Cluster
from reach.protocol import new_id
from reach.records import AgentRecord, Attempt, AttemptOutcome, TaskResult
from reach.spans import Attr, SpanName
from reach.specs import TaskSpec

#: Ended tasks an owner remembers for ``wait``; beyond that the oldest are forgotten.
KEEP_TASKS = 10_000


@dataclass
class TaskRecord:
    """A task's state and history, as the owner keeps it (read it with :meth:`result`)."""

    task_id: str
    spec: TaskSpec
    state: TaskState = TaskState.INITIALIZED
    value: dict[str, Any] | None = None
    # The schema the reply's payload declared (its value is read by it where the result goes).
    schema: str = ""
    partial: bool = False
    error: ErrorInfo | None = None
    # Invariant: every attempt but the last has ended; the last is running while ``assigned``.
    attempts: list[Attempt] = field(default_factory=list)
    # Invariant: assigned is the one agent working on the task now, or None.
    assigned: str | None = None
    submitted: float = field(default_factory=clock.now)
    finished: float = 0.0
    # The trace of its messages: its ID, or the trace it was submitted in.
    trace_id: str = ""
    # Where it was submitted (its attempts' parent), and its first attempt's span (while
    # traced).
    context: otel_context.Context | None = None
    first: Span | None = None

    def move(self, to: TaskState) -> None:
        """Moves along the state machine (refusing an illegal move)."""
        self.state = transition(self.state, to)
        if to in TERMINAL:
            self.finished = clock.now()

    def end_attempt(self, outcome: AttemptOutcome, *, code: str = "", severity: str = "",
                    reason: str = "", decision: str = "", why: str = "") -> Attempt:
        """Ends the last attempt with ``outcome`` (and, for an error, its code, severity,
        message, the decision taken and why); returns it."""
        ended = self.attempts[-1] = replace(
            self.attempts[-1], ended=clock.now(), outcome=outcome, code=code, severity=severity,
            reason=reason, decision=decision, why=why)
        return ended

    def result(self) -> TaskResult[dict[str, Any]]:
        """The task's outcome as it crosses process boundaries: typed, its value the reply's
        payload (the handle that receives it reads it as the handler's model)."""
        return TaskResult(self.task_id, self.state, self.value, self.partial, self.error,
                          tuple(self.attempts), self.submitted, self.finished, self.schema)


async def cancel_trace_everywhere(cluster: Cluster, trace_id: str, reason: str) -> None:
    """Cancels every running handler of a trace on every live host (what a task's owner does
    when it aborts or cancels a task: the supervisor, a gateway replica)."""
    calls = []
    for name in await cluster.registry().hosts():
        try:
            calls.append(cluster.host(name).cancel_trace(trace_id, reason))
        except ReachError:  # a host that is gone runs nothing to cancel
            continue
    await asyncio.gather(*calls, return_exceptions=True)


class TaskRunner:
    """Runs tasks for one owner (a supervisor).

    Args:
        link: The owner's link (its transport and directory).
        owner: The owner's ID, the sender of every task request.
        policy: Decides on errors.
        rng: Random generator for backoff jitter.
        cancel_trace: Cancels every running handler of a trace, cluster-wide (for aborts).
        audit: Records each decision in the audit log, if given.
    """

    def __init__(self, link: Link, owner: str, policy: TaskPolicy, rng: random.Random,
                 cancel_trace: Callable[[str, str], Awaitable[None]],
                 *, audit: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.link = link
        self.audit = audit
        self.owner = owner
        self.policy = policy
        self.rng = rng
        self.cancel_trace = cancel_trace
        self.tasks: dict[str, TaskRecord] = {}
        self._running: dict[str, asyncio.Task[None]] = {}
        self._publisher: asyncio.Task[None] | None = None

    def submit(self, spec: TaskSpec, task_id: str | None = None) -> str:
        """Starts a task (under ``task_id``, a fresh ID by default); returns its ID (also the
        trace ID of all its messages)."""
        task = TaskRecord(task_id or new_id(), spec)
        task.trace_id = task.task_id
        if TRACING.tracer is not None:
            task.context = otel_context.get_current()
            submitted_in = trace.get_current_span(task.context).get_span_context()
            if submitted_in.is_valid:
                task.trace_id = f"{submitted_in.trace_id:032x}"
        self.tasks[task.task_id] = task
        if len(self.tasks) > KEEP_TASKS:  # forget the oldest ended tasks (dicts keep order)
            for old in [t for t, r in self.tasks.items() if r.state in TERMINAL][:KEEP_TASKS // 10]:
                del self.tasks[old]
        runner = asyncio.get_running_loop().create_task(self._run(task))
        self._running[task.task_id] = runner
        runner.add_done_callback(lambda _: self._running.pop(task.task_id, None))
        if self._publisher is None or self._publisher.done():
            self._publisher = asyncio.get_running_loop().create_task(self._publish())
        return task.task_id

    async def _publish(self) -> None:
        """Publishes the tasks by state (the ``reach_tasks`` gauge) each second, from the first
        task on: Ray exports a gauge only for a while after it was last set, so a value that
        stopped being set would vanish from the dashboard once the tasks ended."""
        while True:
            await asyncio.sleep(FLUSH_S)
            counts = self.counts()
            for state in TaskState:
                metrics.gauge("reach_tasks", counts.get(state.value, 0), supervisor=self.owner,
                              state=state.value)

    def _task(self, task_id: str) -> TaskRecord:
        task = self.tasks.get(task_id)
        if task is None:
            raise TaskNotFound(f"no task {task_id!r} here (never submitted, or forgotten)",
                               details={"task_id": task_id})
        return task

    async def wait(self, task_id: str) -> TaskResult[dict[str, Any]]:
        """Waits for a task to end; returns its result.

        Raises:
            TaskNotFound: no such task.
        """
        self._task(task_id)
        runner = self._running.get(task_id)
        if runner is not None:
            await asyncio.wait([runner])  # its end, however it ended (cancelled included)
        return self.tasks[task_id].result()

    async def cancel(self, task_id: str) -> TaskResult[dict[str, Any]]:
        """Cancels a task and every handler still running under it; returns its result.

        Raises:
            TaskNotFound: no such task.
        """
        task = self._task(task_id)
        runner = self._running.get(task_id)
        if runner is not None and task.state not in TERMINAL:
            runner.cancel()
            await asyncio.gather(runner, return_exceptions=True)
        return task.result()

    def counts(self) -> dict[str, int]:
        """Tasks by state."""
        out: dict[str, int] = {}
        for task in self.tasks.values():
            out[task.state.value] = out.get(task.state.value, 0) + 1
        return out

    async def _run(self, task: TaskRecord) -> None:
        task.move(TaskState.RUNNING)
        deadline = task.submitted + task.spec.timeout_ms / 1000
        courier = Courier(self.link, self.owner, trace_id=task.trace_id)
        tried: set[str] = set()
        decision: Decision | None = None
        try:
            while True:
                decision = await self._attempt(task, courier, deadline, tried, decision)
                if decision is None:
                    return
                if decision.action is not Action.RETRY:
                    task.move(FINAL_STATE[decision.action])
                    if decision.action is Action.ABORT:
                        await self.cancel_trace(task.trace_id, "task aborted on a fatal error")
                    return
                if clock.now() + decision.delay_s >= deadline:
                    self._end_on_deadline(task)
                    return
                await asyncio.sleep(decision.delay_s)
        except asyncio.CancelledError:
            if task.state not in TERMINAL:
                task.error = TaskCancelled("task cancelled").to_info()
                task.move(TaskState.CANCELLED)
                await self.cancel_trace(task.trace_id, "task cancelled")
            raise
        finally:
            task.context = task.first = None

    async def _attempt(self, task: TaskRecord, courier: Courier, deadline: float,
                       tried: set[str], last: Decision | None) -> Decision | None:
        left_ms = int((deadline - clock.now()) * 1000)
        if left_ms <= 0:
            self._end_on_deadline(task)
            return None
        try:
            agent_id = await self._choose(task, tried, last)
        except ReachError as exc:
            task.attempts.append(Attempt("", clock.now()))
            return self._decide(task, exc, alternatives=0)
        if task.assigned is not None:
            raise InvalidTransition(f"task {task.task_id} is already assigned to {task.assigned}")
        task.assigned = agent_id
        task.attempts.append(Attempt(agent_id, clock.now()))
        span = self._attempt_span(task, agent_id)
        try:
            # Every attempt carries the task's ID as its request ID: an effectively-once handler
            # that already answered it returns its recorded reply instead of running again.
            request = courier.build_request(agent_id, task.spec.payload, task.spec.schema,
                                            timeout_ms=left_ms, msg_id=task.task_id)
            if span is None:
                reply = await courier.call(request)
            else:
                with trace.use_span(span, record_exception=False,
                                    set_status_on_exception=False):
                    reply = await courier.call(request)
        except ReachError as exc:
            tried.add(agent_id)
            alternatives = await self._alternatives(task, tried)
            decision = self._decide(task, exc, alternatives)
            if span is not None:
                _decided(span, exc, decision)
            return decision
        finally:
            task.assigned = None
            if span is not None:
                span.end()
        task.end_attempt(AttemptOutcome.OK)
        task.value, task.schema = dict(reply.payload), reply.payload_schema or ""
        task.move(TaskState.COMPLETED)
        return None

    def _attempt_span(self, task: TaskRecord, agent_id: str) -> Span | None:
        """The span of a task's attempt about to start (None when the owner does not trace):
        the child of where the task was submitted, linked to the task's first attempt."""
        tracer = TRACING.tracer
        if tracer is None:
            return None
        first = task.first.get_span_context() if task.first is not None else None
        span = start(tracer, f"{SpanName.TASK_ATTEMPT} {task.spec.schema or task.spec.target}",
                     SpanKind.INTERNAL, context=task.context or otel_context.Context(),
                     trace_id=task.trace_id, links=[SpanLink(first)] if first is not None else ())
        if task.first is None:
            task.first = span
        if span.is_recording():
            span.set_attributes({Attr.TASK_ID: task.task_id, Attr.AGENT_ID: agent_id,
                                 Attr.ATTEMPT: len(task.attempts), Attr.SUPERVISOR: self.owner,
                                 Attr.RECEIVER: task.spec.target})
            if task.spec.by_capability:
                span.set_attribute(Attr.CAPABILITY, task.spec.target)
        return span

    async def _choose(self, task: TaskRecord, tried: set[str], last: Decision | None) -> str:
        """The agent of the next attempt: the target; or for a task by capability, the
        least-loaded holder at the best priority with a live holder, one not tried yet when the
        last decision failed over (the one tried last when it did not)."""
        if not task.spec.by_capability:
            return task.spec.target
        previous = task.attempts[-1].agent_id if task.attempts else ""
        holders = await self._holders(task)
        if (last is not None and not last.failover and previous
                and any(h.agent_id == previous for h in holders)):
            return previous  # the policy said: retry on the same agent
        fresh = [h for h in holders if h.agent_id not in tried] or holders
        if fresh is holders:
            tried.clear()  # every holder failed once: start another round
        (best,) = self.link.pick(task.spec.target, fresh)
        return best.agent_id

    async def _holders(self, task: TaskRecord) -> list[AgentRecord]:
        """The online holders of a task's capability, best first.

        Raises:
            NoCapableAgent: nobody online holds it.
        """
        return list(await self.link.directory.holders(task.spec.target, None, limit=None))

    async def _alternatives(self, task: TaskRecord, tried: set[str]) -> int:
        if not task.spec.by_capability:
            return 0
        try:
            holders = await self._holders(task)
        except ReachError:
            return 0
        return sum(1 for h in holders if h.agent_id not in tried)

    def _decide(self, task: TaskRecord, exc: ReachError, alternatives: int) -> Decision:
        failures = sum(1 for a in task.attempts if a.outcome is AttemptOutcome.ERROR)
        decision = self.policy.decide(exc.severity, attempt=failures,
                                      retry_limit=task.spec.retry_limit,
                                      alternatives=alternatives, rng=self.rng)
        attempt = task.end_attempt(AttemptOutcome.ERROR, code=exc.code,
                                   severity=exc.severity.value, reason=exc.message,
                                   decision=decision.action.value, why=decision.reason)
        if self.audit is not None:
            self.audit({"caller": self.owner, "callee": attempt.agent_id,
                        "capability": task.spec.target, "msg_type": "task",
                        "outcome": f"{decision.action.value}: {exc.code} ({decision.reason})",
                        "trace_id": task.trace_id})
        if decision.action is not Action.RETRY:
            task.error = exc.to_info()
            if decision.action is Action.DEGRADE:
                task.value, task.partial = exc.partial, True
        return decision

    def _end_on_deadline(self, task: TaskRecord) -> None:
        error = RequestTimeout(f"task {task.task_id} ran out of time after "
                               f"{len(task.attempts)} attempts",
                               details={"timeout_ms": task.spec.timeout_ms})
        task.error = error.to_info()
        task.move(TaskState.FAILED)


def _decided(span: Span, error: ReachError, decision: Decision) -> None:
    """Marks a failed attempt's span with its error and what was decided on it (an event:
    ``retry``, ``failover``, ``degrade``, ``abort`` or ``fail``)."""
    failed(span, error)
    if span.is_recording():
        span.set_attributes({Attr.DECISION: decision.action.value, Attr.REASON: decision.reason})
    name = "failover" if decision.action is Action.RETRY and decision.failover \
        else decision.action.value
    event(span, name, {Attr.DECISION: decision.action.value, Attr.REASON: decision.reason,
                       Attr.ERROR_CODE: error.code})
