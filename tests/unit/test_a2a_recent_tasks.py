"""The A2A tasks of every caller, most recently updated first, as the observer reads them: the
session store's listing across owners (on the fake cluster, and on the SQLite file itself) and
a stored task summarised (its state's name, its caller, the target and trace its metadata
names)."""

from __future__ import annotations

from pathlib import Path

import pytest
from a2a.types.a2a_pb2 import Task, TaskState, TaskStatus

from actors.session_storage import SqliteStorage, WriteBatch
from reach.a2a.server.task_store import summary
from reach.errors import ProtocolError
from reach.testing import FakeCluster, run

T0 = 1_760_000_000 * 10**9  # a status timestamp, in epoch ns


def doc(task_id: str, state: int, **reach: str) -> bytes:
    task = Task(id=task_id, context_id="c1", status=TaskStatus(state=state))  # type: ignore[arg-type]
    if reach:
        task.metadata.update({"reach": reach})
    return task.SerializeToString()


def test_the_newest_tasks_of_every_owner_come_first_those_without_a_timestamp_last() -> None:
    async def main(fake: FakeCluster) -> None:
        port = fake.a2a_tasks()
        done = TaskState.TASK_STATE_COMPLETED
        await port.a2a_save_many([
            ("t-old", "alice", "c1", done, T0, doc("t-old", done)),
            ("t-none", "bob", "c2", done, None, doc("t-none", done)),
            ("t-new", "bob", "c3", done, T0 + 5, doc("t-new", done)),
            ("t-mid", "carol", "c1", done, T0 + 2, doc("t-mid", done))])
        rows = await port.a2a_recent(10)
        assert [(r[0], r[1], r[2], r[4]) for r in rows] == [
            ("t-new", "bob", "c3", T0 + 5), ("t-mid", "carol", "c1", T0 + 2),
            ("t-old", "alice", "c1", T0), ("t-none", "bob", "c2", None)]
        assert [r[0] for r in await port.a2a_recent(2)] == ["t-new", "t-mid"]
        with pytest.raises(ProtocolError, match="limit must be at least 1"):
            await port.a2a_recent(0)

    run(main)


def test_the_sqlite_listing_keeps_its_order_in_a_database_made_before_its_index(
        tmp_path: Path) -> None:
    async def main(_fake: FakeCluster) -> None:
        storage = SqliteStorage(tmp_path / "s.db")
        await storage.open()
        await storage.write(WriteBatch(a2a_saves=[
            ("a", "c1", "alice", 2, T0, b"x"), ("b", "c1", "bob", 3, T0 + 1, b"y")]))
        await storage.close()
        again = SqliteStorage(tmp_path / "s.db")  # the schema's script runs again on open
        await again.open()
        try:
            assert [r[0] for r in await again.a2a_recent(5)] == ["b", "a"]
            assert await again.a2a_recent(5) == [("b", "c1", "bob", 3, T0 + 1, b"y"),
                                                 ("a", "c1", "alice", 2, T0, b"x")]
        finally:
            await again.close()

    run(main)


def test_a_summary_names_the_state_the_caller_the_target_and_the_trace() -> None:
    working = TaskState.TASK_STATE_WORKING
    row = ("t1", "gateway:partner", "c1", working, T0,
           doc("t1", working, target="orders-1", trace_id="ab" * 16, replica="inbox-1"))
    shown = summary(row)
    assert (shown.state, shown.owner, shown.target, shown.trace_id) == (
        "working", "gateway:partner", "orders-1", "ab" * 16)
    assert shown.updated == T0 / 1e9


def test_a_task_that_does_not_decode_still_shows_its_columns() -> None:
    shown = summary(("t2", "bob", "c9", 99, None, b"\xff not a task"))
    assert (shown.task_id, shown.owner, shown.context_id, shown.state) == (
        "t2", "bob", "c9", "unspecified")
    assert (shown.updated, shown.target, shown.trace_id) == (None, "", "")
