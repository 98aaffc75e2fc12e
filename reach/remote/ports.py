"""The remote host's port: what a gateway replica (and another replica's host) asks of the host
of the agents connected through it, and the typed adapter that makes those calls on its process.

The host runs as a process the cluster starts from a class it is given
(:meth:`reach.ports.cluster.Cluster.start_process`: a Ray actor on Ray, an object in the test's loop
on the fake cluster), whose handle knows calls by method name only
(:class:`reach.ports.processes.Process`). :class:`RemoteHostClient` gives that handle this feature's
types, and mypy checks it against :class:`RemoteHostPort`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from typing import Any, Protocol, cast

from reach.agent import Agent
from reach.ports.endpoint import Delivered
from reach.ports.hosts import HandlerDoc, HostInfo, HostPort
from reach.ports.processes import Process
from reach.records import AgentExit, AgentRecord
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


class RemoteHostClient(RemoteHostPort):
    """A :class:`RemoteHostPort` over the process of a remote host: each method starts the
    call of the host's method of the same name, with the same arguments in the same order, and
    returns it under way (the port's docstrings say what each returns).

    Args:
        process: The handle of the host's process.

    Attributes:
        name: The host's name (where replies to it are sent).
        process: The handle.
    """

    __slots__ = ("name", "process")

    def __init__(self, process: Process) -> None:
        self.process = process
        self.name = process.name

    # -- an endpoint and a host, as every host ---------------------------------------------------

    def deliver(self, frame: bytes, reply_to: str) -> Awaitable[Delivered]:
        return cast("Awaitable[Delivered]", self.process.call("deliver", frame, reply_to))

    def watch(self) -> Awaitable[None]:
        return cast("Awaitable[None]", self.process.call("watch"))

    def add_agents(  # noqa: PLR0917 - a process call carries its arguments positionally
        self, cls: type[Agent], agent_ids: list[str], args: tuple[object, ...],
        kwargs: dict[str, object], epochs: dict[str, int] | None = None,
        priority: int | Mapping[str, int] | None = None,
    ) -> Awaitable[list[AgentRecord]]:
        return cast("Awaitable[list[AgentRecord]]",
                    self.process.call("add_agents", cls, agent_ids, args, kwargs, epochs,
                                      priority))

    def remove_agents(self, agent_ids: list[str], timeout_s: float = 5.0) -> Awaitable[int]:
        return cast("Awaitable[int]", self.process.call("remove_agents", agent_ids, timeout_s))

    def watch_agent(self, agent_id: str) -> Awaitable[AgentExit]:
        return cast("Awaitable[AgentExit]", self.process.call("watch_agent", agent_id))

    def cancel_trace(self, trace_id: str, reason: str) -> Awaitable[int]:
        return cast("Awaitable[int]", self.process.call("cancel_trace", trace_id, reason))

    def count(self) -> Awaitable[int]:
        return cast("Awaitable[int]", self.process.call("count"))

    def quarantine(self, agent_id: str, prints: dict[str, tuple[int, float]]) -> Awaitable[int]:
        return cast("Awaitable[int]", self.process.call("quarantine", agent_id, prints))

    def stop(self, timeout_s: float = 5.0) -> Awaitable[None]:
        return cast("Awaitable[None]", self.process.call("stop", timeout_s))

    def flush_audit(self) -> Awaitable[int]:
        return cast("Awaitable[int]", self.process.call("flush_audit"))

    def info(self) -> Awaitable[HostInfo]:
        return cast("Awaitable[HostInfo]", self.process.call("info"))

    def describe(self, agent_ids: list[str]) -> Awaitable[dict[str, list[HandlerDoc]]]:
        return cast("Awaitable[dict[str, list[HandlerDoc]]]",
                    self.process.call("describe", agent_ids))

    def offer_as_spare(self, shape: str) -> Awaitable[None]:
        return cast("Awaitable[None]", self.process.call("offer_as_spare", shape))

    def preload(self, classes: list[type[Agent]]) -> Awaitable[int]:
        return cast("Awaitable[int]", self.process.call("preload", classes))

    # -- the remote host's own -----------------------------------------------------------------

    def attach(self, hello: Hello, principal: str) -> Awaitable[Attached | WireRefusal]:
        return cast("Awaitable[Attached | WireRefusal]",
                    self.process.call("attach", hello, principal))

    def take(self, ready: dict[str, str]) -> Awaitable[dict[str, str | None]]:
        return cast("Awaitable[dict[str, str | None]]", self.process.call("take", ready))

    def poke(self) -> Awaitable[None]:
        return cast("Awaitable[None]", self.process.call("poke"))

    def put(self, batches: list[tuple[str, str, list[dict[str, Any]]]],
            ) -> Awaitable[dict[str, list[dict[str, Any]]]]:
        return cast("Awaitable[dict[str, list[dict[str, Any]]]]",
                    self.process.call("put", batches))

    def detach(self, agent_id: str, conn: str, reason: str, goodbye: bool) -> Awaitable[None]:
        return cast("Awaitable[None]",
                    self.process.call("detach", agent_id, conn, reason, goodbye))

    def refused(self, principal: str, agent_id: str, reason: str) -> Awaitable[None]:
        return cast("Awaitable[None]", self.process.call("refused", principal, agent_id, reason))

    def hand_over(self, agent_id: str, to: str) -> Awaitable[list[list[Any]] | None]:
        return cast("Awaitable[list[list[Any]] | None]",
                    self.process.call("hand_over", agent_id, to))


__all__ = ["RemoteHostClient", "RemoteHostPort"]
