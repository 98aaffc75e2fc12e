"""The A2A task store on reach's session store: owner isolation, every list filter, paging, the
SDK's own store as the reference for the order and the page tokens, group commits, and tasks that
outlive a crash of the store (on the fake cluster, and on the SQLite file itself)."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from a2a.auth.user import User
from a2a.server.context import ServerCallContext
from a2a.server.tasks import InMemoryTaskStore
from a2a.server.tasks.task_store import TaskStore
from a2a.types.a2a_pb2 import (
    Artifact,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    Part,
    Role,
    Task,
    TaskState,
    TaskStatus,
)
from a2a.utils.errors import InvalidParamsError
from a2a.utils.task import ListTasksCursor, encode_list_tasks_cursor, encode_page_token

import reach.testing.cluster
from actors.session_storage import SqliteStorage, WriteBatch
from reach import clock
from reach._runtime.inline_sqlite import _InlineConnection
from reach._runtime.names import STORE_NAME
from reach.a2a.server.task_store import ReachTaskStore
from reach.errors import AgentUnavailable, AuthError, ProtocolError
from reach.ports.a2a_tasks import A2ATaskPort
from reach.testing import FakeCluster, run

WORKING = TaskState.TASK_STATE_WORKING
COMPLETED = TaskState.TASK_STATE_COMPLETED
SUBMITTED = TaskState.TASK_STATE_SUBMITTED
T0 = 1_760_000_000 * 10**9  # a status timestamp, in epoch ns
UNICODE = "任务 😀👍🏽 \"quoted\" \u2028 e\u0301"


class Person(User):
    def __init__(self, name: str) -> None:
        self._name = name

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def user_name(self) -> str:
        return self._name


def as_(name: str) -> ServerCallContext:
    return ServerCallContext(user=Person(name))


ALICE, BOB = as_("alice"), as_("bob")


def a_task(task_id: str, *, context_id: str = "c1", state: int = WORKING, at: int | None = T0,
           history: int = 0, artifacts: int = 0) -> Task:
    """A task in ``state`` at status timestamp ``at`` (epoch ns; None: no timestamp)."""
    status = TaskStatus(state=state)  # type: ignore[arg-type]
    if at is not None:
        status.timestamp.FromNanoseconds(at)
    task = Task(id=task_id, context_id=context_id, status=status)
    for n in range(history):
        task.history.append(Message(message_id=f"{task_id}-m{n}", role=Role.ROLE_USER,
                                    parts=[Part(text=f"{UNICODE} {n}")]))
    for n in range(artifacts):
        task.artifacts.append(Artifact(artifact_id=f"{task_id}-a{n}", parts=[Part(text="out")]))
    return task


async def save_all(store: TaskStore, tasks: list[tuple[Task, ServerCallContext]]) -> None:
    for task, ctx in tasks:
        await store.save(task, ctx)


async def ids(store: TaskStore, ctx: ServerCallContext = ALICE, *, since: int | None = None,
              **params: Any) -> list[str]:
    """The IDs listed for ``params`` (and tasks updated ``since`` a timestamp, in epoch ns)."""
    request = ListTasksRequest(**params)
    if since is not None:
        request.status_timestamp_after.FromNanoseconds(since)
    return [t.id for t in (await store.list(request, ctx)).tasks]


async def every_page(store: TaskStore, request: ListTasksRequest,
                     ctx: ServerCallContext) -> list[ListTasksResponse]:
    pages = [await store.list(request, ctx)]
    while pages[-1].next_page_token:
        follow = ListTasksRequest()
        follow.CopyFrom(request)
        follow.page_token = pages[-1].next_page_token
        pages.append(await store.list(follow, ctx))
        assert len(pages) < 100, "the page tokens never end"
    return pages


def on_fake(scenario: Callable[[FakeCluster, ReachTaskStore], Awaitable[None]]) -> None:
    """Runs ``scenario`` with a ReachTaskStore on a fake cluster's session store."""
    async def main(fake: FakeCluster) -> None:
        await scenario(fake, ReachTaskStore(fake.a2a_tasks()))

    run(main)


# --- save, get, delete, owners ------------------------------------------------------------------


def test_a_saved_task_comes_back_whole_to_its_owner() -> None:
    async def scenario(fake: FakeCluster, store: ReachTaskStore) -> None:
        task = a_task("t1", history=3, artifacts=2)
        task.metadata.update({"note": UNICODE, "n": 3})
        await store.save(task, ALICE)
        assert await store.get("t1", ALICE) == task
        assert await store.get("t2", ALICE) is None

    on_fake(scenario)


def test_saving_a_task_again_replaces_it_state_and_timestamp_included() -> None:
    async def scenario(fake: FakeCluster, store: ReachTaskStore) -> None:
        await store.save(a_task("t1", state=WORKING, at=T0), ALICE)
        done = a_task("t1", state=COMPLETED, at=T0 + 5, artifacts=1)
        await store.save(done, ALICE)
        assert await store.get("t1", ALICE) == done
        assert await ids(store, status=COMPLETED) == ["t1"]
        assert await ids(store, status=WORKING) == []
        assert await ids(store, since=T0 + 5) == ["t1"]

    on_fake(scenario)


def test_another_owner_neither_gets_lists_nor_deletes_a_task() -> None:
    async def scenario(fake: FakeCluster, store: ReachTaskStore) -> None:
        await store.save(a_task("t1"), ALICE)
        assert await store.get("t1", BOB) is None
        assert (await store.list(ListTasksRequest(), BOB)).total_size == 0
        await store.delete("t1", BOB)
        assert await store.get("t1", ALICE) == a_task("t1")

    on_fake(scenario)


def test_another_owner_cannot_take_over_a_task_id() -> None:
    async def scenario(fake: FakeCluster, store: ReachTaskStore) -> None:
        await store.save(a_task("t1", state=WORKING), ALICE)
        with pytest.raises(AuthError) as caught:
            await store.save(a_task("t1", state=COMPLETED), BOB)
        assert caught.value.details["task_id"] == "t1"
        assert await store.get("t1", ALICE) == a_task("t1", state=WORKING)
        assert await store.get("t1", BOB) is None

    on_fake(scenario)


def test_a_deleted_task_is_gone_and_deleting_it_again_is_harmless() -> None:
    async def scenario(fake: FakeCluster, store: ReachTaskStore) -> None:
        await save_all(store, [(a_task("t1"), ALICE), (a_task("t2"), ALICE)])
        await store.delete("t1", ALICE)
        assert await store.get("t1", ALICE) is None
        await store.delete("t1", ALICE)
        assert await ids(store) == ["t2"]
        assert await fake.a2a_tasks().a2a_delete("t2", "alice")
        assert not await fake.a2a_tasks().a2a_delete("t2", "alice")

    on_fake(scenario)


def test_the_owner_comes_from_the_owner_resolver_given() -> None:
    async def scenario(fake: FakeCluster, store: ReachTaskStore) -> None:
        by_tenant = ReachTaskStore(fake.a2a_tasks(), lambda ctx: f"tenant:{ctx.tenant}")
        await by_tenant.save(a_task("t1"), ServerCallContext(tenant="acme", user=Person("x")))
        assert await by_tenant.get("t1", ServerCallContext(tenant="acme")) == a_task("t1")
        stored = await fake.a2a_tasks().a2a_get("t1", "tenant:acme")
        assert stored == a_task("t1").SerializeToString()
        assert await store.get("t1", as_("x")) is None

    on_fake(scenario)


def test_two_replicas_share_their_tasks() -> None:
    async def scenario(fake: FakeCluster, first: ReachTaskStore) -> None:
        second = ReachTaskStore(fake.a2a_tasks())
        await first.save(a_task("t1", state=WORKING), ALICE)
        assert await second.get("t1", ALICE) == a_task("t1", state=WORKING)
        await second.save(a_task("t1", state=COMPLETED), ALICE)
        assert await ids(first, status=COMPLETED) == ["t1"]

    on_fake(scenario)


# --- list: order, filters, pages ----------------------------------------------------------------

DATASET = [  # ties on the timestamp, tasks without one, two owners, two contexts, three states
    (a_task("a1", context_id="c1", state=WORKING, at=T0 + 30), ALICE),
    (a_task("a2", context_id="c1", state=COMPLETED, at=T0 + 10), ALICE),
    (a_task("a3", context_id="c2", state=WORKING, at=T0 + 10), ALICE),
    (a_task("a4", context_id="c2", state=SUBMITTED, at=None), ALICE),
    (a_task("a5", context_id="c1", state=WORKING, at=None), ALICE),
    (a_task("a6", context_id="c1", state=WORKING, at=T0 + 20), ALICE),
    (a_task("a7", context_id="c2", state=COMPLETED, at=T0), ALICE),
    (a_task("a8", context_id="c1", state=WORKING, at=T0 + 10), ALICE),
    (a_task("b1", context_id="c1", state=WORKING, at=T0 + 40), BOB),
    (a_task("b2", context_id="c1", state=WORKING, at=None), BOB),
]


def requests() -> Iterator[ListTasksRequest]:
    for context_id in ("", "c1", "c2", "none"):
        for status in (0, WORKING, COMPLETED):
            for since in (None, T0 + 10):
                for size in (None, 1, 3, 100):
                    request = ListTasksRequest(context_id=context_id, status=status,  # type: ignore[arg-type]
                                               include_artifacts=True)
                    if since is not None:
                        request.status_timestamp_after.FromNanoseconds(since)
                    if size is not None:
                        request.page_size = size
                    yield request


def test_every_page_of_every_filter_is_the_sdks_in_memory_stores_own() -> None:
    async def scenario(fake: FakeCluster, store: ReachTaskStore) -> None:
        reference = InMemoryTaskStore()
        await save_all(store, DATASET)
        await save_all(reference, DATASET)
        walked = 0
        for request in requests():
            for ctx in (ALICE, BOB):
                ours = await every_page(store, request, ctx)
                assert ours == await every_page(reference, request, ctx), request
                walked += sum(len(page.tasks) for page in ours)
        assert walked > 100  # the matrix listed tasks, not just empty pages

    on_fake(scenario)


def test_tasks_are_listed_newest_first_ties_by_id_and_those_without_timestamp_last() -> None:
    async def scenario(fake: FakeCluster, store: ReachTaskStore) -> None:
        await save_all(store, DATASET)
        assert await ids(store) == ["a1", "a6", "a8", "a3", "a2", "a7", "a5", "a4"]

    on_fake(scenario)


def test_each_filter_alone_and_all_together() -> None:
    async def scenario(fake: FakeCluster, store: ReachTaskStore) -> None:
        await save_all(store, DATASET)
        assert await ids(store, context_id="c2") == ["a3", "a7", "a4"]
        assert await ids(store, status=COMPLETED) == ["a2", "a7"]
        assert await ids(store, since=T0 + 10) == [
            "a1", "a6", "a8", "a3", "a2"]  # at or after it; never a task without a timestamp
        assert await ids(store, context_id="c1", status=WORKING,
                         since=T0 + 11) == ["a1", "a6"]
        assert await ids(store, context_id="c3") == []

    on_fake(scenario)


def test_pages_walk_every_task_once_with_the_total_on_each_page() -> None:
    async def scenario(fake: FakeCluster, store: ReachTaskStore) -> None:
        await save_all(store, DATASET)
        pages = await every_page(store, ListTasksRequest(page_size=3), ALICE)
        assert [[t.id for t in p.tasks] for p in pages] == [
            ["a1", "a6", "a8"], ["a3", "a2", "a7"], ["a5", "a4"]]
        assert {(p.total_size, p.page_size) for p in pages} == {(8, 3)}
        assert pages[0].next_page_token == encode_list_tasks_cursor(
            ListTasksCursor(timestamp_ns=T0 + 10, task_id="a8"))
        assert pages[-1].next_page_token == ""

    on_fake(scenario)


def test_a_full_last_page_has_no_next_page_token() -> None:
    async def scenario(fake: FakeCluster, store: ReachTaskStore) -> None:
        await save_all(store, DATASET)
        pages = await every_page(store, ListTasksRequest(page_size=4), ALICE)
        assert [len(p.tasks) for p in pages] == [4, 4]

    on_fake(scenario)


def test_a_page_token_stays_valid_when_its_last_task_is_deleted() -> None:
    async def scenario(fake: FakeCluster, store: ReachTaskStore) -> None:
        await save_all(store, DATASET)
        first = await store.list(ListTasksRequest(page_size=2), ALICE)
        await store.delete("a6", ALICE)  # the page's last task
        assert await ids(store, page_size=2, page_token=first.next_page_token) == ["a8", "a3"]

    on_fake(scenario)


def test_without_a_page_size_a_page_holds_fifty_tasks() -> None:
    async def scenario(fake: FakeCluster, store: ReachTaskStore) -> None:
        await save_all(store, [(a_task(f"t{n:02}", at=T0 + n), ALICE) for n in range(51)])
        page = await store.list(ListTasksRequest(), ALICE)
        assert (len(page.tasks), page.page_size, page.total_size) == (50, 50, 51)
        assert await ids(store, page_token=page.next_page_token) == ["t00"]

    on_fake(scenario)


def test_an_older_task_id_page_token_starts_the_page_at_that_task() -> None:
    async def scenario(fake: FakeCluster, store: ReachTaskStore) -> None:
        await save_all(store, DATASET)
        assert await ids(store, page_size=2, page_token=encode_page_token("a8")) == ["a8", "a3"]
        assert await ids(store, page_token=encode_page_token("a5")) == ["a5", "a4"]

    on_fake(scenario)


@pytest.mark.parametrize("params", [
    {"page_size": 0}, {"page_size": 101}, {"history_length": -1},
    {"page_token": "not base64 at all!"},
    {"page_token": encode_page_token("no-such-task")},
    {"page_token": encode_page_token("b1")},  # bob's
    {"page_token": encode_list_tasks_cursor(ListTasksCursor(timestamp_ns=1 << 70, task_id="x"))},
])
def test_a_bad_page_size_history_length_or_page_token_is_invalid_params(
    params: dict[str, Any],
) -> None:
    async def scenario(fake: FakeCluster, store: ReachTaskStore) -> None:
        await save_all(store, DATASET)
        with pytest.raises(InvalidParamsError):
            await store.list(ListTasksRequest(**params), ALICE)

    on_fake(scenario)


def test_a_listed_task_shows_artifacts_only_if_asked_and_its_last_history_length_messages(
) -> None:
    async def scenario(fake: FakeCluster, store: ReachTaskStore) -> None:
        full = a_task("t1", history=4, artifacts=2)
        await store.save(full, ALICE)

        async def shown(**params: Any) -> Task:
            tasks = (await store.list(ListTasksRequest(**params), ALICE)).tasks
            assert len(tasks) == 1
            task: Task = tasks[0]
            return task

        assert (await shown(include_artifacts=True)) == full
        bare = await shown()
        assert (len(bare.artifacts), list(bare.history)) == (0, list(full.history))
        assert list((await shown(history_length=2)).history) == list(full.history[2:])
        assert len((await shown(history_length=0)).history) == 0
        assert await store.get("t1", ALICE) == full  # get shows it whole, as the SDK's stores

    on_fake(scenario)


def test_the_store_refuses_a_page_size_below_one() -> None:
    async def scenario(fake: FakeCluster, store: ReachTaskStore) -> None:
        with pytest.raises(ProtocolError):
            await fake.a2a_tasks().a2a_list("alice", page_size=0)

    on_fake(scenario)


# --- group commits, failures, restarts ----------------------------------------------------------


def test_concurrent_saves_share_group_commits() -> None:
    async def scenario(fake: FakeCluster, store: ReachTaskStore) -> None:
        before = fake.process(STORE_NAME).writer.commits
        await asyncio.gather(*(store.save(a_task(f"t{n}"), ALICE) for n in range(20)))
        assert fake.process(STORE_NAME).writer.commits - before < 5
        assert (await store.list(ListTasksRequest(), ALICE)).total_size == 20

    on_fake(scenario)


def test_a_save_that_cannot_be_written_fails_alone() -> None:
    async def scenario(fake: FakeCluster, store: ReachTaskStore) -> None:
        bad = fake.a2a_tasks().a2a_save("bad", "alice", context_id="c1", state=WORKING,
                                        updated=None, doc=None)  # type: ignore[arg-type]
        good = [store.save(a_task(f"t{n}"), ALICE) for n in range(3)]
        results = await asyncio.gather(bad, *good, return_exceptions=True)
        assert isinstance(results[0], sqlite3.IntegrityError)
        assert results[1:] == [None, None, None]
        assert await ids(store) == ["t2", "t1", "t0"]

    on_fake(scenario)


class FlakyPort:
    """A store port whose first ``failures`` calls fail as a store restart would fail them."""

    def __init__(self, port: A2ATaskPort, failures: int) -> None:
        self.port = port
        self.failures = failures
        self.calls = 0

    def __getattr__(self, method: str) -> Callable[..., Awaitable[Any]]:
        async def call(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            if self.calls <= self.failures:
                raise AgentUnavailable(f"{STORE_NAME} is dead or unreachable")
            return await getattr(self.port, method)(*args, **kwargs)

        return call


def test_a_call_cut_short_by_a_store_restart_is_made_again() -> None:
    async def scenario(fake: FakeCluster, store: ReachTaskStore) -> None:
        flaky = FlakyPort(fake.a2a_tasks(), failures=3)
        replica = ReachTaskStore(flaky, retry_s=5.0)  # type: ignore[arg-type]
        await replica.save(a_task("t1"), ALICE)
        assert flaky.calls == 4
        flaky.failures = 6
        assert await replica.get("t1", ALICE) == a_task("t1")
        assert await ids(replica) == ["t1"]

    on_fake(scenario)


def test_a_store_unavailable_for_longer_than_retry_s_is_agent_unavailable() -> None:
    async def scenario(fake: FakeCluster, store: ReachTaskStore) -> None:
        replica = ReachTaskStore(FlakyPort(fake.a2a_tasks(), failures=10**6),  # type: ignore[arg-type]
                                 retry_s=2.0)
        start = clock.monotonic()
        with pytest.raises(AgentUnavailable):
            await replica.get("t1", ALICE)
        assert 1.5 <= clock.monotonic() - start <= 2.0  # virtual time: it waited, then gave up

    on_fake(scenario)


@pytest.fixture
def durable_fake_store(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake cluster's store on a real SQLite file (still on the loop's thread), which a
    crash leaves behind as a killed process leaves its file: the fake's own is in memory."""
    async def connect(path: Path, isolation_level: None = None) -> _InlineConnection:
        return _InlineConnection(sqlite3.connect(path, isolation_level=isolation_level))

    monkeypatch.setattr(reach.testing.cluster, "inline_connect", connect)


@pytest.mark.usefixtures("durable_fake_store")
def test_tasks_survive_a_crash_of_the_store_and_calls_made_meanwhile_wait_for_it() -> None:
    async def scenario(fake: FakeCluster, store: ReachTaskStore) -> None:
        await save_all(store, DATASET)
        old = fake.process(STORE_NAME)
        fake.crash(STORE_NAME)
        try:
            replica = ReachTaskStore(fake.a2a_tasks())
            await replica.save(a_task("late", at=T0 + 50), ALICE)  # waits for the restart
            assert fake.process(STORE_NAME) is not old
            assert await replica.get("a4", ALICE) == a_task("a4", context_id="c2",
                                                            state=SUBMITTED, at=None)
            assert await ids(replica) == ["late", "a1", "a6", "a8", "a3", "a2", "a7", "a5", "a4"]
            assert await ids(replica, BOB) == ["b1", "b2"]
            assert await fake.process(STORE_NAME).integrity() == "ok"
        finally:
            await old.storage.close()

    on_fake(scenario)


# --- the SQLite layer -----------------------------------------------------------------------------


def row(task_id: str, owner: str = "alice", at: int | None = T0,
        ) -> tuple[str, str, str, int, int | None, bytes]:
    """An a2a_saves row of a task."""
    return (task_id, "c1", owner, WORKING, at, a_task(task_id, at=at).SerializeToString())


@contextlib.asynccontextmanager
async def opened(path: Path) -> Any:
    storage = SqliteStorage(path)
    await storage.open()
    try:
        yield storage
    finally:
        await storage.close()


async def test_a_batch_reports_which_saves_and_deletes_took_effect(tmp_path: Path) -> None:
    async with opened(tmp_path / "sessions.db") as storage:
        written = await storage.write(WriteBatch(
            a2a_saves=[row("t1"), row("t1", "bob"), row("t2")],
            a2a_deletes=[("t2", "bob"), ("t2", "alice"), ("t3", "alice")]))
        assert (written.a2a_saved, written.a2a_deleted) == ([True, False, True],
                                                            [False, True, False])
        assert await storage.a2a_task("t1", "alice") == row("t1")[5]
        assert await storage.a2a_task("t1", "bob") is None
        assert await storage.a2a_task("t2", "alice") is None


async def test_a2a_tasks_survive_close_and_reopen(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    async with opened(path) as storage:
        await storage.write(WriteBatch(a2a_saves=[row("t1"), row("t2", at=None)]))
    async with opened(path) as storage:
        page, total = await storage.a2a_tasks("alice", context_id="", state=0, updated_after=None,
                                              limit=10, after=None, inclusive=False)
        assert ([(r[0], r[1]) for r in page], total) == ([("t1", T0), ("t2", None)], 2)


async def test_a_database_made_before_a2a_tasks_existed_opens_and_gains_them(
    tmp_path: Path,
) -> None:
    path = tmp_path / "sessions.db"
    async with opened(path) as storage:
        await storage.write(WriteBatch(sessions=[("s1", "alice", "bob", "{}", 1.0)]))
    with contextlib.closing(sqlite3.connect(path)) as db:  # as an older version left it
        db.execute("DROP TABLE a2a_tasks")  # its indexes go with it
        db.commit()
    async with opened(path) as storage:
        assert (await storage.session("s1") or {}).get("initiator") == "alice"
        await storage.write(WriteBatch(a2a_saves=[row("t1")]))
        assert await storage.a2a_task("t1", "alice") == row("t1")[5]
        assert await storage.integrity() == "ok"
    with contextlib.closing(sqlite3.connect(path)) as db:
        names = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert {"a2a_tasks_by_owner", "a2a_tasks_by_context"} <= names


# --- hostile bounds and what a task may hold ------------------------------------------------


def test_an_unknown_status_filter_is_invalid_params() -> None:
    async def scenario(fake: FakeCluster, store: ReachTaskStore) -> None:
        await store.save(a_task("t1"), ALICE)
        with pytest.raises(InvalidParamsError, match="status 99"):
            await store.list(ListTasksRequest(status=99), ALICE)  # type: ignore[arg-type]

    on_fake(scenario)


def test_a_timestamp_bound_beyond_sqlites_integers_means_none_or_every_task() -> None:
    async def scenario(fake: FakeCluster, store: ReachTaskStore) -> None:
        await save_all(store, [(a_task("t1"), ALICE), (a_task("t2", at=T0 + 1), ALICE)])
        year_3000 = 32_503_680_000 * 10**9  # past 2262, the last second of int64 nanoseconds
        year_1000 = -30_610_224_000 * 10**9  # before 1677
        assert await ids(store, since=year_3000) == []
        assert await ids(store, since=year_1000) == ["t2", "t1"]

    on_fake(scenario)


def test_a_task_holding_nan_is_saved_and_read_with_it_made_null() -> None:
    async def scenario(fake: FakeCluster, store: ReachTaskStore) -> None:
        task = a_task("t1")
        task.metadata.update({"ok": 1.5, "bad": 0.0})
        task.metadata["bad"] = float("inf")
        await store.save(task, ALICE)
        assert task.metadata["bad"] is None  # the task in hand is what was stored
        got = await store.get("t1", ALICE)
        assert got is not None
        assert (got.metadata["ok"], got.metadata["bad"]) == (1.5, None)
        clean = a_task("t2", history=1)
        await store.save(clean, ALICE)
        assert await store.get("t2", ALICE) == clean

    on_fake(scenario)
