"""The A2A events of one task, written in the order the SDK wants and as few as it allows.

A task the caller waits for (a blocking ``SendMessage``) that ends quickly is written once: a
single :class:`Task` already in its final state, with its artifact and history (one task-store
write). A task that is streamed to its caller, asked not to block, or still running after
:data:`reach.a2a.server.executor.ANNOUNCE_AFTER_S` is *announced*: a ``WORKING`` task first (so that
it can be got, listed, cancelled and subscribed to), then each chunk of its reply as an artifact
update (``append`` after the first, ``last_chunk`` on the last), then its final status.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from a2a.server.events import Event
from a2a.types.a2a_pb2 import (
    Artifact,
    Message,
    Part,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)

from reach import clock
from reach.a2a.server import _proto

#: The ID of the one artifact of a task: the agent's reply (all its chunks, for a stream).
REPLY_ARTIFACT = "reply"


def timestamp() -> Any:
    """Now, on reach's clock, as a protobuf timestamp."""
    return _proto.timestamp(clock.now())


class EventSink(Protocol):
    """Where a task's events go: the SDK's event queue of the task, or (a blocking SendMessage
    run without the SDK's queues) its :class:`a2a.server.tasks.TaskManager`, which folds them
    into the stored task."""

    async def enqueue_event(self, event: Event) -> None:
        """Takes one event."""
        ...


class TaskEvents:
    """Writes one task's events to its sink (see the module's docstring).

    Args:
        queue: The task's event queue (or another sink).
        task_id: The task's ID.
        context_id: Its context's ID.
        request: The message that started it (the first entry of its history).
        metadata: The task's metadata (``{"reach": {...}}``).
    """

    def __init__(self, queue: EventSink, task_id: str, context_id: str,
                 request: Message | None, metadata: dict[str, Any]) -> None:
        self._queue = queue
        self.task_id = task_id
        self.context_id = context_id
        self._request = request
        self._metadata = metadata
        # Invariant: every write holds the lock, so events leave in the order they were made.
        self._lock = asyncio.Lock()
        self.announced = False
        self.closed = False
        self._held: list[Part] = []  # parts made before the announcement (sent with it)
        self._held_last = False
        self._chunks = 0  # artifact updates sent

    async def announce(self) -> None:
        """Writes the WORKING task (and the chunks made so far), unless done already."""
        async with self._lock:
            if self.announced or self.closed:
                return
            self.announced = True
            await self._queue.enqueue_event(Task(
                id=self.task_id, context_id=self.context_id,
                status=TaskStatus(state=TaskState.TASK_STATE_WORKING, timestamp=timestamp()),
                history=[self._request] if self._request is not None else [],
                metadata=self._metadata))
            if self._held:
                await self._artifact(self._held, self._held_last)
                self._held = []

    async def chunk(self, parts: list[Part], *, last: bool) -> None:
        """Adds parts to the reply: an artifact update once announced, else kept for the
        final task."""
        async with self._lock:
            if self.closed:
                return
            if not self.announced:
                self._held.extend(parts)
                self._held_last = last
                return
            await self._artifact(parts, last)

    async def _artifact(self, parts: list[Part], last: bool) -> None:
        await self._queue.enqueue_event(TaskArtifactUpdateEvent(
            task_id=self.task_id, context_id=self.context_id,
            artifact=Artifact(artifact_id=REPLY_ARTIFACT, name="reply", parts=parts),
            append=self._chunks > 0, last_chunk=last))
        self._chunks += 1

    async def finish(self, state: TaskState, *, message: Message | None = None,
                     metadata: dict[str, Any] | None = None) -> None:
        """Writes the final state (with the metadata added to the task's); nothing is written
        after it."""
        async with self._lock:
            if self.closed:
                return
            self.closed = True
            status = TaskStatus(state=state, message=message, timestamp=timestamp())
            if self.announced:
                await self._queue.enqueue_event(TaskStatusUpdateEvent(
                    task_id=self.task_id, context_id=self.context_id, status=status,
                    metadata=metadata))
                return
            merged = {**self._metadata, **(metadata or {})}
            artifacts = [Artifact(artifact_id=REPLY_ARTIFACT, name="reply",
                                  parts=self._held)] if self._held else []
            await self._queue.enqueue_event(Task(
                id=self.task_id, context_id=self.context_id, status=status,
                artifacts=artifacts,
                history=[self._request] if self._request is not None else [],
                metadata=merged))

    async def close(self) -> None:
        """Stops writing (the task is being cancelled: its CANCELED status is written by the
        canceller)."""
        async with self._lock:
            self.closed = True


__all__ = ["REPLY_ARTIFACT", "EventSink", "TaskEvents", "timestamp"]
