"""Writing audit records from a busy process: buffered, sent to the session store in batches.

A host records every call it handles (when ``audit_calls`` is on) and every refusal; sending each
record in its own Ray call would cost more than the call it records, so records wait in a buffer
that is flushed by one background task, at most every :data:`FLUSH_S` or at
:data:`FLUSH_AT` records. The store chains them (see :mod:`policies.audit`).

A buffer that cannot be flushed (the store is restarting) keeps its records and tries again; past
:data:`MAX_BUFFERED` the oldest are dropped, counted in :attr:`AuditTrail.dropped` and logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque

from reach import clock
from reach.errors import ReachError
from reach.ports.audit import AuditPort, AuditRecord
from reach.ports.cluster import Cluster

log = logging.getLogger("reach.audit")

#: Longest a record waits in the buffer (seconds).
FLUSH_S = 0.2
#: Records that trigger a flush at once.
FLUSH_AT = 2_000
#: Records kept while the store is unreachable.
MAX_BUFFERED = 200_000


class AuditTrail:
    """One process's audit buffer.

    Args:
        cluster: Where the audit log is (its port is taken at the first flush).
    """

    def __init__(self, cluster: Cluster) -> None:
        self._cluster = cluster
        self._log: AuditPort | None = None
        self._buffer: deque[AuditRecord] = deque()
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        self.written = 0
        self.dropped = 0

    def record(self, caller: str, callee: str, *, capability: str, msg_type: str,
               outcome: str, trace_id: str | None = None) -> None:
        """Buffers one record (who called which capability, with which outcome, when)."""
        if len(self._buffer) >= MAX_BUFFERED:
            self._buffer.popleft()
            self.dropped += 1
            if self.dropped % 10_000 == 1:
                log.error("the audit buffer is full (the session store is unreachable): "
                          "%d records dropped so far", self.dropped)
        self._buffer.append({"caller": caller, "callee": callee, "capability": capability,
                             "msg_type": msg_type, "outcome": outcome,
                             "trace_id": trace_id or "", "at": clock.now()})
        self._kick()

    def _kick(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a synchronous caller): the next record flushes
            return
        if self._task is None or self._task.done():
            self._wake = asyncio.Event()
            self._task = loop.create_task(self._flush_forever())
        elif len(self._buffer) >= FLUSH_AT and self._wake is not None:
            self._wake.set()

    async def _flush_forever(self) -> None:
        wake = self._wake
        assert wake is not None
        while self._buffer:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), FLUSH_S)
            wake.clear()
            await self.flush()

    async def flush(self) -> int:
        """Sends what is buffered; returns how many records were written."""
        if not self._buffer:
            return 0
        batch = list(self._buffer)
        self._buffer.clear()
        try:
            if self._log is None:
                self._log = self._cluster.audit_log()
            await self._log.audit(batch)
        except ReachError as exc:  # the store may be restarting: keep them for the next flush
            log.warning("audit records not written yet (%d): %s", len(batch), exc)
            self._buffer.extendleft(reversed(batch))
            await asyncio.sleep(FLUSH_S)
            return 0
        self.written += len(batch)
        return len(batch)
