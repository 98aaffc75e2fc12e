"""SQLite on the event loop's own thread: the part of aiosqlite's connection the session storage
uses, run inline, so that a test's virtual-time loop (see :mod:`reach.testing`) never waits on a
thread while its clock could jump. For tests only: every query blocks the loop.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any


class _InlineCursor:
    def __init__(self, cursor: sqlite3.Cursor) -> None:
        self._cursor = cursor
        self.rowcount = cursor.rowcount

    async def fetchone(self) -> Any:
        return self._cursor.fetchone()

    async def fetchall(self) -> list[Any]:
        return self._cursor.fetchall()


class _InlineStatement:
    """``db.execute(...)``: awaitable (a cursor) and an async context manager (a cursor)."""

    def __init__(self, run: Callable[[], sqlite3.Cursor]) -> None:
        self._run = run

    def __await__(self) -> Any:
        return self._cursor().__await__()

    async def _cursor(self) -> _InlineCursor:
        return _InlineCursor(self._run())

    async def __aenter__(self) -> _InlineCursor:
        return _InlineCursor(self._run())

    async def __aexit__(self, *exc: object) -> None:
        return None


class _InlineConnection:
    """The part of aiosqlite's connection the session storage uses, run inline (no thread), so
    that a :class:`VirtualLoop` never waits on a thread while its clock could jump."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def execute(self, sql: str, args: Iterable[Any] = ()) -> _InlineStatement:
        return _InlineStatement(lambda: self._db.execute(sql, tuple(args)))

    def executemany(self, sql: str, rows: Iterable[Any]) -> _InlineStatement:
        return _InlineStatement(lambda: self._db.executemany(sql, rows))

    async def executescript(self, script: str) -> None:
        self._db.executescript(script)

    async def close(self) -> None:
        self._db.close()


async def inline_connect(path: Path, isolation_level: None = None) -> _InlineConnection:
    del path  # in memory: a fake cluster's store lives as long as its test
    return _InlineConnection(sqlite3.connect(":memory:", isolation_level=isolation_level))



__all__ = ["inline_connect"]
