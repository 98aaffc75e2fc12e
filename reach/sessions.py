"""Durable sessions as a driver or an agent uses them.

A session is a conversation between two agents, opened with negotiated terms and kept by the
session store. Every turn sent through :meth:`Session.request` goes to the other party, is
appended (numbered by the session's sequence), recorded as pending until its reply comes, and
resent with the same request ID if the receiver dies mid-request; the receiver runs the handler of
a session request at most once, replaying its recorded reply to a resend. The pending record
always ends, once, as ``answered``, ``cancelled`` or (a request that killed its receiver's
process too often: :class:`~reach.errors.PoisonMessage`) ``failed``.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from pydantic import BaseModel

from policies.sessions import Terms
from reach._runtime.session_calls import CANCEL_SCHEMA, LIMITS_SCHEMA, finish, turn
from reach.client import Client, Payload
from reach.protocol import new_id
from reach.records import SessionContext, SessionResume
from reach.replies import Reply, read_reply
from reach.schemas import payload_body


class Session:
    """One open session, as one party (or the driver that opened it) sees it.

    Attributes:
        session_id: Its ID.
        terms: The negotiated terms.
        initiator: The party that opened it.
        responder: The party it was opened with.
    """

    def __init__(self, session_id: str, terms: Terms, initiator: str, responder: str,
                 client: Client) -> None:
        self.session_id = session_id
        self.terms = terms
        self.initiator = initiator
        self.responder = responder
        self._client = client

    @property
    def peer(self) -> str:
        """The party :meth:`request` sends to: the other one (the responder for a third party,
        such as the driver that opened a session between two agents)."""
        return self.initiator if self._client.sender == self.responder else self.responder

    async def append(self, sender: str, payload: Payload, schema: str = "", *,
                     kind: str = "message", msg_id: str | None = None) -> int:
        """Appends one message once committed; returns its sequence number.

        Raises:
            SessionNotFound: the session does not exist.
            UnknownSchema: ``payload`` is an unregistered model and no ``schema`` is given.
        """
        body, ref = payload_body(payload, schema or None)
        seqs = await self._client.courier.link.store.append(self.session_id, [{
            "msg_id": msg_id or new_id(), "sender": sender, "kind": kind, "payload": body,
            "schema": ref}])
        return seqs[0]

    async def context(self, last_n: int = 20) -> SessionContext:
        """The summary and the last ``last_n`` messages.

        Raises:
            SessionNotFound: the session does not exist.
        """
        return await self._client.courier.link.store.port.context(self.session_id, last_n)

    async def since(self, seq: int, limit: int | None = None) -> SessionResume:
        """Resumes after ``seq`` (with the summary when part of what follows was folded).

        Raises:
            SessionNotFound: the session does not exist.
        """
        return await self._client.courier.link.store.port.since(self.session_id, seq, limit)

    async def request(self, payload: Payload, schema: str | None = None, *,
                      returns: type[BaseModel] | None = None, timeout_ms: int | None = None,
                      to: str | None = None) -> Reply[Any]:
        """One turn: sends a request to :attr:`peer` (or to ``to``, for a session a driver
        carries through several agents) within the session and records both sides.

        The timeout is the session's negotiated one unless given. If the receiver dies
        mid-request, the same request is sent again once it is back (its handler runs at most
        once); if no answer comes before the deadline, the request is cancelled, with a notice
        to the receiver. A request that kills the receiver's next incarnation too (as many as
        the deployment's ``poison_after``) is not sent a third time.

        Raises:
            PoisonMessage: the request killed the receiver's process too often (the pending
                record then ends ``failed``).
            ReachError: the receiver's error, or RequestTimeout / AgentUnavailable when no
                answer came in time (the pending record then ends ``cancelled``).
        """
        courier = self._client.courier
        env = courier.build_request(to or self.peer, payload, schema,
                                    timeout_ms=timeout_ms or self.terms.timeout_ms,
                                    session_id=self.session_id)
        store = courier.link.store
        await store.append(self.session_id, [turn(env, "request")])
        await store.port.add_pending(
            env.msg_id, agent_id=courier.sender, receiver=env.receiver,
            session_id=self.session_id, envelope=env.model_dump(mode="json"),
            deadline=env.deadline)
        return read_reply(await finish(courier, env), returns)


async def open_session(client: Client, initiator: str, responder: str, terms: Terms,
                       session_id: str) -> Session:
    """Asks the responder for its limits, negotiates ``terms`` against them and records the
    session.

    Raises:
        SessionRefused: a setting the responder cannot accept (named in the error).
        AgentNotFound: the responder does not exist.
    """
    limits = await client.request(responder, {}, LIMITS_SCHEMA)
    opened = await client.courier.link.store.port.open_session(
        session_id, initiator, responder, asdict(terms), dict(limits.envelope.payload))
    return Session(opened["session_id"], Terms(**opened["terms"]), initiator, responder, client)


async def find_session(client: Client, session_id: str) -> Session:
    """A handle on an existing session, with its parties and terms.

    Raises:
        SessionNotFound: no such session.
    """
    ctx = await client.courier.link.store.port.context(session_id, 0)
    return Session(session_id, Terms(**ctx.terms), ctx.initiator, ctx.responder, client)


__all__ = ["CANCEL_SCHEMA", "LIMITS_SCHEMA", "Session", "find_session", "open_session"]
