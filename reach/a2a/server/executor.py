"""The gateway's AgentExecutor: an A2A task is a reach task, owned by the gateway replica.

Each replica owns the tasks it runs, with the state machine and task policy of reach's
supervisors (:class:`reach._runtime.tasks.TaskRunner`, one per calling principal, so that every
request is sent as that principal): a retryable error is retried (failing over to another holder
of the capability when the message went to the router), a degradable one ends the task with the
partial result, a fatal one aborts it and cancels every handler under its trace. The A2A task's
ID is the reach task's ID, which is the trace ID of every message it causes.

A blocking ``SendMessage`` to a handler that does not stream (the common call) is run by
:meth:`ReachExecutor.run_blocking` without the SDK's per-task queues and their consumers: its
events go straight to the SDK's :class:`~a2a.server.tasks.TaskManager`, which folds them into
the stored task (one store write when the task ends within :data:`ANNOUNCE_AFTER_S`). The SDK's
machinery costs several milliseconds of CPU a call; this path is what lets a replica carry
hundreds of calls a second on a small machine. Every other call (streams, ``returnImmediately``,
push configs) takes the SDK's path.

A streaming handler is called as a stream (each chunk an artifact update); a stream is retried
only before its first chunk (a retry after would repeat what the caller already has).

How reach's task states map onto A2A's:

=============  =====================================================================
reach          A2A
=============  =====================================================================
running        ``TASK_STATE_WORKING``
completed      ``TASK_STATE_COMPLETED``, the reply as the artifact
degraded       ``TASK_STATE_COMPLETED``, the partial result (if any) as the artifact,
               metadata ``reach.degraded = true`` and ``reach.error``, and a status
               message saying what was lost: the work did finish, with less (A2A has no
               partial state, and FAILED would hide a result the caller can use)
failed         ``TASK_STATE_FAILED``, a status message with the error (text and data)
               and metadata ``reach.error`` (code, severity, suggestion)
cancelled      ``TASK_STATE_CANCELED`` (also a handler cancelled under the trace)
=============  =====================================================================

A reply (or a partial result, or a chunk) that A2A cannot carry, being no JSON (a NaN, an
Infinity), fails the task with the CodecError that says where (``reach.error.details.path``):
what the caller gets is a task it can read, never one that cannot be shown.

Every task's metadata has ``reach.trace_id`` (its ID), ``reach.target`` (the agent ID, or
the capability), ``reach.replica`` (the replica running it), and once ended ``reach.attempts``.
A task left unfinished by a replica that died is ended FAILED (retryable) by the replica that
next reads it (see :class:`reach.a2a.server.handler.ReachRequestHandler`).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import Event, EventQueue
from a2a.server.tasks import TaskManager
from a2a.types.a2a_pb2 import Task, TaskState, TaskStatus, TaskStatusUpdateEvent
from a2a.utils.errors import InternalError

from policies.tasks import Action, SeverityPolicy, TaskPolicy
from policies.tasks import TaskState as ReachState
from reach import clock
from reach._runtime.tasks import TaskRunner
from reach.a2a.server._proto import to_python
from reach.a2a.server.errors import error_doc, error_message
from reach.a2a.server.events import TaskEvents, timestamp
from reach.a2a.server.parts import Call, reply_parts
from reach.a2a.tracing import current_trace_id
from reach.client import Client, Link
from reach.errors import CodecError, ErrorInfo, ReachError, Severity, TaskCancelled
from reach.protocol import new_id
from reach.records import TaskResult
from reach.specs import TaskSpec
from reach.web.options import GatewayOptions

log = logging.getLogger("reach.a2a.server.executor")

#: The call context's state key of a SendMessage's :class:`Plan`.
PLAN_KEY = "reach.plan"
#: How long a blocking SendMessage may run before its task is written as WORKING (a task that
#: ends sooner is written once, finished; a longer one can be got, listed and cancelled).
ANNOUNCE_AFTER_S = 1.0
#: The JSON-RPC method that streams its events.
STREAMING_METHOD = "SendStreamingMessage"


@dataclass(frozen=True, slots=True)
class Plan:
    """What a SendMessage asks, resolved before the SDK makes a task of it.

    Attributes:
        principal: Who calls (``a2a:<name>``): the sender of every request of the task.
        target: The agent's ID, or the capability when ``by_capability``.
        by_capability: Sent to the least-loaded online holder of ``target``.
        call: The handler, payload and schema.
    """

    principal: str
    target: str
    by_capability: bool
    call: Call


@dataclass
class _Job:
    events: TaskEvents
    worker: asyncio.Task[None]
    runner: TaskRunner | None  # None for a stream
    stopped: bool = False
    manager: TaskManager | None = None  # a blocking call run without the SDK's queues


class _ToManager:
    """A task's events straight into its TaskManager (the SDK's fold into the stored task)."""

    def __init__(self, manager: TaskManager) -> None:
        self._manager = manager

    async def enqueue_event(self, event: Event) -> None:
        await self._manager.process(event)


class ReachExecutor(AgentExecutor):
    """Runs A2A tasks as reach tasks (see the module's docstring).

    Args:
        link: This replica's link to reach.
        options: The gateway's settings (task budget and retry limit).
        cancel_trace: Cancels every handler of a trace, cluster-wide.
        policy: Decides on errors (reach's default: by severity).
        rng: Random generator for backoff jitter.
        audit: Records each task decision in the audit log, if given.
        announce_after_s: See :data:`ANNOUNCE_AFTER_S`.
        replica: This replica's name (its reply inbox), written into every task's metadata
            (``reach.replica``): a task whose replica died is known as such by the others.
    """

    def __init__(self, link: Link, options: GatewayOptions,
                 cancel_trace: Callable[[str, str], Awaitable[None]], *,
                 policy: TaskPolicy | None = None, rng: random.Random | None = None,
                 audit: Callable[[dict[str, Any]], None] | None = None,
                 announce_after_s: float = ANNOUNCE_AFTER_S, replica: str = "") -> None:
        self.replica = replica
        self._link = link
        self._options = options
        self._cancel_trace = cancel_trace
        self._policy = policy or SeverityPolicy()
        self._rng = rng or random.Random()
        self._audit = audit
        self._announce_after_s = announce_after_s
        self._runners: dict[str, TaskRunner] = {}
        # Invariant: a job per task whose execute() is running here.
        self._jobs: dict[str, _Job] = {}
        # The trace of each task running here: the A2A caller's (its traceparent), or its own
        # ID (while the task runs).
        self._traces: dict[str, str] = {}

    def runs(self, task_id: str) -> bool:
        """Whether the task runs on this replica."""
        return task_id in self._jobs

    def runs_blocking(self, task_id: str) -> bool:
        """Whether the task runs on this replica by :meth:`run_blocking` (not in the SDK's
        registry of active tasks)."""
        job = self._jobs.get(task_id)
        return job is not None and job.manager is not None

    async def run_blocking(self, plan: Plan, request: RequestContext,
                           manager: TaskManager) -> Task:
        """Runs a blocking, non-streamed SendMessage's task to its end; returns the task.

        The task is written once, finished, when it ends within the announcement delay;
        otherwise WORKING first (then it can be got, listed, subscribed to and cancelled), then
        its reply and final status. Cancelled (the caller went away): the task is cancelled.
        """
        task_id, context_id = str(request.task_id), str(request.context_id)
        self._traces[task_id] = current_trace_id(task_id)
        events = TaskEvents(_ToManager(manager), task_id, context_id, request.message,
                            {"reach": self._base(plan, task_id)})
        runner = self._runner(plan.principal)
        worker = asyncio.ensure_future(self._work(plan, task_id, events, runner))
        self._jobs[task_id] = _Job(events, worker, runner, manager=manager)
        try:
            done, _ = await asyncio.wait({worker}, timeout=self._announce_after_s)
            if not done:
                await events.announce()
            await asyncio.wait({worker})
        except asyncio.CancelledError:
            await self._stop(task_id, "the A2A caller went away")
            raise
        finally:
            self._jobs.pop(task_id, None)
            self._traces.pop(task_id, None)
        task = await manager.get_task()
        if task is None:
            raise InternalError(message=f"task {task_id} ended without being written")
        return task

    async def cancel_blocking(self, task_id: str) -> Task | None:
        """Cancels a task :meth:`run_blocking` runs here and writes it CANCELED; returns it
        (None: it is not running here)."""
        job = self._jobs.get(task_id)
        if job is None or job.manager is None:
            return None
        await self._stop(task_id, "cancelled by the A2A caller")
        current = await job.manager.get_task()
        metadata = to_python(current.metadata) if current is not None else {}
        await job.manager.process(TaskStatusUpdateEvent(
            task_id=task_id, context_id=job.events.context_id,
            status=TaskStatus(state=TaskState.TASK_STATE_CANCELED, timestamp=timestamp()),
            metadata={"reach": {**metadata.get("reach", {}), "cancelled": True}}))
        return await job.manager.get_task()

    async def cancel_trace(self, trace_id: str, reason: str) -> None:
        """Cancels every handler under a task's trace (a task of another replica: its
        metadata's ``trace_id``)."""
        await self._cancel_trace(trace_id, reason)

    def _runner(self, principal: str) -> TaskRunner:
        runner = self._runners.get(principal)
        if runner is None:
            runner = self._runners[principal] = TaskRunner(
                self._link, principal, self._policy, self._rng, self._cancel_trace,
                audit=self._audit)
        return runner

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Runs the task the SendMessage's :class:`Plan` describes, writing its events."""
        plan: Plan = context.call_context.state[PLAN_KEY]
        task_id, context_id = str(context.task_id), str(context.context_id)
        self._traces[task_id] = current_trace_id(task_id)
        events = TaskEvents(event_queue, task_id, context_id, context.message,
                            {"reach": self._base(plan, task_id)})
        runner = None if plan.call.handler.streaming else self._runner(plan.principal)
        worker = asyncio.ensure_future(self._work(plan, task_id, events, runner))
        self._jobs[task_id] = _Job(events, worker, runner)
        live = (context.call_context.state.get("method") == STREAMING_METHOD
                or (context.configuration is not None
                    and context.configuration.return_immediately))
        try:
            if live:
                await events.announce()
            else:
                done, _ = await asyncio.wait({worker}, timeout=self._announce_after_s)
                if not done:
                    await events.announce()
            await asyncio.wait({worker})  # its end, however it ends (cancelled by cancel())
        except asyncio.CancelledError:
            await self._stop(task_id, "the A2A task was cancelled")
            raise
        finally:
            self._jobs.pop(task_id, None)
            self._traces.pop(task_id, None)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Cancels the task and every handler under its trace; writes CANCELED."""
        task_id = str(context.task_id)
        await self._stop(task_id, "cancelled by the A2A caller")
        task = context.current_task
        metadata = to_python(task.metadata) if task is not None else {}
        await event_queue.enqueue_event(TaskStatusUpdateEvent(
            task_id=task_id, context_id=str(context.context_id),
            status=TaskStatus(state=TaskState.TASK_STATE_CANCELED, timestamp=timestamp()),
            metadata={"reach": {**metadata.get("reach", {}), "cancelled": True}}))

    async def _stop(self, task_id: str, reason: str) -> None:
        job = self._jobs.get(task_id)
        if job is None or job.stopped:
            return
        job.stopped = True
        await job.events.close()
        if job.runner is not None:
            await job.runner.cancel(task_id)  # cancels the trace too
            return
        job.worker.cancel()
        await asyncio.gather(job.worker, return_exceptions=True)
        await self._cancel_trace(self._traces.get(task_id, task_id), reason)

    def _base(self, plan: Plan, task_id: str) -> dict[str, Any]:
        return {"trace_id": self._traces.get(task_id, task_id), "target": plan.target,
                "by_capability": plan.by_capability, "schema": plan.call.schema,
                "replica": self.replica}

    async def _work(self, plan: Plan, task_id: str, events: TaskEvents,
                    runner: TaskRunner | None) -> None:
        try:
            if runner is None:
                await self._stream(plan, task_id, events)
                return
            runner.submit(TaskSpec(
                plan.target, plan.call.payload, plan.call.schema, plan.by_capability,
                self._options.timeout_ms, self._options.retry_limit), task_id)
            await self._finish(await runner.wait(task_id), plan, events)
        except Exception:  # never leave the task hanging: fail it, and say why in the log
            error_id = new_id()
            log.exception("the A2A task %s failed in the gateway (error ID %s)", task_id,
                          error_id)
            await self._failed(ErrorInfo(
                code="gateway_error", severity=Severity.FATAL, details={"error_id": error_id},
                reason=f"the gateway failed this task (error ID {error_id}: the gateway's "
                       "operator finds what happened in its log under that ID)"),
                events, self._base(plan, task_id))

    async def _finish(self, result: TaskResult, plan: Plan, events: TaskEvents) -> None:
        reach = {**self._base(plan, result.task_id), "attempts": len(result.attempts)}
        if result.state is ReachState.COMPLETED and result.value is not None:
            try:
                parts = reply_parts(result.value, plan.call.handler.returns)
            except CodecError as exc:  # a reply A2A cannot carry: the task fails, saying so
                await self._failed(exc.to_info(), events, reach)
                return
            await events.chunk(parts, last=True)
            await events.finish(TaskState.TASK_STATE_COMPLETED, metadata={"reach": reach})
        elif result.state is ReachState.DEGRADED:
            await self._degraded(result.value, result.error, plan, events, reach)
        elif result.state is ReachState.CANCELLED or (
                result.error is not None and result.error.code == TaskCancelled.code):
            await events.finish(TaskState.TASK_STATE_CANCELED, metadata={"reach": reach})
        else:
            await self._failed(result.error, events, reach)

    async def _degraded(self, partial: Any, error: ErrorInfo | None, plan: Plan,
                        events: TaskEvents, reach: dict[str, Any]) -> None:
        if partial is not None:
            try:
                parts = reply_parts(partial, plan.call.handler.returns)
            except CodecError as exc:
                await self._failed(exc.to_info(), events, reach)
                return
            await events.chunk(parts, last=True)
        reach["degraded"] = True
        message = None
        if error is not None:
            reach["error"] = error_doc(error)
            message = error_message(error, events.task_id, events.context_id,
                                    lead="Completed with a partial result:")
        await events.finish(TaskState.TASK_STATE_COMPLETED, message=message,
                            metadata={"reach": reach})

    @staticmethod
    async def _failed(error: ErrorInfo | None, events: TaskEvents,
                      reach: dict[str, Any]) -> None:
        message = None
        if error is not None:
            reach["error"] = error_doc(error)
            message = error_message(error, events.task_id, events.context_id)
        await events.finish(TaskState.TASK_STATE_FAILED, message=message,
                            metadata={"reach": reach})

    async def _stream(self, plan: Plan, task_id: str, events: TaskEvents) -> None:
        """Calls a streaming handler; each chunk an artifact update (the last one marked)."""
        client = Client(self._link, plan.principal, trace_id=self._traces.get(task_id, task_id))
        deadline = clock.monotonic() + self._options.timeout_ms / 1000
        tried: set[str] = set()
        failures = 0
        while True:
            agent = ""
            # Invariant: held is the last chunk received and not yet written (it is written
            # marked as the last one once the stream ends, however it ends).
            held: list[Any] | None = None
            try:
                agent = await self._pick(client, plan, tried)
                left_ms = max(int((deadline - clock.monotonic()) * 1000), 1)
                async for reply in client.stream(agent, plan.call.payload, plan.call.schema,
                                                 timeout_ms=left_ms):
                    env = reply.envelope
                    parts = reply_parts(env.payload, env.payload_schema)
                    if held is not None:
                        await events.chunk(held, last=False)
                    held = parts
                if held is not None:
                    await events.chunk(held, last=True)
                await events.finish(TaskState.TASK_STATE_COMPLETED, metadata={"reach": {
                    **self._base(plan, task_id), "attempts": failures + 1}})
                return
            except ReachError as exc:
                tried.add(agent)
                decision = self._policy.decide(
                    exc.severity, attempt=failures, retry_limit=self._options.retry_limit,
                    alternatives=1 if plan.by_capability else 0, rng=self._rng)
                failures += 1
                retry = (decision.action is Action.RETRY and held is None
                         and clock.monotonic() + decision.delay_s < deadline)
                if retry:  # nothing was received yet: the caller loses nothing
                    await asyncio.sleep(decision.delay_s)
                    continue
                if held is not None:  # the last chunk, unless a partial result follows it
                    partial_follows = (decision.action is Action.DEGRADE
                                       and exc.partial is not None)
                    await events.chunk(held, last=not partial_follows)
                reach = {**self._base(plan, task_id), "attempts": failures}
                if decision.action is Action.DEGRADE:
                    await self._degraded(exc.partial, exc.to_info(), plan, events, reach)
                    return
                if decision.action is Action.ABORT:
                    await self._cancel_trace(self._traces.get(task_id, task_id),
                                             "task aborted on a fatal error")
                if exc.code == TaskCancelled.code:
                    await events.finish(TaskState.TASK_STATE_CANCELED, metadata={"reach": reach})
                    return
                await self._failed(exc.to_info(), events, reach)
                return

    async def _pick(self, client: Client, plan: Plan, tried: set[str]) -> str:
        if not plan.by_capability:
            return plan.target
        holders = await client.discover(plan.target)
        fresh = [h for h in holders if h.agent_id not in tried] or holders
        (best,) = self._link.pick(plan.target, fresh)
        return best.agent_id


__all__ = ["ANNOUNCE_AFTER_S", "PLAN_KEY", "Plan", "ReachExecutor"]
