"""The ports of the fake cluster's stores: the session store's (its sessions, the audit log and
the A2A gateway's tasks) and the trace store's, each a typed adapter as those of
:mod:`reach.testing.ports` (a call starts at once and runs the store's method of the same name on
copies of its arguments)."""

from __future__ import annotations

from collections.abc import Awaitable, Sequence

from reach.ports.a2a_tasks import A2ACursor, A2ATaskPort, A2ATaskRow
from reach.ports.audit import AuditEntry, AuditPort, AuditRecord
from reach.ports.data import ErrorDoc, JsonObject
from reach.ports.sessions import (
    CommittedReply,
    NewMessage,
    OpenedSession,
    PendingRequest,
    RecordedReply,
    SessionsPort,
    StoreStats,
)
from reach.ports.traces import TraceStorePort
from reach.records import SessionContext, SessionResume
from reach.spans import SpanRecord, SpanStatus, TraceEdge, TraceStoreStats, TraceSummary
from reach.testing.ports import FakePort


class FakeSessions(FakePort, SessionsPort):
    """The session store's sessions (``actors/sessions.py``)."""

    def open_session(self, session_id: str, initiator: str, responder: str, offer: JsonObject,
                     limits: JsonObject) -> Awaitable[OpenedSession]:
        """See :meth:`reach.ports.sessions.SessionsPort.open_session`."""
        return self.call("open_session", session_id, initiator, responder, offer, limits)

    def append_many(self, appends: list[tuple[str, list[NewMessage]]],
                    ) -> Awaitable[list[list[int] | ErrorDoc]]:
        """See :meth:`reach.ports.sessions.SessionsPort.append_many`."""
        return self.call("append_many", appends)

    def context(self, session_id: str, last_n: int = 20) -> Awaitable[SessionContext]:
        """See :meth:`reach.ports.sessions.SessionsPort.context`."""
        return self.call("context", session_id, last_n)

    def since(self, session_id: str, seq: int,
              limit: int | None = None) -> Awaitable[SessionResume]:
        """See :meth:`reach.ports.sessions.SessionsPort.since`."""
        return self.call("since", session_id, seq, limit)

    def add_pending(self, request_id: str, *, agent_id: str, receiver: str, session_id: str,
                    envelope: JsonObject, deadline: float | None) -> Awaitable[None]:
        """See :meth:`reach.ports.sessions.SessionsPort.add_pending`."""
        return self.call("add_pending", request_id, agent_id=agent_id, receiver=receiver,
                         session_id=session_id, envelope=envelope, deadline=deadline)

    def resolve_pending(self, request_id: str, status: str) -> Awaitable[bool]:
        """See :meth:`reach.ports.sessions.SessionsPort.resolve_pending`."""
        return self.call("resolve_pending", request_id, status)

    def pending_for(self, agent_id: str) -> Awaitable[list[PendingRequest]]:
        """See :meth:`reach.ports.sessions.SessionsPort.pending_for`."""
        return self.call("pending_for", agent_id)

    def pending_status(self, request_id: str) -> Awaitable[str | None]:
        """See :meth:`reach.ports.sessions.SessionsPort.pending_status`."""
        return self.call("pending_status", request_id)

    def reply_for(self, request_id: str) -> Awaitable[RecordedReply | None]:
        """See :meth:`reach.ports.sessions.SessionsPort.reply_for`."""
        return self.call("reply_for", request_id)

    def claim(self, request_id: str, agent_id: str) -> Awaitable[int]:
        """See :meth:`reach.ports.sessions.SessionsPort.claim`."""
        return self.call("claim", request_id, agent_id)

    def commit_reply(self, request_id: str, token: int, agent_id: str, payload: JsonObject,
                     schema: str) -> Awaitable[CommittedReply]:
        """See :meth:`reach.ports.sessions.SessionsPort.commit_reply`."""
        return self.call("commit_reply", request_id, token, agent_id, payload, schema)

    def integrity(self) -> Awaitable[str]:
        """See :meth:`reach.ports.sessions.SessionsPort.integrity`."""
        return self.call("integrity")

    def stats(self) -> Awaitable[StoreStats]:
        """See :meth:`reach.ports.sessions.SessionsPort.stats`."""
        return self.call("stats")


class FakeAudit(FakePort, AuditPort):
    """The audit log (kept by the session store, ``actors/sessions.py``)."""

    def audit(self, records: list[AuditRecord]) -> Awaitable[list[int]]:
        """See :meth:`reach.ports.audit.AuditPort.audit`."""
        return self.call("audit", records)

    def audit_records(self, trace_id: str | None = None, agent: str | None = None,
                      limit: int = 1000) -> Awaitable[list[AuditEntry]]:
        """See :meth:`reach.ports.audit.AuditPort.audit_records`."""
        return self.call("audit_records", trace_id, agent, limit)


class FakeA2ATasks(FakePort, A2ATaskPort):
    """The A2A gateway's tasks (kept by the session store, ``actors/sessions.py``)."""

    def a2a_save(self, task_id: str, owner: str, *, context_id: str, state: int,
                 updated: int | None, doc: bytes) -> Awaitable[None]:
        """See :meth:`reach.ports.a2a_tasks.A2ATaskPort.a2a_save`."""
        return self.call("a2a_save", task_id, owner, context_id=context_id, state=state,
                         updated=updated, doc=doc)

    def a2a_save_many(self, rows: list[A2ATaskRow]) -> Awaitable[list[bool]]:
        """See :meth:`reach.ports.a2a_tasks.A2ATaskPort.a2a_save_many`."""
        return self.call("a2a_save_many", rows)

    def a2a_get(self, task_id: str, owner: str) -> Awaitable[bytes | None]:
        """See :meth:`reach.ports.a2a_tasks.A2ATaskPort.a2a_get`."""
        return self.call("a2a_get", task_id, owner)

    def a2a_list(self, owner: str, *, context_id: str = "", state: int = 0,
                 updated_after: int | None = None, page_size: int,
                 after: A2ACursor | None = None, inclusive: bool = False,
                 ) -> Awaitable[tuple[list[bytes], A2ACursor | None, int]]:
        """See :meth:`reach.ports.a2a_tasks.A2ATaskPort.a2a_list`."""
        return self.call("a2a_list", owner, context_id=context_id, state=state,
                         updated_after=updated_after, page_size=page_size, after=after,
                         inclusive=inclusive)

    def a2a_delete(self, task_id: str, owner: str) -> Awaitable[bool]:
        """See :meth:`reach.ports.a2a_tasks.A2ATaskPort.a2a_delete`."""
        return self.call("a2a_delete", task_id, owner)

    def a2a_recent(self, limit: int) -> Awaitable[list[A2ATaskRow]]:
        """See :meth:`reach.ports.a2a_tasks.A2ATaskPort.a2a_recent`."""
        return self.call("a2a_recent", limit)


class FakeTraceStore(FakePort, TraceStorePort):
    """The trace store (``actors/trace_store.py``)."""

    def add_spans(self, spans: Sequence[SpanRecord]) -> Awaitable[None]:
        """See :meth:`reach.ports.traces.TraceStorePort.add_spans`."""
        return self.call("add_spans", spans)

    def trace(self, trace_id: str) -> Awaitable[list[SpanRecord]]:
        """See :meth:`reach.ports.traces.TraceStorePort.trace`."""
        return self.call("trace", trace_id)

    def find_traces(self, *, agent: str | None = None, capability: str | None = None,
                    task_id: str | None = None, status: SpanStatus | None = None,
                    since_ns: int | None = None, until_ns: int | None = None,
                    slowest: bool = False, limit: int = 50) -> Awaitable[list[TraceSummary]]:
        """See :meth:`reach.ports.traces.TraceStorePort.find_traces`."""
        return self.call("find_traces", agent=agent, capability=capability, task_id=task_id,
                         status=status, since_ns=since_ns, until_ns=until_ns, slowest=slowest,
                         limit=limit)

    def edges(self, since_ns: int) -> Awaitable[list[TraceEdge]]:
        """See :meth:`reach.ports.traces.TraceStorePort.edges`."""
        return self.call("edges", since_ns)

    def trace_stats(self) -> Awaitable[TraceStoreStats]:
        """See :meth:`reach.ports.traces.TraceStorePort.trace_stats`."""
        return self.call("trace_stats")


__all__ = ["FakeA2ATasks", "FakeAudit", "FakeSessions", "FakeTraceStore"]
