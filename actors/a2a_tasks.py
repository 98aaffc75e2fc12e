"""The A2A gateway's tasks, as the session store keeps them.

They are kept in the store so that every gateway replica, on any node, sees the same tasks, and
they outlive a replica: opaque documents (each a serialized ``Task``), each owned by one caller,
written through the store's group commits. The storage decides, in the commit that writes it,
whether a save may replace a task (only its owner's) and whether a delete found one.
"""

from __future__ import annotations

from collections.abc import Callable

from actors.a2a_storage import A2ACursor
from actors.group_commit import GroupCommit
from actors.session_storage import WriteBatch, Written
from reach.errors import AuthError, ProtocolError

#: An A2A task to save: its ID, owner, context ID, state, status timestamp (ns) and document.
A2ARow = tuple[str, str, str, int, int | None, bytes]


class A2ATasks:
    """Saves, reads, lists and deletes A2A tasks through the store's writer.

    Args:
        writer: The store's writer (and its storage).
    """

    def __init__(self, writer: GroupCommit) -> None:
        self.writer = writer

    async def save(self, task_id: str, owner: str, *, context_id: str, state: int,
                   updated: int | None, doc: bytes) -> None:
        """Saves one task of ``owner`` (inserted, or replacing the owner's), once committed.

        Raises:
            AuthError: the task ID is another owner's task (which is left as it was).
        """
        row = (task_id, context_id, owner, state, updated, doc)

        def stage(batch: WriteBatch) -> Callable[[Written], bool]:
            index = len(batch.a2a_saves)
            batch.a2a_saves.append(row)
            return lambda written: written.a2a_saved[index]

        if not await self.writer.commit(stage):
            raise AuthError(f"task {task_id!r} belongs to another owner",
                            details={"rule": "a2a_task_owner", "task_id": task_id})

    async def save_many(self, rows: list[A2ARow]) -> list[bool]:
        """Saves tasks, in order, in one commit; for each, whether it was saved."""

        def stage(batch: WriteBatch) -> Callable[[Written], list[bool]]:
            first = len(batch.a2a_saves)
            batch.a2a_saves.extend((t, c, o, st, up, doc) for t, o, c, st, up, doc in rows)
            return lambda written: list(written.a2a_saved[first:first + len(rows)])

        saved: list[bool] = await self.writer.commit(stage)
        return saved

    async def get(self, task_id: str, owner: str) -> bytes | None:
        """A task's document, if ``owner`` has that task."""
        await self.writer.ready()
        return await self.writer.storage.a2a_task(task_id, owner)

    async def page(self, owner: str, *, context_id: str, state: int, updated_after: int | None,
                   page_size: int, after: A2ACursor | None, inclusive: bool,
                   ) -> tuple[list[bytes], A2ACursor | None, int]:
        """A page of an owner's tasks: its documents, the position of its last task when more
        follow (else None), and how many tasks pass the filters in all.

        Raises:
            ProtocolError: ``page_size`` is below 1.
        """
        if page_size < 1:
            raise ProtocolError(f"page_size must be at least 1, got {page_size}",
                                details={"rule": "a2a_page_size"})
        await self.writer.ready()
        rows, total = await self.writer.storage.a2a_tasks(
            owner, context_id=context_id, state=state, updated_after=updated_after,
            limit=page_size + 1, after=after, inclusive=inclusive)
        page = rows[:page_size]
        last = (page[-1][1], page[-1][0]) if len(rows) > page_size else None
        return [doc for *_, doc in page], last, total

    async def recent(self, limit: int) -> list[A2ARow]:
        """The ``limit`` most recently updated tasks of every owner, newest first, as
        :data:`A2ARow` (owner before context).

        Raises:
            ProtocolError: ``limit`` is below 1.
        """
        if limit < 1:
            raise ProtocolError(f"limit must be at least 1, got {limit}",
                                details={"rule": "a2a_recent_limit"})
        await self.writer.ready()
        rows = await self.writer.storage.a2a_recent(limit)
        return [(t, o, c, st, up, doc) for t, c, o, st, up, doc in rows]

    async def delete(self, task_id: str, owner: str) -> bool:
        """Deletes a task of ``owner``, once committed; False if the owner had none."""
        def stage(batch: WriteBatch) -> Callable[[Written], bool]:
            index = len(batch.a2a_deletes)
            batch.a2a_deletes.append((task_id, owner))
            return lambda written: written.a2a_deleted[index]

        deleted: bool = await self.writer.commit(stage)
        return deleted
