"""The session store's single writer: group commits of staged writes.

A write is a *stage*: a function that adds its rows to the :class:`WriteBatch` of the next
commit and returns its caller's result (or a function of what the commit decided, read from the
batch's :class:`Written`). Every write that arrives while a commit is in progress joins the next
one, and each caller is answered only once its write is committed. A batch that fails to commit
is committed again one write at a time, so that one bad write fails alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from actors.session_storage import SessionStorage, WriteBatch, Written
from reach.errors import ProtocolError, ReachError

#: A write: adds its rows to a batch; returns its result, or a callable that reads it from the
#: commit's :class:`Written`.
Stage = Callable[[WriteBatch], Any]


class StaleStage(Exception):
    """A write was staged against in-memory state (a session's counters, the audit chain's tail)
    that a failed commit invalidated: its caller reloads that state and stages it again."""


class GroupCommit:
    """Commits staged writes to the storage, as many at once as arrive together.

    Args:
        storage: The database written to (opened on first use).
        group_commit: Commit writes that arrive together at once (else one commit per write).
        on_failure: Called when a commit fails, before any write is staged again: the writer's
            callers drop the in-memory state the failed writes had advanced.
    """

    def __init__(self, storage: SessionStorage, *, group_commit: bool = True,
                 on_failure: Callable[[], None] = lambda: None) -> None:
        self.storage = storage
        self.group_commit = group_commit
        self.on_failure = on_failure
        self.commits = 0
        self.written = 0
        self._queue: list[tuple[Stage, asyncio.Future[Any]]] = []
        self._solo: list[tuple[Stage, asyncio.Future[Any]]] = []
        self._writer: asyncio.Task[None] | None = None
        self._opened: asyncio.Task[None] | None = None

    async def ready(self) -> None:
        """Returns once the storage is open (opening it on the first call)."""
        if self._opened is None:
            self._opened = asyncio.get_running_loop().create_task(self.storage.open())
        await asyncio.shield(self._opened)

    async def commit(self, stage: Stage) -> Any:
        """Stages a write into the next commit; its result, once committed.

        Raises:
            ReachError: what the stage raised (ProtocolError ``store_encode`` for a row the
                storage cannot encode).
            StaleStage: the stage found its state invalidated by a failed commit.
            Exception: the commit of this write failed.
        """
        await self.ready()
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.append((stage, future))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(self._write_loop())
        return await future

    async def _write_loop(self) -> None:
        while self._queue or self._solo:
            items = self._next_items()
            batch = WriteBatch()
            staged: list[Any] = []
            for stage, _ in items:
                try:
                    staged.append(stage(batch))
                except (ReachError, StaleStage) as exc:
                    staged.append(exc)
                except Exception as exc:  # e.g. a payload value msgpack cannot encode
                    staged.append(ProtocolError(f"cannot store this write: {exc}",
                                                details={"rule": "store_encode"}))
            try:
                written = await self.storage.write(batch)
            except Exception as exc:
                self.on_failure()
                if len(items) > 1:
                    # One bad write must not fail the others: commit them one by one instead.
                    self._solo.extend(items)
                else:
                    _settle(items, [exc], Written())
                continue
            self.commits += 1
            self.written += len(batch)
            _settle(items, staged, written)

    def _next_items(self) -> list[tuple[Stage, asyncio.Future[Any]]]:
        if self._solo:
            items, self._solo = self._solo[:1], self._solo[1:]
        elif self.group_commit:
            items, self._queue = self._queue, []
        else:
            items, self._queue = self._queue[:1], self._queue[1:]
        return items


def _settle(items: list[tuple[Stage, asyncio.Future[Any]]], staged: list[Any],
            written: Written) -> None:
    """Answers each caller of a commit: its result (read from ``written`` by a stage that
    returned a callable), or its error."""
    for (_, future), result in zip(items, staged, strict=True):
        if future.done():
            continue
        if isinstance(result, BaseException):
            future.set_exception(result)
        else:
            future.set_result(result(written) if callable(result) else result)
