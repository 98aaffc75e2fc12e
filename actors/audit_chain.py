"""The audit log's hash chain, as the session store extends it.

Each record is stored with its sequence number, the hash of the record before it and its own
(:func:`policies.audit.chain_hash`), so that a record changed or removed afterwards breaks the
chain. The chain's tail (the last sequence number and hash) is kept in memory by the store's
single writer, loaded from the storage on first use and again after a failed commit.
"""

from __future__ import annotations

from typing import Any

from actors.group_commit import GroupCommit, StaleStage
from actors.session_storage import WriteBatch
from policies.audit import canonical, chain_hash
from reach import clock


class AuditChain:
    """Appends records to the hash-chained audit log through the store's group commits.

    Args:
        writer: The store's writer.
    """

    def __init__(self, writer: GroupCommit) -> None:
        self.writer = writer
        # Invariant: tail is the last committed record's (seq, hash), or that of the last one
        # staged into the commit in progress; None until loaded, and after a failed commit.
        self.tail: tuple[int, str] | None = None

    def forget(self) -> None:
        """Drops the tail (a failed commit may have advanced it past the log): reloaded on next
        use."""
        self.tail = None

    async def append(self, records: list[dict[str, Any]]) -> list[int]:
        """Appends records, in order; their sequence numbers once committed."""
        await self.writer.ready()
        if self.tail is None:
            tail = await self.writer.storage.audit_tail()
            if self.tail is None:  # another call may have loaded (and advanced) it
                self.tail = tail
        now = clock.now()

        def stage(batch: WriteBatch) -> list[int]:
            if self.tail is None:
                raise StaleStage  # a failed commit dropped the tail: reload and stage again
            seq, prev = self.tail
            seqs = []
            for rec in records:
                seq += 1
                body = canonical(rec)
                digest = chain_hash(prev, rec, body)
                batch.audit.append((seq, now, prev, digest, body.decode("utf-8")))
                prev = digest
                seqs.append(seq)
            self.tail = (seq, prev)
            return seqs

        try:
            result: list[int] = await self.writer.commit(stage)
        except StaleStage:
            return await self.append(records)
        return result
