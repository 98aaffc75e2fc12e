"""A handler's view of the request it handles, and its way to call other agents."""

from __future__ import annotations

from reach import clock
from reach._runtime.link import Link
from reach._runtime.names import supervisor_name
from reach.client import Client
from reach.protocol import Envelope
from reach.sessions import Session, find_session
from reach.supervision import SupervisorRef


class Context(Client):
    """What a handler gets with each request: the request's headers and deadline, its session,
    and a client that sends on the agent's behalf (keeping the trace, extending the hop chain,
    never outliving the request).
    """

    def __init__(self, link: Link, agent_id: str, request: Envelope) -> None:
        super().__init__(link, agent_id, request)
        self._request = request

    @property
    def parent(self) -> Envelope:
        """The request being handled."""
        return self._request

    @property
    def agent_id(self) -> str:
        """ID of the agent handling the request."""
        return self.sender

    @property
    def request_envelope(self) -> Envelope:
        """The envelope being handled."""
        return self._request

    @property
    def deadline(self) -> float | None:
        """Deadline of the request being handled (epoch seconds)."""
        return self.parent.deadline

    def remaining_ms(self) -> float | None:
        """Milliseconds left before the deadline (None for a notification)."""
        return self.parent.remaining_ms(clock.now())

    async def session(self) -> Session | None:
        """The session the request belongs to, with its parties and negotiated terms (so that
        :meth:`Session.request` answers back within them), or None outside a session.

        Raises:
            SessionNotFound: the session is gone from the store.
        """
        if self.parent.session_id is None:
            return None
        return await find_session(self, self.parent.session_id)

    def supervisor(self, name: str) -> SupervisorRef:
        """A running supervisor by name (to submit tasks it owns).

        Raises:
            AgentNotFound: no supervisor of that name is running.
        """
        return SupervisorRef(self.courier.link.cluster.supervisor(supervisor_name(name)), name)


__all__ = ["Context"]
