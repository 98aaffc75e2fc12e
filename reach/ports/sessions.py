"""The port of the session store's sessions: sessions, pending requests and recorded replies."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, Protocol

from reach.ports.a2a_tasks import A2ATaskPort
from reach.ports.audit import AuditPort
from reach.ports.endpoint import Endpoint
from reach.records import SessionContext, SessionResume


class SessionsPort(Protocol):
    """The session store's sessions, the requests pending in them and their recorded replies."""

    def open_session(self, session_id: str, initiator: str, responder: str,
                     terms: dict[str, Any], limits: dict[str, Any]) -> Awaitable[dict[str, Any]]:
        """Negotiates and records a session; its ID and agreed terms."""
        ...

    def append_many(self, appends: list[tuple[str, list[dict[str, Any]]]],
                    ) -> Awaitable[list[list[int] | dict[str, Any]]]:
        """Several appends; each gets its sequence numbers or its error's info."""
        ...

    def context(self, session_id: str, last_n: int) -> Awaitable[SessionContext]:
        """The summary and the last ``last_n`` messages."""
        ...

    def since(self, session_id: str, seq: int, limit: int | None) -> Awaitable[SessionResume]:
        """What follows ``seq``."""
        ...

    def add_pending(self, request_id: str, *, agent_id: str, receiver: str, session_id: str,
                    envelope: dict[str, Any], deadline: float | None) -> Awaitable[None]:
        """Records a request sent and not yet answered."""
        ...

    def resolve_pending(self, request_id: str, status: str) -> Awaitable[bool]:
        """Ends a pending request (answered or cancelled); False if it had ended."""
        ...

    def pending_for(self, agent_id: str) -> Awaitable[list[dict[str, Any]]]:
        """Open requests an agent had sent, oldest first."""
        ...

    def reply_for(self, request_id: str) -> Awaitable[dict[str, Any] | None]:
        """The recorded reply of a request (``agent_id``, ``payload``, ``schema``), or None."""
        ...

    def claim(self, request_id: str, agent_id: str) -> Awaitable[int]:
        """Claims a request to run its handler; a fencing token, greater than every earlier
        claim's of the request (durably)."""
        ...

    def commit_reply(self, request_id: str, token: int, agent_id: str, payload: dict[str, Any],
                     schema: str) -> Awaitable[dict[str, Any]]:
        """Records a handler's reply if ``token`` is still the request's latest claim and no
        reply is recorded yet: ``{"committed": bool, "reply": <the recorded reply or None>}``."""
        ...


class StorePort(SessionsPort, AuditPort, A2ATaskPort, Endpoint, Protocol):
    """The session store: sessions, pending requests, recorded replies, the audit log, and the
    A2A gateway's tasks (each a serialized ``Task``, owned by one caller)."""


__all__ = ["SessionsPort", "StorePort"]
