"""The SessionStore actor: durable sessions, pending requests and recorded replies.

Writes are group-committed by the store's single writer (:mod:`actors.group_commit`). Sequence
numbers are assigned here, by that single writer, so a session's messages are numbered 1, 2,
3... with no gap and no clock involved. Past a threshold, the oldest messages are folded into the
session's summary by the summariser (:mod:`actors.summariser`: deterministic by default, or an
agent) and dropped.

An effectively-once handler's reply is fenced: its holder claims the request first and gets a
token, and the reply commits only if no later holder claimed the request meanwhile (a failover
away from a holder that was slow, not dead), so at most one reply is ever recorded per request.

The same writer extends the hash-chained audit log (:mod:`actors.audit_chain`) and keeps the A2A
gateway's tasks (:mod:`actors.a2a_tasks`), so that every gateway replica sees the same tasks.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from actors.a2a_storage import A2ACursor
from actors.a2a_tasks import A2ARow, A2ATasks
from actors.audit_chain import AuditChain
from actors.group_commit import GroupCommit, Stage, StaleStage
from actors.session_storage import (
    SessionStorage,
    SqliteStorage,
    WriteBatch,
    Written,
    pack,
)
from actors.summariser import Summariser
from policies.sessions import COMPACT_AFTER, KEEP_LAST, Limits, Terms, fold_count
from policies.sessions import negotiate as negotiate_terms
from reach import clock
from reach._runtime.names import STORE_NAME
from reach._runtime.trace_setup import setup
from reach.errors import ReachError, SessionNotFound
from reach.ports.cluster import Cluster
from reach.records import SessionContext, SessionMessage, SessionResume

log = logging.getLogger("reach.sessions")


class SessionStore:
    """Sessions on SQLite (see :mod:`actors.session_storage`).

    Args:
        cluster: Where the other processes are (to ask a summariser agent).
        path: The database file.
        synchronous: SQLite ``synchronous`` (``FULL`` or ``NORMAL``).
        group_commit: Commit writes that arrive together at once (else one commit per write).
        compact_after: Unfolded messages that trigger compaction.
        keep_last: Messages kept unfolded by compaction.
        summariser: ``None`` for the deterministic default, or the ID of an agent that answers
            ``reach.summarise@1.0`` requests with a new summary.
        storage: The database behind it (default: SQLite at ``path``).
        name: This store's endpoint name, where a summariser agent's replies are sent (the
            deployment's store is ``reach.sessions``; another store must give its own).
    """

    def __init__(self, cluster: Cluster, path: str, *, synchronous: str = "FULL",
                 group_commit: bool = True, compact_after: int = COMPACT_AFTER,
                 keep_last: int = KEEP_LAST, summariser: str | None = None,
                 storage: SessionStorage | None = None, name: str = STORE_NAME) -> None:
        setup(cluster, name)
        self.storage = storage or SqliteStorage(Path(path), synchronous)
        self.writer = GroupCommit(self.storage, group_commit=group_commit,
                                  on_failure=self._forget)
        self.compact_after, self.keep_last = compact_after, keep_last
        self.summaries = Summariser(cluster, name, summariser)
        self.audit_chain = AuditChain(self.writer)
        self.a2a = A2ATasks(self.writer)
        # Invariant: meta[s] mirrors session s's row plus the ids of its unfolded messages, as
        # of the commits made so far and the one being staged; a failed commit drops it all.
        self.meta: dict[str, dict[str, Any]] = {}
        self._compacting: set[str] = set()
        self._folding: set[asyncio.Task[None]] = set()

    def _forget(self) -> None:
        """After a failed commit: in-memory sequence numbers and the audit chain's tail may be
        ahead of the database, so both are reloaded on next use."""
        self.meta.clear()
        self.audit_chain.forget()

    async def _meta(self, session_id: str) -> dict[str, Any]:
        await self.writer.ready()
        meta = self.meta.get(session_id)
        if meta is None:
            row = await self.storage.session(session_id)
            if row is None:
                raise SessionNotFound(f"no session {session_id!r}",
                                      details={"session_id": session_id})
            unfolded = await self.storage.messages(session_id, row["folded_upto"], None)
            row["ids"] = {m["msg_id"]: m["seq"] for m in unfolded}
            meta = self.meta.setdefault(session_id, row)
        return meta

    # -- sessions ------------------------------------------------------------------------------

    async def open_session(self, session_id: str, initiator: str, responder: str,
                           offer: dict[str, Any], limits: dict[str, Any]) -> dict[str, Any]:
        """Negotiates and opens a session (idempotent for the same ID); returns its terms.

        Raises:
            SessionRefused: a setting the responder cannot accept (named in the error).
        """
        terms = negotiate_terms(Terms(**offer), Limits(**limits))
        row = (session_id, initiator, responder, json.dumps(asdict(terms)), clock.now())

        def stage(batch: WriteBatch) -> dict[str, Any]:
            batch.sessions.append(row)
            return asdict(terms)

        await self.writer.commit(stage)
        self.meta.pop(session_id, None)
        meta = await self._meta(session_id)
        return {"session_id": session_id, "terms": meta["terms"]}

    async def append(self, session_id: str, messages: list[dict[str, Any]]) -> list[int]:
        """Appends messages (all or none); returns their sequence numbers once committed.

        A message whose ``msg_id`` is already in the session is not added twice: its
        existing number is returned (an append retried after a lost acknowledgement).

        Raises:
            SessionNotFound: no such session.
        """
        while True:
            meta = await self._meta(session_id)
            try:
                seqs: list[int] = await self.writer.commit(
                    self._append_stage(session_id, meta, messages))
                break
            except StaleStage:
                continue  # a failed commit dropped the counters: reload them, stage again
        if len(meta["ids"]) > self.compact_after and session_id not in self._compacting:
            self._compacting.add(session_id)
            folding = asyncio.get_running_loop().create_task(self._compact(session_id))
            self._folding.add(folding)
            folding.add_done_callback(self._folding.discard)
        return seqs

    def _append_stage(self, session_id: str, meta: dict[str, Any],
                      messages: list[dict[str, Any]]) -> Stage:
        now = clock.now()

        def stage(batch: WriteBatch) -> list[int]:
            if self.meta.get(session_id) is not meta:
                raise StaleStage  # staged against counters a failed commit invalidated
            seqs, ids, nxt = [], meta["ids"], meta["next_seq"]
            fresh: dict[str, int] = {}
            for m in messages:
                seq = ids.get(m["msg_id"]) or fresh.get(m["msg_id"])
                if seq is None:
                    seq = fresh[m["msg_id"]] = nxt
                    nxt += 1
                    batch.messages.append((session_id, seq, m["msg_id"], m["sender"],
                                           m.get("kind", "message"), pack(m["payload"]),
                                           m.get("schema", ""), now))
                seqs.append(seq)
            if fresh:
                batch.session_seq[session_id] = nxt
                meta["next_seq"] = nxt  # the single writer owns the counter
                ids.update(fresh)
            return seqs

        return stage

    async def append_many(self, appends: list[tuple[str, list[dict[str, Any]]]]
                          ) -> list[list[int] | dict[str, Any]]:
        """Several appends in one call (a client's coalesced outbox): each gets its sequence
        numbers, or its error's info; they share group commits."""
        results = await asyncio.gather(*(self.append(s, m) for s, m in appends),
                                       return_exceptions=True)
        return [r.to_info().model_dump(mode="json") if isinstance(r, ReachError)
                else {"code": "store_error", "reason": repr(r), "severity": "retryable"}
                if isinstance(r, BaseException) else r
                for r in results]

    async def _compact(self, session_id: str) -> None:
        try:
            meta = await self._meta(session_id)
            count = fold_count(len(meta["ids"]), self.compact_after, self.keep_last)
            if not count:
                return
            old = await self.storage.messages(session_id, meta["folded_upto"], count)
            summary = await self.summaries.summarise(meta["summary"], old)
            upto = old[-1]["seq"]

            def stage(batch: WriteBatch) -> None:
                batch.folds.append((session_id, summary, upto))

            await self.writer.commit(stage)
            meta["summary"], meta["folded_upto"] = summary, upto
            for m in old:
                meta["ids"].pop(m["msg_id"], None)
        except Exception:
            log.exception("compaction of %s failed; it is retried on the next append", session_id)
        finally:
            self._compacting.discard(session_id)

    async def deliver(self, frame: bytes, reply_to: str) -> tuple[list[str], None]:
        """Receives the summariser's replies."""
        self.summaries.accept(frame)
        return [], None

    async def watch(self) -> None:
        """Never returns while the store lives (a caller's watch fails if it dies)."""
        await asyncio.Event().wait()

    async def context(self, session_id: str, last_n: int = 20) -> SessionContext:
        """The summary and the last ``last_n`` messages (committed ones only).

        Raises:
            SessionNotFound: no such session.
        """
        meta = await self._meta(session_id)
        messages = await self.storage.messages(session_id, meta["folded_upto"], last_n,
                                               last=True)
        return SessionContext(session_id, meta["initiator"], meta["responder"], meta["summary"],
                              meta["terms"], meta["folded_upto"], meta["next_seq"],
                              tuple(SessionMessage(**m) for m in messages))

    async def since(self, session_id: str, seq: int, limit: int | None = None
                    ) -> SessionResume:
        """Resumes after ``seq``: the messages that follow it (and the summary, if some of them
        were folded already).

        Raises:
            SessionNotFound: no such session.
        """
        meta = await self._meta(session_id)
        after = max(seq, meta["folded_upto"])
        folded = seq < meta["folded_upto"]
        messages = await self.storage.messages(session_id, after, limit)
        return SessionResume(session_id, folded, meta["summary"] if folded else "",
                             tuple(SessionMessage(**m) for m in messages))

    # -- pending requests and replies ----------------------------------------------------------

    async def add_pending(self, request_id: str, *, agent_id: str, receiver: str,
                          session_id: str, envelope: dict[str, Any], deadline: float | None,
                          ) -> None:
        """Records a request ``agent_id`` sent and has not seen answered."""
        row = (request_id, agent_id, receiver, session_id, pack(envelope), deadline, clock.now())

        def stage(batch: WriteBatch) -> None:
            batch.pending.append(row)

        await self.writer.commit(stage)

    async def resolve_pending(self, request_id: str, status: str) -> bool:
        """Ends a pending request as ``answered``, ``cancelled`` or ``failed``; False if it had
        ended."""
        def stage(batch: WriteBatch) -> Callable[[Written], bool]:
            index = len(batch.resolutions)
            batch.resolutions.append((request_id, status, clock.now()))
            return lambda written: written.resolved[index]

        result: bool = await self.writer.commit(stage)
        return result

    async def pending_for(self, agent_id: str) -> list[dict[str, Any]]:
        """Open requests ``agent_id`` had sent, oldest first."""
        await self.writer.ready()
        return await self.storage.pending_for(agent_id)

    async def pending_status(self, request_id: str) -> str | None:
        """open, answered, cancelled or failed (None if never recorded)."""
        await self.writer.ready()
        return await self.storage.pending_status(request_id)

    async def claim(self, request_id: str, agent_id: str) -> int:
        """Claims a request for ``agent_id`` to run; returns its fencing token once committed.

        A request's tokens increase strictly (1, 2, 3...) and survive restarts: each claim
        fences off every earlier one, whose :meth:`commit_reply` then records nothing.
        """
        at = clock.now()

        def stage(batch: WriteBatch) -> Callable[[Written], int]:
            index = len(batch.claims)
            batch.claims.append((request_id, agent_id, at))
            return lambda written: written.tokens[index]

        token: int = await self.writer.commit(stage)
        return token

    async def commit_reply(self, request_id: str, token: int, agent_id: str,
                           payload: dict[str, Any], schema: str) -> dict[str, Any]:
        """Records a handler's reply, so that a retry of the request gets it without a rerun,
        if ``token`` is still the request's latest claim and no reply is recorded yet (both
        checked in the commit that writes it).

        Returns:
            ``{"committed": bool, "reply": dict | None}``: whether this reply is now the
            recorded one, and the recorded reply (``agent_id``, ``payload``, ``schema``), which
            is None when a later claim fenced this one off and nothing is recorded yet.
        """
        at = clock.now()

        def stage(batch: WriteBatch) -> Callable[[Written], bool]:
            index = len(batch.commits)
            batch.commits.append((request_id, token, agent_id, pack(payload), schema, at))
            return lambda written: written.committed[index]

        committed: bool = await self.writer.commit(stage)
        if committed:
            return {"committed": True,
                    "reply": {"agent_id": agent_id, "payload": payload, "schema": schema}}
        return {"committed": False, "reply": await self.storage.reply_for(request_id)}

    async def reply_for(self, request_id: str) -> dict[str, Any] | None:
        """The recorded reply of a request, or None."""
        await self.writer.ready()
        return await self.storage.reply_for(request_id)

    async def audit(self, records: list[dict[str, Any]]) -> list[int]:
        """Appends records to the hash-chained audit log; returns their sequence numbers."""
        return await self.audit_chain.append(records)

    async def audit_records(self, trace_id: str | None = None, agent: str | None = None,
                            limit: int = 1000) -> list[dict[str, Any]]:
        """Audit records, oldest first: all, or those of one trace or one agent."""
        await self.writer.ready()
        return await self.storage.audit_records(trace_id, agent, limit)

    # -- A2A tasks -----------------------------------------------------------------------------

    async def a2a_save(self, task_id: str, owner: str, *, context_id: str, state: int,
                       updated: int | None, doc: bytes) -> None:
        """Saves an A2A task of ``owner`` (inserted, or replacing the owner's), once committed.

        Raises:
            AuthError: the task ID is another owner's task (which is left as it was).
        """
        await self.a2a.save(task_id, owner, context_id=context_id, state=state,
                            updated=updated, doc=doc)

    async def a2a_save_many(self, rows: list[A2ARow]) -> list[bool]:
        """Saves A2A tasks, in order, in one commit (``rows``: ``(task_id, owner, context_id,
        state, updated, doc)``, as :meth:`a2a_save` takes them); for each, whether it was saved
        (False: the task ID is another owner's, and that task is left as it was)."""
        return await self.a2a.save_many(rows)

    async def a2a_get(self, task_id: str, owner: str) -> bytes | None:
        """An A2A task's document, if ``owner`` has that task."""
        return await self.a2a.get(task_id, owner)

    async def a2a_list(self, owner: str, *, context_id: str = "", state: int = 0,
                       updated_after: int | None = None, page_size: int,
                       after: A2ACursor | None = None, inclusive: bool = False,
                       ) -> tuple[list[bytes], A2ACursor | None, int]:
        """A page of an owner's A2A tasks, newest status update first (see
        :meth:`SessionStorage.a2a_tasks` for the order and the filters).

        Returns:
            The page's documents; the position of its last task when more follow (else None),
            to pass as ``after`` for the next page; how many tasks pass the filters in all.

        Raises:
            ProtocolError: ``page_size`` is below 1.
        """
        return await self.a2a.page(owner, context_id=context_id, state=state,
                                   updated_after=updated_after, page_size=page_size, after=after,
                                   inclusive=inclusive)

    async def a2a_delete(self, task_id: str, owner: str) -> bool:
        """Deletes an A2A task of ``owner``, once committed; False if the owner had none."""
        return await self.a2a.delete(task_id, owner)

    async def a2a_recent(self, limit: int) -> list[A2ARow]:
        """The ``limit`` most recently updated A2A tasks of every owner, newest first, as
        ``(task_id, owner, context_id, state, updated, doc)`` (for the cluster's operators: the
        observer; a caller reads its own tasks only, through :meth:`a2a_list`).

        Raises:
            ProtocolError: ``limit`` is below 1.
        """
        return await self.a2a.recent(limit)

    async def integrity(self) -> str:
        """``ok`` when SQLite's integrity check finds nothing wrong."""
        await self.writer.ready()
        return await self.storage.integrity()

    async def stats(self) -> dict[str, Any]:
        """Commits, rows written, and the database path."""
        return {"commits": self.writer.commits, "written": self.writer.written,
                "path": str(self.storage.path), "group_commit": self.writer.group_commit,
                "pid": os.getpid()}

