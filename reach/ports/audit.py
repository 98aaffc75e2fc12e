"""The port of the audit log: hash-chained records of who did what."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, Protocol


class AuditPort(Protocol):
    """The hash-chained audit log (kept by the session store)."""

    def audit(self, records: list[dict[str, Any]]) -> Awaitable[list[int]]:
        """Appends records to the hash-chained audit log (callers need not await it)."""
        ...

    def audit_records(self, trace_id: str | None, agent: str | None,
                      limit: int) -> Awaitable[list[dict[str, Any]]]:
        """Audit records, oldest first: all, or those of one trace or one agent."""
        ...


__all__ = ["AuditPort"]
