"""The A2A task store of every gateway replica: tasks kept by reach's session store.

A gateway replica may restart, and several replicas on any node answer for the same tasks, so a
task cannot live in a replica's memory: :class:`ReachTaskStore` implements the SDK's ``TaskStore``
over the session store's A2A-task port (:class:`~reach.ports.a2a_tasks.A2ATaskPort`), whose
SQLite database outlives the store's own restarts. Each task is stored whole (its protobuf
bytes) beside the columns it is found and listed by: its ID, context, owner, state and status
timestamp.

It behaves as the SDK's ``DatabaseTaskStore``: every call is scoped to the owner its
``owner_resolver`` reads from the call's context (another owner's task is not there), and
``list`` filters by context, state and status timestamp, orders by status timestamp then ID (both
descending, tasks without a timestamp last) and pages with the same cursor page tokens (an older
task-ID token is still read). As the SDK's request handler does, ``list`` also checks the page size
and history length and applies ``include_artifacts`` and ``history_length`` to the tasks.

A call that finds the session store restarting (AgentUnavailable) is made again until
``retry_s`` has passed: every call is idempotent (a save writes the same row again).

Nothing stored is other than JSON: a task whose Values hold a NaN or an Infinity (the one place
in a task a double lives; JSON has no form for them, and a task holding one could never be
answered again) is scrubbed as it is saved, those numbers made null, with an error in the log,
since reach's own writers never make one. A row stored so by an older version is scrubbed as it
is read.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import re
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, TypeVar

from a2a.server.context import ServerCallContext
from a2a.server.owner_resolver import OwnerResolver, resolve_user_scope
from a2a.server.tasks.task_store import TaskStore
from a2a.types.a2a_pb2 import ListTasksRequest, ListTasksResponse, Task, TaskState
from a2a.utils.constants import DEFAULT_LIST_TASKS_PAGE_SIZE
from a2a.utils.errors import InvalidParamsError
from a2a.utils.task import (
    ListTasksCursor,
    apply_history_length,
    decode_list_tasks_cursor,
    decode_page_token,
    encode_list_tasks_cursor,
    validate_history_length,
    validate_page_size,
)
from google.protobuf import json_format  # type: ignore[import-untyped,unused-ignore]

from policies.backoff import poll_delay
from reach import clock
from reach.errors import AgentUnavailable, AuthError
from reach.ports.a2a_tasks import A2ACursor, A2ATaskPort, A2ATaskRow
from reach.records import A2ATaskSummary

log = logging.getLogger("reach.gateway.tasks")

T = TypeVar("T")
#: Most saves sent in one store call.
SAVE_BATCH = 256

_INT64 = 1 << 63  # SQLite integers are signed 64-bit: a larger timestamp is no real position
# The last two bytes (little-endian) of a double whose exponent is all ones (NaN, Infinity):
# bytes without them hold none, and spare the full check.
_NON_FINITE_TAIL = re.compile(rb"[\xf0-\xff][\x7f\xff]")


class ReachTaskStore(TaskStore):
    """The SDK's ``TaskStore`` on reach's session store (see the module's docstring).

    Args:
        store: The session store's A2A-task port (``cluster.a2a_tasks()``).
        owner_resolver: Who owns the tasks of a call (default: the SDK's, the user's name).
        retry_s: How long a call keeps being made again while the store is unavailable.
        rng: Jitter of the waits between those attempts.
    """

    def __init__(self, store: A2ATaskPort, owner_resolver: OwnerResolver = resolve_user_scope,
                 *, retry_s: float = 30.0, rng: random.Random | None = None) -> None:
        self.store = store
        self.owner_resolver = owner_resolver
        self.retry_s = retry_s
        self._rng = rng or random.Random()
        # Saves waiting for the next store call, in order, and the task sending them.
        self._queued: list[tuple[A2ATaskRow, asyncio.Future[bool]]] = []
        self._flusher: asyncio.Task[None] | None = None

    async def save(self, task: Task, context: ServerCallContext) -> None:
        """Saves (or replaces) a task of the call's owner. Saves made while one store call is
        under way go together in the next (one call, one commit), in the order they were made.

        Raises:
            AuthError: another owner has a task with this ID (it is left as it was).
            AgentUnavailable: the session store stayed unavailable for ``retry_s``.
        """
        owner = self.owner_resolver(context)
        doc = task.SerializeToString()
        if _scrubbed(task, doc):
            log.error("task %s held numbers JSON cannot carry (NaN, Infinity): stored with "
                      "them made null", task.id)
            doc = task.SerializeToString()
        row = (task.id, owner, task.context_id, int(task.status.state), _timestamp_ns(task), doc)
        loop = asyncio.get_running_loop()
        saved: asyncio.Future[bool] = loop.create_future()
        self._queued.append((row, saved))
        if self._flusher is None or self._flusher.done():
            self._flusher = loop.create_task(self._flush())
        if not await saved:
            raise AuthError(f"task {task.id!r} belongs to another owner",
                            details={"rule": "a2a_task_owner", "task_id": task.id})
        log.debug("task %s of owner %s saved", task.id, owner)

    async def _flush(self) -> None:
        """Sends the queued saves, up to SAVE_BATCH a call, one call at a time."""
        while self._queued:
            batch, self._queued = self._queued[:SAVE_BATCH], self._queued[SAVE_BATCH:]
            rows = [row for row, _ in batch]
            try:
                results = await self._call(partial(self.store.a2a_save_many, rows))
            except Exception as exc:  # every save of the batch fails with it
                for _, waiting in batch:
                    if not waiting.done():
                        waiting.set_exception(exc)
                continue
            for (_, waiting), ok in zip(batch, results, strict=True):
                if not waiting.done():
                    waiting.set_result(ok)

    async def get(self, task_id: str, context: ServerCallContext) -> Task | None:
        """The task, if the call's owner has it.

        Raises:
            AgentUnavailable: the session store stayed unavailable for ``retry_s``.
        """
        return await self._get(task_id, self.owner_resolver(context))

    async def list(self, params: ListTasksRequest,
                   context: ServerCallContext) -> ListTasksResponse:
        """A page of the call's owner's tasks (see the module's docstring).

        Raises:
            InvalidParamsError: a page size out of 1-100, a negative history length, a status
                that is no task state, or a page token that is neither a cursor nor the ID of
                one of the owner's tasks.
            AgentUnavailable: the session store stayed unavailable for ``retry_s``.
        """
        owner = self.owner_resolver(context)
        validate_history_length(params)
        if params.HasField("page_size"):
            validate_page_size(params.page_size)
        if params.status not in TaskState.values():
            raise InvalidParamsError(
                f"status {params.status} is not an A2A task state: one of "
                f"{', '.join(TaskState.keys())}")
        page_size = params.page_size or DEFAULT_LIST_TASKS_PAGE_SIZE
        after, inclusive = await self._start(params.page_token, owner)
        # A timestamp protobuf takes may lie past SQLite's integers (after 2262, before 1677):
        # as a bound it means what the nearest integer means (no task, or every task).
        updated_after = (min(max(params.status_timestamp_after.ToNanoseconds(), -_INT64),
                             _INT64 - 1)
                         if params.HasField("status_timestamp_after") else None)
        docs, last, total = await self._call(lambda: self.store.a2a_list(
            owner, context_id=params.context_id, state=params.status,
            updated_after=updated_after, page_size=page_size, after=after, inclusive=inclusive))
        return ListTasksResponse(
            tasks=[_shown(_read(doc), params) for doc in docs],
            next_page_token=None if last is None else encode_list_tasks_cursor(
                ListTasksCursor(timestamp_ns=last[0], task_id=last[1])),
            page_size=page_size, total_size=total)

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        """Deletes a task of the call's owner (nothing if the owner has none).

        Raises:
            AgentUnavailable: the session store stayed unavailable for ``retry_s``.
        """
        owner = self.owner_resolver(context)
        if not await self._call(lambda: self.store.a2a_delete(task_id, owner)):
            log.warning("no task %s of owner %s to delete", task_id, owner)

    async def _get(self, task_id: str, owner: str) -> Task | None:
        doc = await self._call(lambda: self.store.a2a_get(task_id, owner))
        return None if doc is None else _read(doc)

    async def _start(self, page_token: str, owner: str) -> tuple[A2ACursor | None, bool]:
        """Where a page starts: past a cursor token's task, or at a task-ID token's task."""
        if not page_token:
            return None, False
        cursor = decode_list_tasks_cursor(page_token)
        if cursor is not None:
            if cursor.timestamp_ns is not None and not -_INT64 <= cursor.timestamp_ns < _INT64:
                raise InvalidParamsError("Invalid page token")
            return (cursor.timestamp_ns, cursor.task_id), False
        task_id = decode_page_token(page_token)  # an older token: the page's first task's ID
        first = await self._get(task_id, owner)
        if first is None:
            raise InvalidParamsError(f"Invalid page token: {page_token}")
        return (_timestamp_ns(first), task_id), True

    async def _call(self, call: Callable[[], Awaitable[T]]) -> T:
        """Makes a store call, again while the store is unavailable (restarting), for up to
        ``retry_s``."""
        deadline = clock.monotonic() + self.retry_s
        attempt = 0
        while True:
            try:
                return await call()
            except AgentUnavailable:
                delay = poll_delay(attempt, self._rng)
                if clock.monotonic() + delay > deadline:
                    raise
            await asyncio.sleep(delay)
            attempt += 1


def _read(doc: bytes) -> Task:
    task: Task = Task.FromString(doc)
    if _scrubbed(task, doc):
        log.warning("stored task %s held numbers JSON cannot carry (NaN, Infinity): read with "
                    "them made null", task.id)
    return task


def _scrubbed(task: Task, doc: bytes) -> bool:
    """Makes every non-finite number of the task's Values null, in place; whether it did."""
    if not _NON_FINITE_TAIL.search(doc):
        return False
    try:
        json_format.MessageToDict(task)
    except (ValueError, json_format.Error):  # how json_format refuses a NaN
        return _scrub(task) > 0
    return False


def _scrub(message: Any) -> int:
    """Nulls the non-finite numbers of the Values in a message; returns how many."""
    if (message.DESCRIPTOR.full_name == "google.protobuf.Value"
            and message.WhichOneof("kind") == "number_value"
            and not math.isfinite(message.number_value)):
        message.null_value = 0
        return 1
    count = 0
    for field, value in message.ListFields():
        if field.message_type is None:
            continue
        if field.message_type.GetOptions().map_entry:
            entry = field.message_type.fields_by_name["value"]
            items = list(value.values()) if entry.message_type is not None else []
        else:
            items = list(value) if field.is_repeated else [value]
        count += sum(_scrub(item) for item in items)
    return count


def _timestamp_ns(task: Task) -> int | None:
    """A task's status timestamp in epoch nanoseconds (None if it has none)."""
    return task.status.timestamp.ToNanoseconds() if task.status.HasField("timestamp") else None


def summary(row: A2ATaskRow) -> A2ATaskSummary:
    """A stored task as the cluster's operators see it: its row's columns, with the target and
    trace its reach metadata names (neither, from a document that does not decode)."""
    task_id, owner, context_id, state, updated, doc = row
    name = TaskState.Name(state) if state in TaskState.values() else "TASK_STATE_UNSPECIFIED"
    meta: dict[str, str] = {}
    try:
        fields = Task.FromString(doc).metadata.fields
        if "reach" in fields:
            meta = {k: v.string_value for k, v in fields["reach"].struct_value.fields.items()}
    except Exception as exc:  # a row the SDK cannot read still shows its columns
        log.warning("task %s of %s does not decode: %s", task_id, owner, exc)
    return A2ATaskSummary(task_id=task_id, owner=owner, context_id=context_id,
                          state=name.removeprefix("TASK_STATE_").lower(),
                          updated=None if updated is None else updated / 1e9,
                          target=meta.get("target", ""), trace_id=meta.get("trace_id", ""))


async def recent_tasks(store: A2ATaskPort, limit: int) -> list[A2ATaskSummary]:
    """The ``limit`` most recently updated tasks of every owner, newest first, summarised."""
    return [summary(row) for row in await store.a2a_recent(limit)]


def _shown(task: Task, params: ListTasksRequest) -> Task:
    """A listed task as the request asks to see it: artifacts only if asked for, and the last
    ``history_length`` messages of its history (all if none is given)."""
    if not params.include_artifacts:
        task.ClearField("artifacts")
    return apply_history_length(task, params)


__all__ = ["ReachTaskStore", "recent_tasks", "summary"]
