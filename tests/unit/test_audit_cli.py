"""`reach audit verify` / `show` on a real SQLite file written by the session storage."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from actors.session_storage import SqliteStorage, WriteBatch
from policies.audit import GENESIS, canonical, chain_hash
from reach.errors import StorageError
from reach.tools import audit
from reach.tools.cli import main


async def write_log(path: Path, count: int) -> None:
    storage = SqliteStorage(path)
    await storage.open()
    prev, batch = GENESIS, WriteBatch()
    for seq in range(1, count + 1):
        rec = {"caller": "路由-1", "callee": f"order-{seq}", "capability": "order.query",
               "msg_type": "request", "outcome": "ok", "trace_id": f"t{seq % 3}"}
        digest = chain_hash(prev, rec)
        batch.audit.append((seq, 0.0, prev, digest, canonical(rec).decode("utf-8")))
        prev = digest
    await storage.write(batch)
    assert await storage.audit_tail() == (count, prev)
    await storage.close()


async def test_an_intact_log_verifies_and_a_tampered_one_names_the_first_broken_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "sessions.db"
    await write_log(db, 10)
    assert main(["audit", "verify", "--path", str(db)]) == 0
    assert "intact: 10 records" in capsys.readouterr().out
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE audit SET record = replace(record, 'ok', 'denied') WHERE seq = 4")
    assert main(["audit", "verify", "--path", str(db)]) == 1
    assert "first broken record is #4" in capsys.readouterr().out
    assert audit.verify(db).first_broken == 4


async def test_a_removed_record_is_found(tmp_path: Path) -> None:
    db = tmp_path / "sessions.db"
    await write_log(db, 6)
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM audit WHERE seq = 3")
    assert audit.verify(db).first_broken == 3


async def test_show_filters_by_trace_and_by_agent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "sessions.db"
    await write_log(db, 9)
    assert [r["seq"] for r in audit.records(db, trace_id="t1")] == [1, 4, 7]
    assert [r["seq"] for r in audit.records(db, agent="order-5")] == [5]
    assert main(["audit", "show", "--path", str(db), "--agent", "路由-1"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 9


def test_verifying_a_missing_database_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(StorageError):
        audit.verify(tmp_path / "nothing.db")
    assert main(["audit", "verify", "--path", str(tmp_path / "nothing.db")]) == 2
    assert "no session store database" in capsys.readouterr().err
