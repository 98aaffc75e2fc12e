"""Where sessions are kept: the storage interface, and its SQLite implementation on aiosqlite.

The session store actor decides (sequence numbers, compaction, pending-request states) and hands
the storage one :class:`WriteBatch` per group commit; the storage writes it in one transaction.
Two decisions are the transaction's own, because they must be atomic with the write: a claim's
fencing token (the request's counter, plus one) and whether a reply commits (its token is still
the request's latest and no reply is recorded yet); :class:`Written` reports them.
The same database keeps the A2A gateway's tasks (table ``a2a_tasks``): each an opaque document
(a serialized ``Task``) with the columns it is found and listed by, owned by one caller.
Another database replaces SQLite by implementing :class:`SessionStorage`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import aiosqlite
import msgpack

from actors.a2a_storage import A2A_SAVE, A2A_SCHEMA, A2ACursor, A2ATaskQueries, A2ATaskRow
from policies.audit import GENESIS
from reach.errors import StorageError


@dataclass
class WriteBatch:
    """Everything one group commit writes, in one transaction.

    ``claims`` are ``(request_id, agent_id, at)``; ``commits`` are ``(request_id, token,
    agent_id, payload, schema, at)``. Commits are applied before claims: a reply that arrives
    with a later holder's claim is not fenced off by it (that holder then gets the reply).
    ``a2a_saves`` are ``(task_id, context_id, owner, state, updated, doc)``, ``a2a_deletes``
    ``(task_id, owner)``; saves go before deletes (writes of one batch are concurrent, so any
    order of them is one their callers could have seen).
    """

    sessions: list[tuple[str, str, str, str, float]] = field(default_factory=list)
    messages: list[tuple[str, int, str, str, str, bytes, str, float]] = field(default_factory=list)
    session_seq: dict[str, int] = field(default_factory=dict)
    folds: list[tuple[str, str, int]] = field(default_factory=list)
    pending: list[tuple[str, str, str, str, bytes, float | None, float]] = field(
        default_factory=list)
    resolutions: list[tuple[str, str, float]] = field(default_factory=list)
    claims: list[tuple[str, str, float]] = field(default_factory=list)
    commits: list[tuple[str, int, str, bytes, str, float]] = field(default_factory=list)
    audit: list[tuple[int, float, str, str, str]] = field(default_factory=list)
    a2a_saves: list[A2ATaskRow] = field(default_factory=list)
    a2a_deletes: list[tuple[str, str]] = field(default_factory=list)

    def __len__(self) -> int:
        return (len(self.sessions) + len(self.messages) + len(self.folds) + len(self.pending)
                + len(self.resolutions) + len(self.claims) + len(self.commits)
                + len(self.audit) + len(self.a2a_saves) + len(self.a2a_deletes))


@dataclass
class Written:
    """What writing a batch decided, each list in the order of the batch's own.

    Attributes:
        resolved: Per resolution, whether it ended an open request.
        tokens: Per claim, the request's new fencing token (1, 2, 3... per request).
        committed: Per commit, whether its reply is now the recorded one.
        a2a_saved: Per A2A task saved, whether it was written (False: the task ID is another
            owner's, which is left as it was).
        a2a_deleted: Per A2A task deleted, whether the owner had it.
    """

    resolved: list[bool] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    committed: list[bool] = field(default_factory=list)
    a2a_saved: list[bool] = field(default_factory=list)
    a2a_deleted: list[bool] = field(default_factory=list)


class SessionStorage(Protocol):
    """What the session store needs from a database.

    Attributes:
        path: Where the database is (shown in the store's stats).
    """

    path: Path

    async def open(self) -> None:
        """Opens (creating if need be) the database."""

    async def close(self) -> None:
        """Closes it."""

    async def write(self, batch: WriteBatch) -> Written:
        """Writes a batch atomically; returns what it decided (see :class:`Written`)."""

    async def session(self, session_id: str) -> dict[str, Any] | None:
        """A session's row (terms, summary, folded_upto, next_seq), or None."""

    async def messages(self, session_id: str, after_seq: int, limit: int | None,
                       last: bool = False) -> list[dict[str, Any]]:
        """Messages with seq > ``after_seq`` in order (the last ``limit`` of them if ``last``)."""

    async def pending_for(self, agent_id: str) -> list[dict[str, Any]]:
        """Open pending requests sent by an agent."""

    async def pending_status(self, request_id: str) -> str | None:
        """A pending request's status (open, answered, cancelled, failed), or None."""

    async def reply_for(self, request_id: str) -> dict[str, Any] | None:
        """The recorded reply of a request, or None."""

    async def integrity(self) -> str:
        """The database's own integrity check result (``ok`` when sound)."""

    async def audit_tail(self) -> tuple[int, str]:
        """The last audit record's (seq, hash): (0, GENESIS) for an empty log."""

    async def audit_records(self, trace_id: str | None, agent: str | None,
                            limit: int) -> list[dict[str, Any]]:
        """Audit records, oldest first, optionally of one trace or one agent."""

    async def a2a_task(self, task_id: str, owner: str) -> bytes | None:
        """An A2A task's document, if ``owner`` has that task."""

    async def a2a_tasks(self, owner: str, *, context_id: str, state: int,
                        updated_after: int | None, limit: int, after: A2ACursor | None,
                        inclusive: bool) -> tuple[list[tuple[str, int | None, bytes]], int]:
        """An owner's A2A tasks, newest update first (those without one last, each group by
        task ID descending): up to ``limit`` ``(task_id, updated, doc)`` rows from past
        ``after`` (or from it, if ``inclusive``), and how many tasks pass the filters in all.
        An empty ``context_id``, a ``state`` of 0 or no ``updated_after`` filter nothing."""

    async def a2a_recent(self, limit: int) -> list[A2ATaskRow]:
        """The ``limit`` most recently updated A2A tasks of every owner, newest first."""


_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions(
    session_id TEXT PRIMARY KEY, initiator TEXT NOT NULL, responder TEXT NOT NULL,
    terms TEXT NOT NULL, summary TEXT NOT NULL DEFAULT '', folded_upto INTEGER NOT NULL DEFAULT 0,
    next_seq INTEGER NOT NULL DEFAULT 1, created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS messages(
    session_id TEXT NOT NULL, seq INTEGER NOT NULL, msg_id TEXT NOT NULL, sender TEXT NOT NULL,
    kind TEXT NOT NULL, payload BLOB NOT NULL, schema TEXT NOT NULL, at REAL NOT NULL,
    PRIMARY KEY(session_id, seq)) WITHOUT ROWID;
CREATE UNIQUE INDEX IF NOT EXISTS messages_msg_id ON messages(session_id, msg_id);
CREATE TABLE IF NOT EXISTS pending_requests(
    request_id TEXT PRIMARY KEY, agent_id TEXT NOT NULL, receiver TEXT NOT NULL,
    session_id TEXT NOT NULL, envelope BLOB NOT NULL, deadline REAL,
    status TEXT NOT NULL DEFAULT 'open', updated REAL NOT NULL);
CREATE INDEX IF NOT EXISTS pending_by_agent ON pending_requests(agent_id, status);
CREATE TABLE IF NOT EXISTS replies(
    request_id TEXT PRIMARY KEY, agent_id TEXT NOT NULL, payload BLOB NOT NULL,
    schema TEXT NOT NULL, at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS claims(
    request_id TEXT PRIMARY KEY, token INTEGER NOT NULL, agent_id TEXT NOT NULL, at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS audit(
    seq INTEGER PRIMARY KEY, at REAL NOT NULL, prev TEXT NOT NULL, hash TEXT NOT NULL,
    record TEXT NOT NULL);
""" + A2A_SCHEMA


async def _claim(db: aiosqlite.Connection, request_id: str, agent_id: str, at: float) -> int:
    """Counts one more claim of a request (inside the caller's transaction); its new token."""
    await db.execute(
        "INSERT INTO claims(request_id, token, agent_id, at) VALUES (?, 1, ?, ?) "
        "ON CONFLICT(request_id) DO UPDATE SET token = token + 1, agent_id = excluded.agent_id, "
        "at = excluded.at", (request_id, agent_id, at))
    async with db.execute("SELECT token FROM claims WHERE request_id = ?", (request_id,)) as cur:
        row = await cur.fetchone()
    assert row is not None  # just written, in this transaction
    return int(row[0])


def pack(value: Any) -> bytes:
    """msgpack with strict UTF-8, as on the wire."""
    packed: bytes = msgpack.packb(value, use_bin_type=True, unicode_errors="strict")
    return packed


def unpack(data: bytes) -> Any:
    """The inverse of :func:`pack`."""
    return msgpack.unpackb(data, raw=False, unicode_errors="strict")


class SqliteStorage(A2ATaskQueries):
    """SQLite in WAL mode.

    Args:
        path: The database file.
        synchronous: SQLite's ``synchronous`` setting: ``FULL`` (default) makes a commit survive
            power loss, not just a killed process; ``NORMAL`` is faster and survives a killed
            process.
    """

    def __init__(self, path: str | Path, synchronous: str = "FULL",
                 connect: Callable[..., Any] = aiosqlite.connect) -> None:
        if synchronous.upper() not in ("NORMAL", "FULL", "EXTRA"):
            # SQLite would silently take an unknown value as NORMAL: weaker than asked for.
            raise StorageError(f"synchronous must be NORMAL, FULL or EXTRA, got {synchronous!r}")
        self.path = Path(path)
        self.synchronous = synchronous.upper()
        self._connect = connect
        self._db: aiosqlite.Connection | None = None

    @property
    def db(self) -> aiosqlite.Connection:
        """The open connection.

        Raises:
            StorageError: the storage is not open.
        """
        if self._db is None:
            raise StorageError(f"session storage {self.path} is not open")
        return self._db

    async def open(self) -> None:
        """Opens the file (creating folder, file and tables), in WAL mode."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = await self._connect(self.path, isolation_level=None)
        await self.db.execute("PRAGMA journal_mode=WAL")
        await self.db.execute(f"PRAGMA synchronous={self.synchronous}")
        await self.db.executescript(_SCHEMA)

    async def close(self) -> None:
        """Closes the connection."""
        if self._db is not None:
            await self._db.close()
            self._db = None

    async def write(self, batch: WriteBatch) -> Written:
        """Writes the batch in one transaction; see :class:`SessionStorage`."""
        db = self.db
        written = Written()
        await db.execute("BEGIN IMMEDIATE")
        try:
            if batch.sessions:
                await db.executemany(
                    "INSERT OR IGNORE INTO sessions(session_id, initiator, responder, terms, "
                    "created) VALUES (?, ?, ?, ?, ?)", batch.sessions)
            if batch.messages:
                await db.executemany(
                    "INSERT INTO messages(session_id, seq, msg_id, sender, kind, payload, schema,"
                    " at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", batch.messages)
            if batch.session_seq:
                await db.executemany("UPDATE sessions SET next_seq = ? WHERE session_id = ?",
                                     [(n, s) for s, n in batch.session_seq.items()])
            for session_id, summary, upto in batch.folds:
                await db.execute("UPDATE sessions SET summary = ?, folded_upto = ? "
                                 "WHERE session_id = ?", (summary, upto, session_id))
                await db.execute("DELETE FROM messages WHERE session_id = ? AND seq <= ?",
                                 (session_id, upto))
            if batch.pending:
                await db.executemany(
                    "INSERT OR IGNORE INTO pending_requests(request_id, agent_id, receiver, "
                    "session_id, envelope, deadline, updated) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    batch.pending)
            for request_id, status, at in batch.resolutions:
                cursor = await db.execute(
                    "UPDATE pending_requests SET status = ?, updated = ? "
                    "WHERE request_id = ? AND status = 'open'", (status, at, request_id))
                written.resolved.append(cursor.rowcount == 1)
            for request_id, token, agent_id, payload, schema, at in batch.commits:
                cursor = await db.execute(
                    "INSERT OR IGNORE INTO replies(request_id, agent_id, payload, schema, at) "
                    "SELECT ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM claims "
                    "WHERE request_id = ? AND token = ?)",
                    (request_id, agent_id, payload, schema, at, request_id, token))
                written.committed.append(cursor.rowcount == 1)
            for request_id, agent_id, at in batch.claims:
                written.tokens.append(await _claim(db, request_id, agent_id, at))
            if batch.audit:
                await db.executemany(
                    "INSERT INTO audit(seq, at, prev, hash, record) VALUES (?, ?, ?, ?, ?)",
                    batch.audit)
            for row in batch.a2a_saves:
                cursor = await db.execute(A2A_SAVE, row)
                written.a2a_saved.append(cursor.rowcount == 1)
            for task_id, owner in batch.a2a_deletes:
                cursor = await db.execute("DELETE FROM a2a_tasks WHERE task_id = ? AND owner = ?",
                                          (task_id, owner))
                written.a2a_deleted.append(cursor.rowcount == 1)
            await db.execute("COMMIT")
        except BaseException:
            await db.execute("ROLLBACK")
            raise
        return written

    async def session(self, session_id: str) -> dict[str, Any] | None:
        """See :class:`SessionStorage`."""
        async with self.db.execute(
            "SELECT session_id, initiator, responder, terms, summary, folded_upto, next_seq, "
            "created FROM sessions WHERE session_id = ?", (session_id,)) as cur:
            row = await cur.fetchone()
        if row is None:
            return None
        keys = ("session_id", "initiator", "responder", "terms", "summary", "folded_upto",
                "next_seq", "created")
        rec = dict(zip(keys, row, strict=True))
        rec["terms"] = json.loads(rec["terms"])
        return rec

    async def messages(self, session_id: str, after_seq: int, limit: int | None,
                       last: bool = False) -> list[dict[str, Any]]:
        """See :class:`SessionStorage`."""
        cols = "seq, msg_id, sender, kind, payload, schema, at"
        if last and limit is not None:
            sql = (f"SELECT * FROM (SELECT {cols} FROM messages WHERE session_id = ? AND seq > ? "
                   "ORDER BY seq DESC LIMIT ?) ORDER BY seq")
            args: tuple[Any, ...] = (session_id, after_seq, limit)
        else:
            sql = f"SELECT {cols} FROM messages WHERE session_id = ? AND seq > ? ORDER BY seq"
            args = (session_id, after_seq)
            if limit is not None:
                sql += " LIMIT ?"
                args += (limit,)
        async with self.db.execute(sql, args) as cur:
            rows = await cur.fetchall()
        return [{"seq": r[0], "msg_id": r[1], "sender": r[2], "kind": r[3],
                 "payload": unpack(r[4]), "schema": r[5], "at": r[6]} for r in rows]

    async def pending_for(self, agent_id: str) -> list[dict[str, Any]]:
        """See :class:`SessionStorage`."""
        async with self.db.execute(
            "SELECT request_id, receiver, session_id, envelope, deadline FROM pending_requests "
            "WHERE agent_id = ? AND status = 'open' ORDER BY updated", (agent_id,)) as cur:
            rows = await cur.fetchall()
        return [{"request_id": r[0], "receiver": r[1], "session_id": r[2],
                 "envelope": unpack(r[3]), "deadline": r[4]} for r in rows]

    async def pending_status(self, request_id: str) -> str | None:
        """See :class:`SessionStorage`."""
        async with self.db.execute("SELECT status FROM pending_requests WHERE request_id = ?",
                                   (request_id,)) as cur:
            row = await cur.fetchone()
        return None if row is None else str(row[0])

    async def reply_for(self, request_id: str) -> dict[str, Any] | None:
        """See :class:`SessionStorage`."""
        async with self.db.execute(
            "SELECT agent_id, payload, schema FROM replies WHERE request_id = ?",
            (request_id,)) as cur:
            row = await cur.fetchone()
        if row is None:
            return None
        return {"agent_id": row[0], "payload": unpack(row[1]), "schema": row[2]}

    async def audit_tail(self) -> tuple[int, str]:
        """The last audit record's (seq, hash): (0, GENESIS) for an empty log."""
        async with self.db.execute("SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1") as cur:
            row = await cur.fetchone()
        return (0, GENESIS) if row is None else (int(row[0]), str(row[1]))

    async def audit_records(self, trace_id: str | None, agent: str | None,
                            limit: int) -> list[dict[str, Any]]:
        """Audit records, oldest first, optionally of one trace or one agent (caller or callee)."""
        where, args = [], []
        if trace_id is not None:
            where.append("json_extract(record, '$.trace_id') = ?")
            args.append(trace_id)
        if agent is not None:
            where.append("(json_extract(record, '$.caller') = ? "
                         "OR json_extract(record, '$.callee') = ?)")
            args += [agent, agent]
        sql = "SELECT seq, at, record FROM audit"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY seq DESC LIMIT ?"
        async with self.db.execute(sql, (*args, limit)) as cur:
            rows = list(await cur.fetchall())
        return [{"seq": seq, "at": at, **json.loads(text)} for seq, at, text in reversed(rows)]

    async def integrity(self) -> str:
        """See :class:`SessionStorage`."""
        async with self.db.execute("PRAGMA integrity_check") as cur:
            row = await cur.fetchone()
        return str(row[0]) if row else "no answer"
