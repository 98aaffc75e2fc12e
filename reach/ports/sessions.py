"""The port of the session store's sessions: sessions, pending requests and recorded replies."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import NotRequired, Protocol, TypedDict

from reach.ports.data import ErrorDoc, JsonObject
from reach.records import SessionContext, SessionResume


class NewMessage(TypedDict):
    """A message to append to a session (the store numbers it); its ``kind`` is ``message``
    unless given (a session turn is a ``request`` or a ``reply``)."""

    msg_id: str
    sender: str
    payload: JsonObject
    kind: NotRequired[str]
    schema: NotRequired[str]


class TermsDoc(TypedDict):
    """Negotiated terms, as :class:`policies.sessions.Terms` fields."""

    message_format: str
    max_message_bytes: int
    timeout_ms: int
    streaming: bool


class OpenedSession(TypedDict):
    """A session opened: its ID and the terms agreed."""

    session_id: str
    terms: TermsDoc


class PendingRequest(TypedDict):
    """A session request sent and not yet answered."""

    request_id: str
    receiver: str
    session_id: str
    envelope: dict[str, object]
    deadline: float | None


class RecordedReply(TypedDict):
    """The reply recorded for a request: who answered, with what."""

    agent_id: str
    payload: dict[str, object]
    schema: str


class CommittedReply(TypedDict):
    """What :meth:`SessionsPort.commit_reply` did: whether this reply is now the recorded one,
    and the recorded reply (None when a later claim fenced this one off and nothing is recorded
    yet)."""

    committed: bool
    reply: RecordedReply | None


class StoreStats(TypedDict):
    """The session store's commits, rows written, database and process (for tools and tests)."""

    commits: int
    written: int
    path: str
    group_commit: bool
    pid: int


class SessionsPort(Protocol):
    """The session store's sessions, the requests pending in them and their recorded replies,
    and the store's own health."""

    def open_session(self, session_id: str, initiator: str, responder: str, offer: JsonObject,
                     limits: JsonObject) -> Awaitable[OpenedSession]:
        """Negotiates the initiator's offer (:class:`policies.sessions.Terms` fields) against the
        responder's limits (:class:`policies.sessions.Limits` fields) and records the session
        (idempotent for the same ID); its ID and agreed terms."""
        ...

    def append_many(self, appends: list[tuple[str, list[NewMessage]]],
                    ) -> Awaitable[list[list[int] | ErrorDoc]]:
        """Several appends (``(session_id, messages)``); each gets its sequence numbers or its
        error's info."""
        ...

    def context(self, session_id: str, last_n: int = 20) -> Awaitable[SessionContext]:
        """The summary and the last ``last_n`` messages."""
        ...

    def since(self, session_id: str, seq: int,
              limit: int | None = None) -> Awaitable[SessionResume]:
        """What follows ``seq``."""
        ...

    def add_pending(self, request_id: str, *, agent_id: str, receiver: str, session_id: str,
                    envelope: JsonObject, deadline: float | None) -> Awaitable[None]:
        """Records a request sent and not yet answered."""
        ...

    def resolve_pending(self, request_id: str, status: str) -> Awaitable[bool]:
        """Ends a pending request (``answered``, ``cancelled`` or ``failed``); False if it had
        ended."""
        ...

    def pending_for(self, agent_id: str) -> Awaitable[list[PendingRequest]]:
        """Open requests an agent had sent, oldest first."""
        ...

    def pending_status(self, request_id: str) -> Awaitable[str | None]:
        """``open``, ``answered``, ``cancelled`` or ``failed`` (None if never recorded)."""
        ...

    def reply_for(self, request_id: str) -> Awaitable[RecordedReply | None]:
        """The recorded reply of a request, or None."""
        ...

    def claim(self, request_id: str, agent_id: str) -> Awaitable[int]:
        """Claims a request to run its handler; a fencing token, greater than every earlier
        claim's of the request (durably)."""
        ...

    def commit_reply(self, request_id: str, token: int, agent_id: str, payload: JsonObject,
                     schema: str) -> Awaitable[CommittedReply]:
        """Records a handler's reply if ``token`` is still the request's latest claim and no
        reply is recorded yet."""
        ...

    def integrity(self) -> Awaitable[str]:
        """``ok`` when the database's integrity check finds nothing wrong."""
        ...

    def stats(self) -> Awaitable[StoreStats]:
        """Commits, rows written, the database's path and the store's process."""
        ...


__all__ = [
    "CommittedReply",
    "NewMessage",
    "OpenedSession",
    "PendingRequest",
    "RecordedReply",
    "SessionsPort",
    "StoreStats",
    "TermsDoc",
]
