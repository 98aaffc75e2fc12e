"""The registry's table: agent records by ID, indexed by capability tag for discovery.

Discovery ranks the online holders of a capability (:mod:`policies.discovery`) over candidates
that mirror the records; a lookup that waits for an agent's record to change (a long poll while
it restarts) is woken the moment the record is written.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator, Mapping, ValuesView
from typing import TypeVar, overload

from policies.discovery import Candidate, close_matches, find_holders, match_kind
from reach.records import AgentRecord, AgentStatus

T = TypeVar("T")


class AgentTable(Mapping[str, AgentRecord]):
    """The records, read as a mapping of agent ID to record, written through its methods."""

    def __init__(self) -> None:
        self._records: dict[str, AgentRecord] = {}
        self.by_tag: dict[str, set[str]] = {}
        # Invariant: cands[i] mirrors records[i]'s capabilities (and their priorities),
        # description, status and load.
        self.cands: dict[str, Candidate] = {}
        # Lookups waiting for an agent's record to change (its new incarnation registering).
        self._changes: dict[str, asyncio.Event] = {}

    def __getitem__(self, agent_id: str) -> AgentRecord:
        return self._records[agent_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._records)

    def __len__(self) -> int:
        return len(self._records)

    # The dict's own, for speed: heartbeats and expiry read every record.
    @overload
    def get(self, agent_id: str, /) -> AgentRecord | None: ...
    @overload
    def get(self, agent_id: str, /, default: AgentRecord | T) -> AgentRecord | T: ...
    def get(self, agent_id: str, /, default: object = None) -> object:
        return self._records.get(agent_id, default)

    def values(self) -> ValuesView[AgentRecord]:
        return self._records.values()

    def register(self, rec: AgentRecord) -> None:
        """Stores a record in place of the agent's last, its capabilities indexed anew."""
        old = self._records.get(rec.agent_id)
        if old is not None:
            self._unindex(old)
        self.put(rec)
        for tag in rec.capabilities:
            self.by_tag.setdefault(tag, set()).add(rec.agent_id)

    def put(self, rec: AgentRecord) -> None:
        """Stores a record of the same capabilities (a new status or load) and mirrors it for
        discovery."""
        self._records[rec.agent_id] = rec
        self._changed(rec.agent_id)
        self.cands[rec.agent_id] = Candidate(rec.agent_id, rec.capabilities, rec.description,
                                             rec.status is AgentStatus.ONLINE, rec.load,
                                             rec.priorities)

    def remove(self, agent_id: str) -> None:
        """Removes an agent's record (which it has)."""
        self._unindex(self._records[agent_id])
        del self._records[agent_id]
        self._changed(agent_id)
        del self.cands[agent_id]

    def _unindex(self, rec: AgentRecord) -> None:
        for tag in rec.capabilities:
            ids = self.by_tag.get(tag)
            if ids is not None:
                ids.discard(rec.agent_id)
                if not ids:
                    del self.by_tag[tag]

    def _changed(self, agent_id: str) -> None:
        waiting = self._changes.pop(agent_id, None)
        if waiting is not None:
            waiting.set()

    async def changed(self, agent_id: str, timeout_s: float) -> None:
        """Returns when the agent's record is next written, or after ``timeout_s``."""
        changed = self._changes.setdefault(agent_id, asyncio.Event())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(changed.wait(), timeout_s)

    def discover(self, capability: str, text: str | None, limit: int | None,
                 ) -> tuple[list[AgentRecord], list[str]]:
        """Online holders of a capability (best first, at most ``limit``); when none holds it,
        the tags close to it instead."""
        kinds = {tag: match_kind(capability, tag) for tag in self.by_tag}
        matched = {t: k for t, k in kinds.items() if k is not None}
        if not matched:
            return [], close_matches(capability, self.by_tag)
        best = min(matched.values())
        ids = set().union(*(self.by_tag[t] for t, k in matched.items() if k == best))
        ordered = find_holders(capability, [self.cands[i] for i in ids], text=text, limit=limit)
        return [self._records[c.agent_id] for c in ordered], []
