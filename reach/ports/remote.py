"""The port of the host of a gateway replica's remote agents."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, Protocol

from reach.ports.hosts import HostPort

if TYPE_CHECKING:
    from reach.remote.wire import Attached, Hello, WireRefusal


class RemoteHostPort(HostPort, Protocol):
    """The host of the remote agents connected through one gateway replica (one per replica).

    The replica holds the WebSockets and only bridges them; this host registers the agents,
    heartbeats their loads, queues what is sent to them (a bounded queue each), sends what they
    send into reach, and is watched like any host (an agent's disconnect is its death once the
    grace period passes; a reconnect within it is its restart). Calls about a connection name it
    (``conn``, from :meth:`attach`): a call about a replaced connection does nothing.
    """

    def attach(self, hello: Hello, principal: str) -> Awaitable[Attached | WireRefusal]:
        """Verifies a hello (signature, window, nonce) and registers its agent (or restarts it,
        within its grace period); the refusal, audited, when it cannot."""
        ...

    def take(self, ready: dict[str, str]) -> Awaitable[dict[str, str | None]]:
        """A long poll over the replica's connections able to write (``{agent_id: conn}``):
        waits until one has envelopes queued, then returns, for each that has, the text of one
        ``envelope`` or ``batch`` frame of them, and None for each connection that is over
        (replaced, removed, stopped); returns at once, possibly empty, when poked."""
        ...

    def poke(self) -> Awaitable[None]:
        """Ends the poll in progress (the replica's set of ready connections grew)."""
        ...

    def put(self, batches: list[tuple[str, str, list[dict[str, Any]]]],
            ) -> Awaitable[dict[str, list[dict[str, Any]]]]:
        """Takes envelopes agents sent (``[(agent_id, conn, envelopes)]``: replies, requests,
        notifications) into reach; the ``error`` frames of those refused, by agent."""
        ...

    def detach(self, agent_id: str, conn: str, reason: str, goodbye: bool) -> Awaitable[None]:
        """The connection ended: with ``goodbye`` the agent leaves now (a normal exit), else it
        may come back within the grace period."""
        ...

    def refused(self, principal: str, agent_id: str, reason: str) -> Awaitable[None]:
        """Audits a connection the replica refused by itself (malformed or oversize frames, a
        frame after goodbye, a missing token)."""
        ...

    def hand_over(self, agent_id: str, to: str) -> Awaitable[list[list[Any]] | None]:
        """Lets a disconnected agent in its grace period go to the host ``to`` it reconnected
        through (another replica's): its open requests and queued envelopes as
        ``[reply_to, taken, envelope]`` (``reply_to`` None for what is not a request), not
        failed; its watchers see its restart. None if it is connected here, or not here."""
        ...


__all__ = ["RemoteHostPort"]
