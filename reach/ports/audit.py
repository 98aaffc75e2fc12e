"""The port of the audit log: hash-chained records of who called what, with which outcome."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Protocol, TypedDict


class AuditRecord(TypedDict):
    """One call (or refusal) to record: who called which capability of whom, how it ended, in
    which trace (empty when it had none), and when (epoch seconds)."""

    caller: str
    callee: str
    capability: str
    msg_type: str
    outcome: str
    trace_id: str
    at: float


class AuditEntry(AuditRecord):
    """An audit record as the log gives it back: numbered in the chain."""

    seq: int


class AuditPort(Protocol):
    """The hash-chained audit log (the session store keeps it)."""

    def audit(self, records: list[AuditRecord]) -> Awaitable[list[int]]:
        """Appends records to the log; their sequence numbers (callers need not await it)."""
        ...

    def audit_records(self, trace_id: str | None = None, agent: str | None = None,
                      limit: int = 1000) -> Awaitable[list[AuditEntry]]:
        """Audit records, oldest first: all, or those of one trace or one agent (as caller
        or callee); the last ``limit`` of them."""
        ...


__all__ = ["AuditEntry", "AuditPort", "AuditRecord"]
