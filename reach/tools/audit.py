"""Reading and verifying the audit log straight from the session store's SQLite file.

Verification needs no running cluster: it recomputes the hash chain (see
:mod:`policies.audit`) and points at the first record that breaks it.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from policies.audit import first_broken
from reach.errors import StorageError


@dataclass(frozen=True)
class Verdict:
    """The outcome of verifying an audit log.

    Attributes:
        records: How many records the log holds.
        first_broken: The sequence number of the first tampered (edited, removed or reordered)
            record, or None when the chain holds.
    """

    records: int
    first_broken: int | None

    @property
    def ok(self) -> bool:
        """Whether the chain holds."""
        return self.first_broken is None


def _rows(path: Path) -> list[tuple[int, str, str, dict[str, Any]]]:
    if not path.exists():
        raise StorageError(f"no session store database at {path}")
    uri = f"file:{path}?mode=ro"
    try:
        with sqlite3.connect(uri, uri=True) as db:
            rows = db.execute("SELECT seq, prev, hash, record FROM audit ORDER BY seq").fetchall()
    except sqlite3.Error as exc:
        raise StorageError(f"cannot read the audit log in {path}: {exc}") from exc
    return [(int(seq), str(prev), str(digest), _record(text)) for seq, prev, digest, text in rows]


def _record(text: str) -> dict[str, Any]:
    try:
        rec = json.loads(text)
    except ValueError:
        rec = None
    # An unreadable record cannot hash to its stored hash: verify reports it as broken.
    return rec if isinstance(rec, dict) else {"unreadable": text}


def verify(path: str | Path) -> Verdict:
    """Verifies the audit log's hash chain in a session store database.

    Raises:
        StorageError: the file is missing or holds no readable audit log.
    """
    rows = _rows(Path(path))
    return Verdict(len(rows), first_broken(rows))


def records(path: str | Path, trace_id: str | None = None,
            agent: str | None = None) -> list[dict[str, Any]]:
    """The audit records, oldest first: all, one trace's, or one agent's (caller or callee).

    Raises:
        StorageError: the file is missing or holds no readable audit log.
    """
    out = []
    for seq, _, _, rec in _rows(Path(path)):
        if trace_id is not None and rec.get("trace_id") != trace_id:
            continue
        if agent is not None and agent not in (rec.get("caller"), rec.get("callee")):
            continue
        out.append({"seq": seq, **rec})
    return out
