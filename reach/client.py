"""Sending: to one agent by ID, to holders of a capability, broadcast, notify, stream.

A :class:`Client` is how a driver talks to agents; a :class:`~reach.context.Context` is the same
thing inside a handler, where requests inherit the trace, extend the hop chain and never outlive
the request being handled. Routing is location-transparent: an agent ID is resolved to its host
through the directory's cache (:mod:`reach._runtime.directory`) and the envelope goes straight to
that host. A client is built on the runtime's send path, its
:class:`~reach._runtime.courier.Courier`, which sessions and tasks use for the envelopes they
build themselves. Every reply arrives as a :class:`Reply`: the typed model the handler returned
(known from the schema registry), with the envelope at hand for its headers.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any, TypeVar, overload

from pydantic import BaseModel

from policies.routing import DEFAULT_MAX_HOPS
from reach._runtime.courier import Courier
from reach._runtime.directory import PICK_FROM
from reach._runtime.link import Link
from reach.errors import ProtocolError, ReachError
from reach.protocol import Envelope
from reach.records import AgentRecord
from reach.replies import Reply, read_reply
from reach.schemas import PayloadLike

M = TypeVar("M", bound=BaseModel)

#: What a payload may be: a registered model, or a mapping (with its schema named beside it).
Payload = PayloadLike


class Client:
    """Sends requests and notifications on behalf of ``sender``.

    Args:
        link: The process's link.
        sender: The sending agent's (or driver's) ID.
        parent: The request being handled, for a handler's context.
        trace_id: A trace for every message this client sends (a task's), when no parent.
    """

    def __init__(self, link: Link, sender: str, parent: Envelope | None = None,
                 trace_id: str | None = None) -> None:
        #: The send path this client is built on (for the envelopes sessions build themselves).
        self.courier = Courier(link, sender, parent, trace_id)

    @property
    def sender(self) -> str:
        """ID of the agent (or driver) this client sends for."""
        return self.courier.sender

    @property
    def parent(self) -> Envelope | None:
        """The request being handled (a handler's context), or None."""
        return self.courier.parent

    @property
    def trace_id(self) -> str | None:
        """Trace ID shared by the call chain (None for a driver outside any call)."""
        return self.courier.trace_id

    # -- by ID ---------------------------------------------------------------------------------

    @overload
    async def request(self, agent_id: str, payload: Payload, schema: str | None = None, *,
                      returns: type[M], timeout_ms: int | None = None,
                      msg_id: str | None = None) -> Reply[M]: ...

    @overload
    async def request(self, agent_id: str, payload: Payload, schema: str | None = None, *,
                      returns: None = None, timeout_ms: int | None = None,
                      msg_id: str | None = None) -> Reply[Any]: ...

    async def request(self, agent_id: str, payload: Payload, schema: str | None = None, *,
                      returns: type[BaseModel] | None = None, timeout_ms: int | None = None,
                      msg_id: str | None = None) -> Reply[Any]:
        """Sends a request to one agent by ID and returns its reply.

        Args:
            agent_id: The agent.
            payload: A registered model, or a mapping with ``schema``.
            schema: The payload's ``name@MAJOR.MINOR`` (for a mapping).
            returns: The model to read the reply as (default: the one registered for the
                reply's schema).
            timeout_ms: The request's budget (default: the runtime's, never past a parent's).
            msg_id: The request's ID; give the same one to a retry of the same request (an
                effectively-once handler then answers it once).

        Raises:
            AgentNotFound: no agent has that ID.
            AgentUnavailable: its host is dead or unreachable, or it is restarting past the
                deadline (retryable).
            RequestTimeout: no reply before the deadline (retryable).
            LoopDetected: the call would close a cycle or exceed the hop limit.
            InvalidPayload: the reply does not validate as ``returns``.
            ReachError: the handler's error, typed, with its severity.
        """
        return await self._send_request(agent_id, payload, schema, returns, timeout_ms, msg_id)

    async def _send_request(self, agent_id: str, payload: Payload, schema: str | None,  # noqa: PLR0917 - request's own arguments, in order
                       returns: type[BaseModel] | None, timeout_ms: int | None,
                       msg_id: str | None = None, capability: str | None = None) -> Reply[Any]:
        """:meth:`request`, to ``agent_id`` chosen for ``capability`` when given."""
        courier = self.courier
        env = courier.build_request(agent_id, payload, schema, timeout_ms=timeout_ms,
                                    msg_id=msg_id)
        return read_reply(await courier.call(env, capability, fresh=True), returns)

    # -- by capability -------------------------------------------------------------------------

    @overload
    async def request_capability(self, capability: str, payload: Payload,
                                 schema: str | None = None, *, returns: type[M],
                                 text: str | None = None, timeout_ms: int | None = None,
                                 ) -> Reply[M]: ...

    @overload
    async def request_capability(self, capability: str, payload: Payload,
                                 schema: str | None = None, *, returns: None = None,
                                 text: str | None = None, timeout_ms: int | None = None,
                                 ) -> Reply[Any]: ...

    async def request_capability(self, capability: str, payload: Payload,
                                 schema: str | None = None, *,
                                 returns: type[BaseModel] | None = None, text: str | None = None,
                                 timeout_ms: int | None = None) -> Reply[Any]:
        """Sends a request to the least-loaded online holder of a capability, at the best
        priority that has one (a backup only while no better holder is online).

        Args:
            capability: A tag (``order.query``), a parent tag (``order``) or a separator
                variant (``order_query``).
            text: Words that rank holders by their descriptions.

        Raises:
            NoCapableAgent: nobody online holds the capability (names the closest tags).
            ReachError: as for :meth:`request`.
        """
        holders = await self.courier.link.directory.holders(capability, text)
        (picked,) = _pick(self.courier.link, capability, holders, 1)
        return await self._send_request(picked.agent_id, payload, schema, returns, timeout_ms,
                                   capability=capability)

    async def fanout(self, capability: str, payload: Payload, schema: str | None = None, *,
                     fanout_limit: int, returns: type[BaseModel] | None = None,
                     text: str | None = None, timeout_ms: int | None = None,
                     ) -> list[Reply[Any] | ReachError]:
        """Sends a request to the ``fanout_limit`` least-loaded online holders of a capability,
        filled from the best priority first.

        Returns the replies in the order of the agents picked; a failed agent's place holds its
        typed error.

        Raises:
            ProtocolError: ``fanout_limit`` is below 1.
            NoCapableAgent: nobody online holds the capability (names the closest tags).
        """
        link = self.courier.link
        holders = await link.directory.holders(capability, text, max(PICK_FROM, fanout_limit))
        picked = _pick(link, capability, holders, fanout_limit)
        return await self._gather(picked, payload, schema, returns, timeout_ms, capability)

    async def broadcast(self, capability: str, payload: Payload, schema: str | None = None, *,
                        returns: type[BaseModel] | None = None, timeout_ms: int | None = None,
                        ) -> list[Reply[Any] | ReachError]:
        """Sends a request to every online holder of a capability; gathers replies and errors.

        Raises:
            NoCapableAgent: nobody online holds the capability.
        """
        holders = await self.courier.link.directory.holders(capability, limit=None)
        return await self._gather(holders, payload, schema, returns, timeout_ms, capability)

    async def _gather(self, agents: list[AgentRecord], payload: Payload, schema: str | None,  # noqa: PLR0917 - the sends' own arguments, in order
                      returns: type[BaseModel] | None, timeout_ms: int | None,
                      capability: str) -> list[Reply[Any] | ReachError]:
        calls = [self._send_request(a.agent_id, payload, schema, returns, timeout_ms,
                               capability=capability) for a in agents]
        results = await asyncio.gather(*calls, return_exceptions=True)
        out: list[Reply[Any] | ReachError] = []
        for res in results:
            if isinstance(res, BaseException) and not isinstance(res, ReachError):
                raise res
            out.append(res)
        return out

    async def discover(self, capability: str, text: str | None = None) -> list[AgentRecord]:
        """Online holders of a capability, best first: the best priority first, then least
        loaded (each record's ``priorities`` tell its capabilities' priorities).

        Raises:
            NoCapableAgent: nobody online holds it.
        """
        return list(await self.courier.link.directory.holders(capability, text, limit=None))

    # -- one way, and streams ------------------------------------------------------------------

    async def notify(self, agent_id: str, payload: Payload, schema: str | None = None) -> None:
        """Sends a notification (no reply) to one agent by ID.

        A notification that cannot be handed over, now or after it left, is kept as a dead
        letter with its reason.

        Raises:
            AgentNotFound: no agent has that ID.
            AgentUnavailable: it is offline, or its host is gone.
        """
        courier = self.courier
        await courier.post(courier.build_notification(agent_id, payload, schema), fresh=True)

    async def stream(self, agent_id: str, payload: Payload, schema: str | None = None, *,
                     returns: type[BaseModel] | None = None, timeout_ms: int | None = None,
                     ) -> AsyncIterator[Reply[Any]]:
        """Requests a streamed reply and yields its chunks as they arrive.

        Raises:
            AgentUnavailable: the agent moved or died mid-stream (retry the stream).
            RequestTimeout: the deadline passed before the stream ended.
            ReachError: an error mid-stream, after the chunks already sent.
        """
        courier = self.courier
        env = courier.build_request(agent_id, payload, schema, timeout_ms=timeout_ms)
        async with contextlib.aclosing(courier.stream(env, fresh=True)) as chunks:
            async for chunk in chunks:
                yield read_reply(chunk, returns)


def _pick(link: Link, capability: str, holders: list[AgentRecord], k: int,
          ) -> list[AgentRecord]:
    if k < 1:
        raise ProtocolError(f"fanout_limit must be at least 1, got {k}")
    return link.pick(capability, holders, k)


__all__ = ["DEFAULT_MAX_HOPS", "Client", "Link", "Payload"]
