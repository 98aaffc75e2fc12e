"""The SDK's request handler, fitted to reach: who calls, what a message asks, and task IDs.

- :class:`ContextBuilder` turns a Starlette request into the SDK's call context: the caller is
  the principal the bearer token proved (tasks are scoped to it: one caller never sees
  another's), and the agent is the one of the endpoint's path (none for the router).
- :class:`ReachRequestHandler` is the SDK's ``DefaultRequestHandler`` with one step added
  before a message becomes a task: the :class:`Planner` resolves the agent (or the capability's
  holders) and reads the message (:mod:`reach.a2a.server.parts`). A message that cannot be sent is
  refused with a JSON-RPC error and leaves no task behind. Tasks live in the store the replicas
  share; for a task running on another replica, CancelTask also cancels its handlers
  cluster-wide (by its trace; its replica then ends it as CANCELED), and SubscribeToTask follows
  it through the store (the task again each time it changes) instead of waiting on events that
  only its own replica sees.
- :class:`FreshFirstStore` spares the task store the reads the SDK makes of a task it is about
  to create: an ID this replica just made cannot be stored yet.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any

from a2a.auth.user import User
from a2a.server.agent_execution import SimpleRequestContextBuilder
from a2a.server.agent_execution.active_task import TERMINAL_TASK_STATES
from a2a.server.context import ServerCallContext
from a2a.server.events import Event
from a2a.server.id_generator import IDGenerator, IDGeneratorContext
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes.common import DefaultServerCallContextBuilder
from a2a.server.tasks import TaskManager, TaskStore
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    Part,
    Role,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a.utils.errors import (
    InvalidParamsError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from a2a.utils.task import apply_history_length, validate_history_length
from starlette.requests import Request

from reach import clock
from reach.a2a.server._proto import to_python
from reach.a2a.server.cards import CAPABILITY_KEY
from reach.a2a.server.catalog import Catalog
from reach.a2a.server.errors import to_a2a
from reach.a2a.server.events import timestamp
from reach.a2a.server.executor import PLAN_KEY, Plan, ReachExecutor
from reach.a2a.server.parts import read_message
from reach.client import Link
from reach.errors import AgentNotFound, ReachError
from reach.protocol import new_id

#: The ASGI scope key of the principal a request's token proved.
PRINCIPAL_SCOPE_KEY = "reach.principal"
#: The call context's state key of the endpoint's agent ID (None: the router).
AGENT_KEY = "reach.agent"
#: How often a subscription to a task of another replica reads it from the shared store.
FOLLOW_EVERY_S = 0.5
#: How long an answer about another replica's liveness is kept.
LIVENESS_TTL_S = 5.0
#: Fresh task IDs a replica remembers (a request refused after its ID was made leaves one).
MAX_FRESH = 100_000


class Caller(User):
    """The principal a call enters reach as."""

    def __init__(self, principal: str) -> None:
        self._principal = principal

    @property
    def is_authenticated(self) -> bool:
        """Always: an unauthenticated request never reaches the handler."""
        return True

    @property
    def user_name(self) -> str:
        """The principal (``a2a:<name>``): the owner of the tasks it starts."""
        return self._principal


class ContextBuilder(DefaultServerCallContextBuilder):
    """The SDK's call context, with the caller and the endpoint's agent."""

    def build(self, request: Request) -> ServerCallContext:
        """See :class:`a2a.server.routes.common.ServerCallContextBuilder`."""
        context = super().build(request)
        context.user = Caller(request.scope[PRINCIPAL_SCOPE_KEY])
        context.state[AGENT_KEY] = request.path_params.get("agent_id")
        return context


class Planner:
    """Resolves what a SendMessage asks (see :class:`reach.a2a.server.executor.Plan`).

    Args:
        catalog: The agents and their handlers.
        link: This replica's link (its directory finds a capability's holders).
    """

    def __init__(self, catalog: Catalog, link: Link) -> None:
        self._catalog = catalog
        self._link = link

    async def plan(self, params: SendMessageRequest, context: ServerCallContext) -> Plan:
        """The plan of a message to the endpoint's agent, or by capability to the router's.

        Raises:
            UnsupportedOperationError: the message continues a task (reach tasks take one).
            InvalidParamsError: a role that is no A2A role, no such agent, no capability named
                or no holder of it, or a payload that cannot be sent (see
                :func:`reach.a2a.server.parts.read_message`).
            ContentTypeNotSupportedError: parts of a kind the agent does not read.
        """
        message = params.message
        if message.role not in Role.values():  # protobuf keeps an unknown number as it is
            raise InvalidParamsError(
                f"message.role {message.role} is not an A2A role: ROLE_USER or ROLE_AGENT",
                data={"errors": [{"field": "message.role", "message": "Unknown role."}]})
        if message.task_id:
            raise UnsupportedOperationError(
                "a reach task takes one message and ends: send a new message without a taskId "
                "(the same contextId keeps the conversation together)")
        principal = context.user.user_name
        agent_id = context.state.get(AGENT_KEY)
        try:
            if agent_id is not None:
                view = await self._catalog.view(agent_id)
                if view is None:
                    raise AgentNotFound(f"no agent {agent_id!r} is registered",
                                        suggestion="see the router's card for the agents",
                                        details={"agent_id": agent_id})
                return Plan(principal, agent_id, False,
                            read_message(message, view.handlers, agent_id))
            capability = _capability(message, params)
            holders = await self._link.directory.holders(capability)
            view = await self._catalog.view(holders[0].agent_id)
            handlers = view.handlers if view is not None else ()
            return Plan(principal, capability, True, read_message(message, handlers, capability))
        except ReachError as exc:
            raise to_a2a(exc) from exc


def _check_required(params: SendMessageRequest) -> None:
    """The SDK's check of a SendMessage's required fields (``validate_proto_required_fields``,
    same errors), for the fields such a request has: the SDK's walks every field of the
    payload's data part too, which costs more than the rest of a call."""
    message = params.message
    missing = ([("message", "Field is required.")] if not params.HasField("message") else [
        *([("message.message_id", "Field is required.")] if not message.message_id else []),
        *([("message.role", "Field is required.")] if not message.role else []),
        *([("message.parts", "Field must contain at least one element.")]
          if not message.parts else [])])
    if missing:
        raise InvalidParamsError(message="Validation failed", data={
            "errors": [{"field": field, "message": why} for field, why in missing]})


def _capability(message: Message, params: SendMessageRequest) -> str:
    for holder in (message, params):
        if holder.HasField("metadata"):
            named = to_python(holder.metadata).get(CAPABILITY_KEY)
            if isinstance(named, str) and named:
                return named
    raise InvalidParamsError(
        f'name the capability in the message metadata, {{"{CAPABILITY_KEY}": "<skill id>"}}: '
        "the router sends the message to an agent that holds it (its card lists them as "
        "skills), or call an agent at its own endpoint")


class ReachRequestHandler(DefaultRequestHandler):
    """The SDK's request handler with reach's planning step (see the module's docstring).

    Args:
        executor: Runs the tasks.
        task_store: Where tasks are kept.
        card: The card whose capabilities the SDK checks (streaming on).
        planner: Resolves messages.
        follow_s: Longest a subscription follows a task of another replica.
    """

    def __init__(self, executor: ReachExecutor, task_store: FreshFirstStore, card: Any,
                 planner: Planner, *, follow_s: float,
                 alive: Callable[[str], Awaitable[bool]] | None = None) -> None:
        super().__init__(executor, task_store, card,
                         request_context_builder=SimpleRequestContextBuilder(
                             task_id_generator=_FreshIds(task_store)))
        self._executor = executor
        self._store = task_store
        self._planner = planner
        self._follow_s = follow_s
        self._alive = alive
        # replica name -> (alive, until when that answer holds)
        self._liveness: dict[str, tuple[bool, float]] = {}

    async def on_message_send(self, params: SendMessageRequest,
                              context: ServerCallContext) -> Message | Task:
        """Plans the message, then sends it: a blocking call to a handler that does not stream
        by :meth:`ReachExecutor.run_blocking` (no SDK queues), anything else by the SDK's
        handler."""
        plan = context.state[PLAN_KEY] = await self._planner.plan(params, context)
        config = params.configuration
        if (plan.call.handler.streaming or config.return_immediately
                or config.HasField("task_push_notification_config")):
            result: Message | Task = await super().on_message_send(params, context)
            return result
        validate_history_length(config)
        _check_required(params)
        request = await self._request_context_builder.build(
            params=params, task_id=None, context_id=params.message.context_id or None,
            task=None, context=context)
        manager = TaskManager(self._store, context, request.task_id, request.context_id,
                              request.message)
        task = await self._executor.run_blocking(plan, request, manager)
        return apply_history_length(task, config)

    async def on_message_send_stream(self, params: SendMessageRequest,
                                     context: ServerCallContext) -> AsyncGenerator[Event, None]:
        """Plans the message, then streams its task's events (see the SDK's handler)."""
        context.state[PLAN_KEY] = await self._planner.plan(params, context)
        inner = super().on_message_send_stream(params, context)
        try:
            async for event in inner:
                yield event
        finally:
            await inner.aclose()

    async def on_subscribe_to_task(self, params: SubscribeToTaskRequest,
                                   context: ServerCallContext) -> AsyncGenerator[Event, None]:
        """Follows a task: its events as they happen where it runs here; where it runs on
        another replica, the task itself again each time the shared store shows it changed
        (polled every :data:`FOLLOW_EVERY_S`), until it ends or its budget is spent."""
        if self._executor.runs(params.id) and not self._executor.runs_blocking(params.id):
            inner = super().on_subscribe_to_task(params, context)
            try:
                async for event in inner:
                    yield event
            finally:
                await inner.aclose()
            return
        async for task in self._follow(params.id, context):
            yield task

    async def _follow(self, task_id: str, context: ServerCallContext) -> AsyncGenerator[Task]:
        task: Task | None = await self._store.get(task_id, context)
        if task is None:
            raise TaskNotFoundError
        if task.status.state in TERMINAL_TASK_STATES:
            raise UnsupportedOperationError(
                f"task {task_id} has ended ({TaskState.Name(task.status.state)}): get it instead")
        yield task
        deadline = clock.monotonic() + self._follow_s
        while clock.monotonic() < deadline:
            await asyncio.sleep(FOLLOW_EVERY_S)
            latest: Task | None = await self._store.get(task_id, context)
            if latest is None:
                return
            latest = await self._orphan_ended(latest, context) or latest
            if latest != task:
                task = latest
                yield task
            if task.status.state in TERMINAL_TASK_STATES:
                return

    async def on_get_task(self, params: GetTaskRequest,
                          context: ServerCallContext) -> Task | None:
        """The task (see the SDK's handler); one left unfinished by a replica that died is
        ended FAILED first (retryable: send the message again)."""
        task: Task | None = await super().on_get_task(params, context)
        if task is None:
            return None
        ended = await self._orphan_ended(task, context)
        return task if ended is None else apply_history_length(ended, params)

    async def _orphan_ended(self, task: Task, context: ServerCallContext) -> Task | None:
        """Ends ``task`` FAILED if the replica running it died; returns it so (else None)."""
        if task.status.state in TERMINAL_TASK_STATES or self._executor.runs(task.id):
            return None
        reach = to_python(task.metadata).get("reach", {}) if task.HasField("metadata") else {}
        replica = reach.get("replica")
        if (not isinstance(replica, str) or not replica or replica == self._executor.replica
                or self._alive is None or await self._replica_alive(replica)):
            return None
        why = f"the gateway replica running this task ({replica}) died before it ended"
        manager = TaskManager(self._store, context, task.id, task.context_id, None)
        await manager.get_task()
        await manager.process(TaskStatusUpdateEvent(
            task_id=task.id, context_id=task.context_id,
            status=TaskStatus(state=TaskState.TASK_STATE_FAILED, timestamp=timestamp(),
                              message=Message(message_id=new_id(), role=Role.ROLE_AGENT,
                                              parts=[Part(text=why)])),
            metadata={"reach": {**reach, "error": {
                "code": "agent_unavailable", "severity": "retryable", "message": why,
                "suggestion": "send the message again"}}}))
        return await manager.get_task()

    async def _replica_alive(self, replica: str) -> bool:
        known = self._liveness.get(replica)
        now = clock.monotonic()
        if known is not None and known[1] > now:
            return known[0]
        assert self._alive is not None
        alive = await self._alive(replica)
        self._liveness[replica] = (alive, now + LIVENESS_TTL_S)
        return alive

    async def on_cancel_task(self, params: CancelTaskRequest,
                             context: ServerCallContext) -> Task | None:
        """Cancels a task; one running on another replica is marked CANCELED in the store and
        its handlers are cancelled by its trace (its replica then ends it as CANCELED)."""
        if self._executor.runs_blocking(params.id):
            stored: Task | None = await self._store.get(params.id, context)
            if stored is None:  # not written yet (it ends within a second, or is not yours)
                raise TaskNotFoundError
            if stored.status.state in TERMINAL_TASK_STATES:
                raise TaskNotCancelableError
            return await self._executor.cancel_blocking(params.id)
        task: Task | None = await super().on_cancel_task(params, context)
        if not self._executor.runs(params.id):
            reach_meta = to_python(task.metadata).get("reach", {}) if task is not None else {}
            trace_id = reach_meta.get("trace_id") if isinstance(reach_meta, dict) else None
            await self._executor.cancel_trace(trace_id if isinstance(trace_id, str)
                                              else params.id, "cancelled by the A2A caller")
        return task


class FreshFirstStore(TaskStore):
    """A task store that answers "not stored" for the IDs this replica just made (and has not
    saved yet) without asking the store it wraps; everything else goes to that store.

    Args:
        inner: The shared store.
    """

    def __init__(self, inner: TaskStore) -> None:
        self.inner = inner
        # Insertion-ordered: the oldest are forgotten first past MAX_FRESH.
        self._fresh: dict[str, None] = {}

    def made(self, task_id: str) -> None:
        """Notes an ID this replica made for a new task."""
        self._fresh[task_id] = None
        if len(self._fresh) > MAX_FRESH:
            for old in list(self._fresh)[:MAX_FRESH // 10]:
                del self._fresh[old]

    async def save(self, task: Task, context: ServerCallContext) -> None:
        """See :class:`a2a.server.tasks.TaskStore`."""
        await self.inner.save(task, context)
        self._fresh.pop(task.id, None)

    async def get(self, task_id: str, context: ServerCallContext) -> Task | None:
        """See :class:`a2a.server.tasks.TaskStore`."""
        if task_id in self._fresh:
            return None
        task: Task | None = await self.inner.get(task_id, context)
        return task

    async def list(self, params: ListTasksRequest,
                   context: ServerCallContext) -> ListTasksResponse:
        """See :class:`a2a.server.tasks.TaskStore`."""
        page: ListTasksResponse = await self.inner.list(params, context)
        return page

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        """See :class:`a2a.server.tasks.TaskStore`."""
        self._fresh.pop(task_id, None)
        await self.inner.delete(task_id, context)


class _FreshIds(IDGenerator):
    """Task IDs in reach's form (a task's ID is its trace ID), noted as fresh."""

    def __init__(self, store: FreshFirstStore) -> None:
        self._store = store

    def generate(self, context: IDGeneratorContext) -> str:
        task_id = new_id()
        self._store.made(task_id)
        return task_id


__all__ = ["AGENT_KEY", "PRINCIPAL_SCOPE_KEY", "Caller", "ContextBuilder", "FreshFirstStore",
           "Planner", "ReachRequestHandler"]
