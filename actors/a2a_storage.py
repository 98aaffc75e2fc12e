"""The A2A gateway's tasks in the session store's SQLite database: their table, and its queries.

Each task is an opaque document (a serialized ``Task``) beside the columns it is found and listed
by (its ID, context, owner, ``TaskState`` number and status timestamp), owned by one caller.
:class:`A2ATaskQueries` holds the reads; :data:`A2A_SAVE` is the statement a group commit saves
a task with (in the storage's own transaction, see :mod:`actors.session_storage`).
"""

from __future__ import annotations

from typing import Any

import aiosqlite

#: An A2A task row: ``(task_id, context_id, owner, state, updated, doc)``; ``state`` is the
#: ``TaskState`` number, ``updated`` its status timestamp in epoch nanoseconds (None if it has
#: none), ``doc`` the serialized ``Task``.
A2ATaskRow = tuple[str, str, str, int, int | None, bytes]
#: A position in the A2A list order: ``(updated, task_id)`` of a task.
A2ACursor = tuple[int | None, str]

#: The table, and its indexes: by owner (a caller's listing), by owner and context, and by
#: status timestamp alone (the most recent tasks of every owner, which the observer shows).
A2A_SCHEMA = """
CREATE TABLE IF NOT EXISTS a2a_tasks(
    task_id TEXT PRIMARY KEY, context_id TEXT NOT NULL, owner TEXT NOT NULL,
    state INTEGER NOT NULL, updated INTEGER, doc BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS a2a_tasks_by_owner ON a2a_tasks(owner, updated, task_id);
CREATE INDEX IF NOT EXISTS a2a_tasks_by_context ON a2a_tasks(owner, context_id, updated, task_id);
CREATE INDEX IF NOT EXISTS a2a_tasks_by_update ON a2a_tasks(updated, task_id);
"""

#: Inserts an A2A task, or replaces it if the same owner has it (another owner's is kept).
A2A_SAVE = (
    "INSERT INTO a2a_tasks(task_id, context_id, owner, state, updated, doc) "
    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(task_id) DO UPDATE SET "
    "context_id = excluded.context_id, state = excluded.state, updated = excluded.updated, "
    "doc = excluded.doc WHERE a2a_tasks.owner = excluded.owner")


def _after(after: A2ACursor | None, inclusive: bool) -> tuple[str, tuple[Any, ...]]:
    """The SQL condition (and its arguments) of the tasks past ``after`` in the list order."""
    if after is None:
        return "1", ()
    updated, task_id = after
    op = "<=" if inclusive else "<"
    if updated is None:
        return f"updated IS NULL AND task_id {op} ?", (task_id,)
    return (f"(updated < ? OR (updated = ? AND task_id {op} ?) OR updated IS NULL)",
            (updated, updated, task_id))


class A2ATaskQueries:
    """The reads of the A2A tasks' table, for a storage with an open ``db`` connection."""

    @property
    def db(self) -> aiosqlite.Connection:
        """The open connection (the storage's)."""
        raise NotImplementedError

    async def a2a_task(self, task_id: str, owner: str) -> bytes | None:
        """An A2A task's document, if ``owner`` has that task."""
        async with self.db.execute("SELECT doc FROM a2a_tasks WHERE task_id = ? AND owner = ?",
                                   (task_id, owner)) as cur:
            row = await cur.fetchone()
        return None if row is None else bytes(row[0])

    async def a2a_tasks(self, owner: str, *, context_id: str, state: int,
                        updated_after: int | None, limit: int, after: A2ACursor | None,
                        inclusive: bool) -> tuple[list[tuple[str, int | None, bytes]], int]:
        """An owner's A2A tasks, newest update first (those without one last, each group by
        task ID descending): up to ``limit`` ``(task_id, updated, doc)`` rows from past
        ``after`` (or from it, if ``inclusive``), and how many tasks pass the filters in all.
        An empty ``context_id``, a ``state`` of 0 or no ``updated_after`` filter nothing.
        The count and the page come in one statement."""
        where = ["owner = ?"]
        args: list[Any] = [owner]
        if context_id:
            where.append("context_id = ?")
            args.append(context_id)
        if state:
            where.append("state = ?")
            args.append(state)
        if updated_after is not None:
            where.append("updated >= ?")
            args.append(updated_after)
        filters = " AND ".join(where)
        past, past_args = _after(after, inclusive)
        # SQLite sorts NULL lowest, so descending order puts the tasks without a timestamp last;
        # the one-row left side gives the count even when the page is empty.
        sql = (f"SELECT (SELECT COUNT(*) FROM a2a_tasks WHERE {filters}), p.task_id, p.updated, "
               f"p.doc FROM (SELECT 1) LEFT JOIN (SELECT task_id, updated, doc FROM a2a_tasks "
               f"WHERE {filters} AND {past} ORDER BY updated DESC, task_id DESC LIMIT ?) AS p "
               "ORDER BY p.updated DESC, p.task_id DESC")
        async with self.db.execute(sql, (*args, *args, *past_args, limit)) as cur:
            rows = list(await cur.fetchall())
        total = int(rows[0][0]) if rows else 0
        return [(r[1], r[2], bytes(r[3])) for r in rows if r[1] is not None], total

    async def a2a_recent(self, limit: int) -> list[A2ATaskRow]:
        """The ``limit`` most recently updated A2A tasks of every owner, newest first (those
        without a status timestamp last)."""
        async with self.db.execute(
                "SELECT task_id, context_id, owner, state, updated, doc FROM a2a_tasks "
                "ORDER BY updated DESC, task_id DESC LIMIT ?", (limit,)) as cur:
            rows = list(await cur.fetchall())
        return [(t, c, o, int(s), u, bytes(d)) for t, c, o, s, u, d in rows]


__all__ = ["A2A_SAVE", "A2A_SCHEMA", "A2ACursor", "A2ATaskQueries", "A2ATaskRow"]
