"""The SQLite session storage, on a real file: atomic batches, reads, folds, fenced replies,
durability."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from actors.session_storage import SqliteStorage, WriteBatch, Written, pack
from reach.errors import ReachError

UNICODE = "会话 😀👍🏽 back\\slash \\n \"quoted\" \u2028 e\u0301"
TERMS = {"message_format": "msgpack", "max_message_bytes": 1024, "timeout_ms": 5000,
         "streaming": False}


def session_row(session_id: str, initiator: str = "alice", responder: str = "bob",
                terms: dict[str, Any] | None = None, created: float = 1000.0,
                ) -> tuple[str, str, str, str, float]:
    return (session_id, initiator, responder, json.dumps(terms or TERMS), created)


def message_row(session_id: str, seq: int, payload: Any = None, *, msg_id: str | None = None,
                sender: str = "alice", kind: str = "message", schema: str = "chat@1.0",
                at: float = 1000.0) -> tuple[str, int, str, str, str, bytes, str, float]:
    """A messages tuple in WriteBatch field order."""
    body = {"text": f"message {seq}"} if payload is None else payload
    return (session_id, seq, msg_id or f"{session_id}-m{seq}", sender, kind, pack(body), schema,
            at)


def pending_row(request_id: str, *, agent_id: str = "alice", receiver: str = "bob",
                session_id: str = "s1", envelope: dict[str, Any] | None = None,
                deadline: float | None = None, updated: float = 1000.0,
                ) -> tuple[str, str, str, str, bytes, float | None, float]:
    body = envelope or {"id": request_id, "payload": {"text": "do it"}}
    return (request_id, agent_id, receiver, session_id, pack(body), deadline, updated)


def commit_row(request_id: str, token: int, payload: Any = None, *, agent_id: str = "bob",
               schema: str = "answer@1.0", at: float = 1000.0,
               ) -> tuple[str, int, str, bytes, str, float]:
    """A commits tuple in WriteBatch field order."""
    return (request_id, token, agent_id, pack({} if payload is None else payload), schema, at)


async def claim(storage: SqliteStorage, request_id: str, agent_id: str = "bob") -> int:
    (token,) = (await storage.write(WriteBatch(claims=[(request_id, agent_id, 1000.0)]))).tokens
    return token


async def commit(storage: SqliteStorage, request_id: str, token: int, payload: Any = None,
                 **kw: Any) -> bool:
    written = await storage.write(WriteBatch(commits=[commit_row(request_id, token, payload,
                                                                 **kw)]))
    (committed,) = written.committed
    return committed


async def record(storage: SqliteStorage, request_id: str, payload: Any, **kw: Any) -> None:
    """Claims a request and commits its reply (two batches: a batch commits before it claims)."""
    assert await commit(storage, request_id, await claim(storage, request_id), payload, **kw)


def session_with(session_id: str, count: int) -> WriteBatch:
    """A batch opening a session with messages 1..count."""
    return WriteBatch(sessions=[session_row(session_id)],
                      messages=[message_row(session_id, seq) for seq in range(1, count + 1)],
                      session_seq={session_id: count + 1})


async def opened(path: Path, synchronous: str = "FULL") -> SqliteStorage:
    storage = SqliteStorage(path, synchronous)
    await storage.open()
    return storage


@pytest.fixture
async def storage(tmp_path: Path) -> AsyncIterator[SqliteStorage]:
    storage = await opened(tmp_path / "sessions.db")
    yield storage
    await storage.close()


async def pragma(storage: SqliteStorage, name: str) -> Any:
    async with storage.db.execute(f"PRAGMA {name}") as cur:
        row = await cur.fetchone()
    assert row is not None
    return row[0]


async def seqs(storage: SqliteStorage, session_id: str) -> list[int]:
    return [m["seq"] for m in await storage.messages(session_id, 0, None)]


# --- open, settings -----------------------------------------------------------------------------


async def test_open_creates_the_file_and_its_folders_in_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "deeper" / "sessions.db"
    storage = await opened(path)
    try:
        assert path.is_file()
        assert await pragma(storage, "journal_mode") == "wal"
    finally:
        await storage.close()


@pytest.mark.parametrize(("synchronous", "level"), [("NORMAL", 1), ("FULL", 2)],
                         ids=["normal", "full"])
async def test_storage_works_with_synchronous_normal_and_full(
    tmp_path: Path, synchronous: str, level: int,
) -> None:
    storage = await opened(tmp_path / "sessions.db", synchronous)
    try:
        assert await pragma(storage, "synchronous") == level
        await storage.write(session_with("s1", 3))
        assert await seqs(storage, "s1") == [1, 2, 3]
        assert await storage.integrity() == "ok"
    finally:
        await storage.close()


async def test_integrity_of_a_fresh_and_of_a_written_database_is_ok(
    storage: SqliteStorage,
) -> None:
    assert await storage.integrity() == "ok"
    await storage.write(session_with("s1", 10))
    assert await storage.integrity() == "ok"


# --- a whole batch ------------------------------------------------------------------------------


async def test_a_batch_of_every_kind_is_written_and_read_back(storage: SqliteStorage) -> None:
    await storage.write(WriteBatch(pending=[pending_row("r-answered"), pending_row("r-left")],
                                   claims=[("r-answered", "bob", 2500.0)]))
    written = await storage.write(WriteBatch(
        sessions=[session_row("s1", created=1234.5)],
        messages=[message_row("s1", 1, {"text": UNICODE}, sender="alice", kind="request",
                              schema="chat@1.2", at=2000.0),
                  message_row("s1", 2, {"n": 2}, msg_id="reply-2", sender="bob")],
        session_seq={"s1": 3},
        pending=[pending_row("r-new", deadline=99.5)],
        resolutions=[("r-answered", "answered", 3000.0)],
        commits=[commit_row("r-answered", 1, {"text": UNICODE}, schema="chat@1.0", at=3000.0)],
        claims=[("r-new", "carol", 3000.0)],
    ))

    assert written == Written(resolved=[True], tokens=[1], committed=[True])
    assert await storage.session("s1") == {
        "session_id": "s1", "initiator": "alice", "responder": "bob", "terms": TERMS,
        "summary": "", "folded_upto": 0, "next_seq": 3, "created": 1234.5}
    assert await storage.messages("s1", 0, None) == [
        {"seq": 1, "msg_id": "s1-m1", "sender": "alice", "kind": "request",
         "payload": {"text": UNICODE}, "schema": "chat@1.2", "at": 2000.0},
        {"seq": 2, "msg_id": "reply-2", "sender": "bob", "kind": "message",
         "payload": {"n": 2}, "schema": "chat@1.0", "at": 1000.0},
    ]
    assert await storage.pending_status("r-answered") == "answered"
    assert await storage.pending_status("r-left") == "open"
    assert await storage.pending_status("r-new") == "open"
    assert await storage.reply_for("r-answered") == {
        "agent_id": "bob", "payload": {"text": UNICODE}, "schema": "chat@1.0"}


async def test_an_empty_batch_writes_nothing_and_reports_no_resolutions(
    storage: SqliteStorage,
) -> None:
    assert len(WriteBatch()) == 0
    assert await storage.write(WriteBatch()) == Written()
    assert await storage.session("s1") is None


def test_a_batch_counts_its_rows_but_not_its_sequence_updates() -> None:
    batch = session_with("s1", 3)
    batch.pending.append(pending_row("r1"))
    batch.resolutions.append(("r1", "answered", 1.0))
    batch.claims.append(("r1", "bob", 1.0))
    batch.commits.append(commit_row("r1", 1))
    batch.folds.append(("s1", "summary", 1))
    assert len(batch) == 1 + 3 + 1 + 1 + 1 + 1 + 1


async def test_reading_what_was_never_written_returns_none_or_nothing(
    storage: SqliteStorage,
) -> None:
    assert await storage.session("nope") is None
    assert await storage.messages("nope", 0, None) == []
    assert await storage.pending_for("nobody") == []
    assert await storage.pending_status("nope") is None
    assert await storage.reply_for("nope") is None


async def test_opening_a_session_twice_keeps_the_first_row(storage: SqliteStorage) -> None:
    await storage.write(WriteBatch(sessions=[session_row("s1", initiator="alice")]))
    await storage.write(WriteBatch(sessions=[session_row("s1", initiator="eve",
                                                         terms={"other": True})]))
    row = await storage.session("s1")
    assert row is not None
    assert (row["initiator"], row["terms"]) == ("alice", TERMS)


# --- messages -----------------------------------------------------------------------------------


async def test_messages_come_back_in_sequence_order_whatever_the_insert_order(
    storage: SqliteStorage,
) -> None:
    await storage.write(WriteBatch(sessions=[session_row("s1")],
                                   messages=[message_row("s1", seq) for seq in (3, 1, 5, 2, 4)]))
    assert await seqs(storage, "s1") == [1, 2, 3, 4, 5]


async def test_messages_after_a_seq_with_a_limit_are_the_first_ones_after_it(
    storage: SqliteStorage,
) -> None:
    await storage.write(session_with("s1", 10))
    assert [m["seq"] for m in await storage.messages("s1", 4, None)] == [5, 6, 7, 8, 9, 10]
    assert [m["seq"] for m in await storage.messages("s1", 4, 3)] == [5, 6, 7]


@pytest.mark.parametrize(("limit", "expected"),
                         [(1, [10]), (3, [8, 9, 10]), (10, list(range(1, 11))),
                          (50, list(range(1, 11)))],
                         ids=["last-1", "last-3", "all-10", "more-than-there-are"])
async def test_the_last_n_messages_come_back_in_ascending_order(
    storage: SqliteStorage, limit: int, expected: list[int],
) -> None:
    await storage.write(session_with("s1", 10))
    messages = await storage.messages("s1", 0, limit, last=True)
    assert [m["seq"] for m in messages] == expected


async def test_the_last_n_messages_stay_after_the_given_seq(storage: SqliteStorage) -> None:
    await storage.write(session_with("s1", 10))
    assert [m["seq"] for m in await storage.messages("s1", 8, 5, last=True)] == [9, 10]


async def test_messages_of_one_session_never_include_another_sessions(
    storage: SqliteStorage,
) -> None:
    await storage.write(session_with("s1", 3))
    await storage.write(session_with("s2", 2))
    assert {m["msg_id"] for m in await storage.messages("s2", 0, None)} == {"s2-m1", "s2-m2"}
    assert [m["seq"] for m in await storage.messages("s1", 0, 10, last=True)] == [1, 2, 3]


async def test_a_duplicate_msg_id_in_the_same_session_is_refused(
    storage: SqliteStorage,
) -> None:
    await storage.write(WriteBatch(sessions=[session_row("s1")],
                                   messages=[message_row("s1", 1, msg_id="same")]))
    with pytest.raises(sqlite3.IntegrityError):
        await storage.write(WriteBatch(messages=[message_row("s1", 2, msg_id="same")]))
    assert await seqs(storage, "s1") == [1]


async def test_the_same_msg_id_in_two_sessions_is_allowed(storage: SqliteStorage) -> None:
    await storage.write(WriteBatch(
        sessions=[session_row("s1"), session_row("s2")],
        messages=[message_row("s1", 1, msg_id="same"), message_row("s2", 1, msg_id="same")]))
    assert await seqs(storage, "s1") == [1]
    assert await seqs(storage, "s2") == [1]


# --- atomicity ----------------------------------------------------------------------------------


async def test_a_batch_that_breaks_a_constraint_leaves_nothing_of_itself_behind(
    storage: SqliteStorage,
) -> None:
    await storage.write(session_with("s1", 2))
    await storage.write(WriteBatch(pending=[pending_row("r-old")], claims=[("r-old", "bob", 1.0)]))

    with pytest.raises(sqlite3.IntegrityError):
        await storage.write(WriteBatch(
            sessions=[session_row("s2")],
            messages=[message_row("s2", 1), message_row("s1", 3),
                      message_row("s1", 2, msg_id="duplicate-seq")],
            session_seq={"s1": 4, "s2": 2},
            pending=[pending_row("r-new")],
            resolutions=[("r-old", "cancelled", 2000.0)],
            commits=[commit_row("r-old", 1, {"text": "late"})],
            claims=[("r-old", "carol", 2000.0)],
        ))

    assert await storage.session("s2") is None
    assert await storage.messages("s2", 0, None) == []
    assert await seqs(storage, "s1") == [1, 2]
    assert [m["msg_id"] for m in await storage.messages("s1", 0, None)] == ["s1-m1", "s1-m2"]
    row = await storage.session("s1")
    assert row is not None
    assert row["next_seq"] == 3
    assert await storage.pending_status("r-new") is None
    assert await storage.pending_status("r-old") == "open"
    assert await storage.reply_for("r-old") is None
    assert await claim(storage, "r-old") == 2  # the failed batch's claim counted for nothing
    assert await storage.integrity() == "ok"


async def test_after_a_failed_batch_the_next_batch_commits(storage: SqliteStorage) -> None:
    await storage.write(session_with("s1", 1))
    with pytest.raises(sqlite3.IntegrityError):
        await storage.write(WriteBatch(messages=[message_row("s1", 1, msg_id="again")]))
    await storage.write(WriteBatch(messages=[message_row("s1", 2)], session_seq={"s1": 3}))
    assert await seqs(storage, "s1") == [1, 2]
    assert not storage.db.in_transaction


# --- pending requests, resolutions and replies ---------------------------------------------------


async def test_pending_for_returns_only_the_open_requests_of_that_agent_oldest_first(
    storage: SqliteStorage,
) -> None:
    await storage.write(WriteBatch(pending=[
        pending_row("r2", updated=20.0, deadline=500.0, envelope={"k": UNICODE}),
        pending_row("r1", updated=10.0, receiver="carol", session_id="s9"),
        pending_row("r3", updated=30.0),
        pending_row("r-other", agent_id="dave", updated=5.0),
    ]))
    await storage.write(WriteBatch(resolutions=[("r3", "answered", 40.0)]))

    assert await storage.pending_for("alice") == [
        {"request_id": "r1", "receiver": "carol", "session_id": "s9",
         "envelope": {"id": "r1", "payload": {"text": "do it"}}, "deadline": None},
        {"request_id": "r2", "receiver": "bob", "session_id": "s1",
         "envelope": {"k": UNICODE}, "deadline": 500.0},
    ]
    assert [p["request_id"] for p in await storage.pending_for("dave")] == ["r-other"]


async def test_recording_a_pending_request_twice_keeps_the_first(storage: SqliteStorage) -> None:
    await storage.write(WriteBatch(pending=[pending_row("r1", receiver="bob")]))
    await storage.write(WriteBatch(resolutions=[("r1", "answered", 2.0)]))
    await storage.write(WriteBatch(pending=[pending_row("r1", receiver="mallory")]))
    assert await storage.pending_status("r1") == "answered"
    assert await storage.pending_for("alice") == []


@pytest.mark.parametrize(("first", "second"),
                         [("answered", "cancelled"), ("cancelled", "answered"),
                          ("answered", "answered")],
                         ids=["answered-then-cancelled", "cancelled-then-answered", "twice"])
async def test_a_resolution_changes_only_an_open_request_and_never_twice(
    storage: SqliteStorage, first: str, second: str,
) -> None:
    await storage.write(WriteBatch(pending=[pending_row("r1")]))
    earlier = await storage.write(WriteBatch(resolutions=[("r1", first, 2.0)]))
    later = await storage.write(WriteBatch(resolutions=[("r1", second, 3.0)]))
    assert (earlier.resolved, later.resolved) == ([True], [False])
    assert await storage.pending_status("r1") == first


async def test_two_resolutions_of_one_request_in_one_batch_change_it_once(
    storage: SqliteStorage,
) -> None:
    await storage.write(WriteBatch(pending=[pending_row("r1"), pending_row("r2")]))
    written = await storage.write(WriteBatch(resolutions=[
        ("r1", "cancelled", 2.0), ("r1", "answered", 2.0), ("r-unknown", "answered", 2.0),
        ("r2", "answered", 2.0)]))
    assert written.resolved == [True, False, False, True]
    assert await storage.pending_status("r1") == "cancelled"
    assert await storage.pending_status("r2") == "answered"


async def test_a_request_recorded_and_resolved_in_one_batch_is_resolved(
    storage: SqliteStorage,
) -> None:
    written = await storage.write(WriteBatch(pending=[pending_row("r1")],
                                             resolutions=[("r1", "answered", 2.0)]))
    assert written.resolved == [True]
    assert await storage.pending_status("r1") == "answered"


@pytest.mark.parametrize("payload", [
    {"text": "你好，世界"},
    {"text": "😀👍🏽👨‍👩‍👧🇨🇳"},
    {"path": "C:\\temp\\new\\x00", "regex": r"\d+\s*\\"},
    {"mixed": [UNICODE, {"中文键": "值"}, 1.5, None, True], "bytes": b"\x00\xff"},
], ids=["chinese", "emoji", "backslashes", "nested"])
async def test_a_reply_payload_round_trips_unchanged(
    storage: SqliteStorage, payload: dict[str, Any],
) -> None:
    await record(storage, "r1", payload)
    assert await storage.reply_for("r1") == {"agent_id": "bob", "payload": payload,
                                             "schema": "answer@1.0"}


async def test_a_second_commit_after_a_reply_cannot_overwrite_it_whatever_its_token(
    storage: SqliteStorage,
) -> None:
    token = await claim(storage, "r1")
    assert await commit(storage, "r1", token, {"n": 1})
    assert not await commit(storage, "r1", token, {"n": 2})
    later = await claim(storage, "r1", "carol")
    assert not await commit(storage, "r1", later, {"n": 3}, agent_id="carol")
    assert await storage.reply_for("r1") == {"agent_id": "bob", "payload": {"n": 1},
                                             "schema": "answer@1.0"}


# --- fencing tokens -----------------------------------------------------------------------------


async def test_claims_get_tokens_that_increase_strictly_per_request(
    storage: SqliteStorage,
) -> None:
    written = await storage.write(WriteBatch(claims=[("r1", "bob", 1.0), ("r1", "carol", 1.0),
                                                     ("r2", "bob", 1.0)]))
    assert written.tokens == [1, 2, 1]
    assert await claim(storage, "r1", "dave") == 3
    assert await claim(storage, "r2") == 2


async def test_a_stale_token_cannot_commit_and_the_latest_one_can(storage: SqliteStorage) -> None:
    slow = await claim(storage, "r1", "bob")
    fresh = await claim(storage, "r1", "carol")
    assert not await commit(storage, "r1", slow, {"by": "bob"})
    assert await storage.reply_for("r1") is None
    assert await commit(storage, "r1", fresh, {"by": "carol"}, agent_id="carol")
    assert await storage.reply_for("r1") == {"agent_id": "carol", "payload": {"by": "carol"},
                                             "schema": "answer@1.0"}


async def test_a_commit_without_a_claim_or_with_a_token_never_given_records_nothing(
    storage: SqliteStorage,
) -> None:
    assert not await commit(storage, "r-unclaimed", 1)
    token = await claim(storage, "r1")
    assert not await commit(storage, "r1", token + 1)
    assert await storage.reply_for("r-unclaimed") is None
    assert await storage.reply_for("r1") is None


async def test_in_one_batch_a_commit_goes_before_a_later_holders_claim(
    storage: SqliteStorage,
) -> None:
    token = await claim(storage, "r1", "bob")
    written = await storage.write(WriteBatch(commits=[commit_row("r1", token, {"by": "bob"})],
                                             claims=[("r1", "carol", 2.0)]))
    assert written == Written(tokens=[2], committed=[True])
    assert not await commit(storage, "r1", 2, {"by": "carol"}, agent_id="carol")
    reply = await storage.reply_for("r1")
    assert reply is not None
    assert reply["payload"] == {"by": "bob"}


async def test_tokens_and_their_fences_survive_close_and_reopen(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    first = await opened(path)
    stale = await claim(first, "r1", "bob")
    assert await claim(first, "r1", "carol") == 2
    await first.close()

    second = await opened(path)
    try:
        assert not await commit(second, "r1", stale)
        assert await claim(second, "r1", "dave") == 3
        assert not await commit(second, "r1", 2, agent_id="carol")
        assert await commit(second, "r1", 3, {"by": "dave"}, agent_id="dave")
    finally:
        await second.close()


async def test_a_database_made_before_claims_existed_opens_and_keeps_its_replies(
    tmp_path: Path,
) -> None:
    path = tmp_path / "sessions.db"
    await (await opened(path)).close()
    with contextlib.closing(sqlite3.connect(path)) as db:  # as an older version left it
        db.execute("DROP TABLE claims")
        db.execute("INSERT INTO replies VALUES ('r-old', 'bob', ?, 'answer@1.0', 1.0)",
                   (pack({"n": 1}),))
        db.commit()

    storage = await opened(path)
    try:
        assert await storage.reply_for("r-old") == {"agent_id": "bob", "payload": {"n": 1},
                                                    "schema": "answer@1.0"}
        assert not await commit(storage, "r-old", await claim(storage, "r-old"), {"n": 2})
        await record(storage, "r-new", {"n": 3})
        assert await storage.integrity() == "ok"
    finally:
        await storage.close()


# --- folds --------------------------------------------------------------------------------------


async def test_a_fold_sets_summary_and_folded_upto_and_deletes_messages_up_to_it(
    storage: SqliteStorage,
) -> None:
    await storage.write(session_with("s1", 10))
    await storage.write(session_with("s2", 3))
    await storage.write(WriteBatch(folds=[("s1", f"摘要 {UNICODE}", 6)]))

    row = await storage.session("s1")
    assert row is not None
    assert (row["summary"], row["folded_upto"], row["next_seq"]) == (f"摘要 {UNICODE}", 6, 11)
    assert await seqs(storage, "s1") == [7, 8, 9, 10]
    assert await seqs(storage, "s2") == [1, 2, 3]


async def test_a_later_fold_replaces_the_summary_and_folds_further(
    storage: SqliteStorage,
) -> None:
    await storage.write(session_with("s1", 10))
    await storage.write(WriteBatch(folds=[("s1", "first", 3)]))
    await storage.write(WriteBatch(folds=[("s1", "first\nsecond", 8)]))
    row = await storage.session("s1")
    assert row is not None
    assert (row["summary"], row["folded_upto"]) == ("first\nsecond", 8)
    assert await seqs(storage, "s1") == [9, 10]


async def test_a_folded_msg_id_is_free_to_be_used_again(storage: SqliteStorage) -> None:
    await storage.write(session_with("s1", 2))
    await storage.write(WriteBatch(folds=[("s1", "s", 1)]))
    await storage.write(WriteBatch(messages=[message_row("s1", 3, msg_id="s1-m1")]))
    assert [m["msg_id"] for m in await storage.messages("s1", 0, None)] == ["s1-m2", "s1-m1"]


# --- durability ---------------------------------------------------------------------------------


async def test_everything_committed_is_still_there_after_close_and_reopen(
    tmp_path: Path,
) -> None:
    path = tmp_path / "sessions.db"
    first = await opened(path)
    await first.write(session_with("s1", 5))
    await first.write(WriteBatch(
        folds=[("s1", "folded 1-2", 2)],
        pending=[pending_row("r-open", deadline=77.0), pending_row("r-done")]))
    await record(first, "r-done", {"text": UNICODE})
    await first.write(WriteBatch(resolutions=[("r-done", "answered", 10.0)]))
    with pytest.raises(sqlite3.IntegrityError):
        await first.write(WriteBatch(messages=[message_row("s1", 6), message_row("s1", 3)]))
    await first.close()

    second = await opened(path)
    try:
        assert await pragma(second, "journal_mode") == "wal"
        row = await second.session("s1")
        assert row is not None
        assert (row["summary"], row["folded_upto"], row["next_seq"], row["terms"]) == (
            "folded 1-2", 2, 6, TERMS)
        assert await seqs(second, "s1") == [3, 4, 5]
        assert [p["request_id"] for p in await second.pending_for("alice")] == ["r-open"]
        assert await second.pending_status("r-done") == "answered"
        assert await second.reply_for("r-done") == {
            "agent_id": "bob", "payload": {"text": UNICODE}, "schema": "answer@1.0"}
        assert await second.integrity() == "ok"
    finally:
        await second.close()


async def test_closing_twice_is_harmless_and_the_file_opens_again(tmp_path: Path) -> None:
    storage = await opened(tmp_path / "sessions.db")
    await storage.write(session_with("s1", 1))
    await storage.close()
    await storage.close()
    await storage.open()
    try:
        assert await seqs(storage, "s1") == [1]
    finally:
        await storage.close()


def test_a_misspelt_synchronous_setting_is_refused_rather_than_silently_weakened(
    tmp_path: Path,
) -> None:
    with pytest.raises(ReachError, match="synchronous"):
        SqliteStorage(tmp_path / "s.db", "FUL")


async def test_using_a_storage_that_is_not_open_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ReachError, match="not open"):
        await SqliteStorage(tmp_path / "s.db").session("x")
