"""The port of the A2A gateway's task storage (each task a serialized ``Task``, owned by one
caller)."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Protocol

#: An A2A task to save: ``(task_id, owner, context_id, state, updated, doc)``: its ID, owner,
#: context, ``TaskState`` number, status timestamp in epoch nanoseconds (None if none) and
#: serialized ``Task``.
A2ATaskRow = tuple[str, str, str, int, int | None, bytes]

#: A position in an owner's listing of A2A tasks: ``(updated, task_id)`` of a task.
A2ACursor = tuple[int | None, str]


class A2ATaskPort(Protocol):
    """The A2A gateway's tasks (kept by the session store), each owned by one caller."""

    def a2a_save(self, task_id: str, owner: str, *, context_id: str, state: int,
                 updated: int | None, doc: bytes) -> Awaitable[None]:
        """Saves (inserts or replaces) an A2A task of ``owner`` (the fields of an
        :data:`A2ATaskRow`); AuthError if the task ID is another owner's."""
        ...

    def a2a_save_many(self, rows: list[A2ATaskRow]) -> Awaitable[list[bool]]:
        """Saves A2A tasks in order, in one commit; for each, whether it was saved (False:
        another owner's ID)."""
        ...

    def a2a_get(self, task_id: str, owner: str) -> Awaitable[bytes | None]:
        """An A2A task's serialized ``Task``, if ``owner`` has that task."""
        ...

    def a2a_list(self, owner: str, *, context_id: str = "", state: int = 0,
                 updated_after: int | None = None, page_size: int,
                 after: A2ACursor | None = None, inclusive: bool = False,
                 ) -> Awaitable[tuple[list[bytes], A2ACursor | None, int]]:
        """A page of an owner's A2A tasks, by status timestamp then task ID, both descending
        (tasks without a timestamp last), filtered by context, state and timestamp (``""``,
        0, None: no filter), starting past the position ``after`` (at it if ``inclusive``):
        the page, the position of its last task if more follow, and how many tasks pass the
        filters in all."""
        ...

    def a2a_delete(self, task_id: str, owner: str) -> Awaitable[bool]:
        """Deletes an A2A task of ``owner``; False if the owner had none."""
        ...

    def a2a_recent(self, limit: int) -> Awaitable[list[A2ATaskRow]]:
        """The ``limit`` most recently updated A2A tasks of every owner, newest first (those
        without a status timestamp last): what the cluster's operators see, not a caller."""
        ...


__all__ = ["A2ACursor", "A2ATaskPort", "A2ATaskRow"]
