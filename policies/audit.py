"""The audit log's hash chain: each record's hash covers the previous hash and the record, so an
edited, removed or reordered record breaks the chain at that point. Pure."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

#: The "previous hash" of the first record.
GENESIS = "0" * 64


def canonical(record: Mapping[str, Any]) -> bytes:
    """The bytes a record is hashed as: JSON with sorted keys, UTF-8."""
    return json.dumps(record, sort_keys=True, ensure_ascii=False,
                      separators=(",", ":")).encode("utf-8")


def chain_hash(previous: str, record: Mapping[str, Any], body: bytes | None = None) -> str:
    """The hash of a record that follows one whose hash is ``previous`` (``body``: the record's
    :func:`canonical` bytes, when the caller has them already)."""
    return hashlib.sha256(previous.encode("ascii")
                          + (canonical(record) if body is None else body)).hexdigest()


def first_broken(rows: Sequence[tuple[int, str, str, Mapping[str, Any]]]) -> int | None:
    """The sequence number of the first record that breaks the chain, or None if it holds.

    Args:
        rows: (seq, previous hash, hash, record) in sequence order, as stored.
    """
    expected_prev, expected_seq = GENESIS, None
    for seq, prev, digest, record in rows:
        if expected_seq is not None and seq != expected_seq:
            return expected_seq  # a record is missing here
        if prev != expected_prev or chain_hash(prev, record) != digest:
            return seq
        expected_prev, expected_seq = digest, seq + 1
    return None
