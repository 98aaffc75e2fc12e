"""What a remote agent's handler gets: :class:`RemoteContext`, as a :class:`reach.Context` inside
the cluster.

It holds the request's headers and deadline, and sends on the agent's behalf through the agent's
runner (:class:`~reach.remote.agent_runner.RemoteAgentRunner`): by ID, by capability, or as a
notification, keeping the trace, extending the hop chain, never past the request's deadline.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from pydantic import BaseModel

from reach.protocol import Envelope, MsgType
from reach.remote.wire import CAPABILITY_PREFIX
from reach.replies import Reply, read_reply


class Runner(Protocol):
    """What a context needs of its agent's runner."""

    agent_id: str
    clock: Callable[[], float]

    def send(self, env: Envelope) -> None:
        """Queues an envelope to send."""
        ...

    async def call(self, env: Envelope) -> Envelope:
        """Sends a request; its reply (raising the error a reply of an error carries)."""
        ...


class RemoteContext:
    """What a remote agent's handler gets, as a :class:`reach.Context` inside the cluster: the
    request's headers and deadline, and a client that sends on the agent's behalf (keeping the
    trace, extending the hop chain, never past the request's deadline)."""

    def __init__(self, runner: Runner, request: Envelope,
                 deadline: float | None) -> None:
        self._runner = runner
        self.parent = request
        self._deadline = deadline

    @property
    def agent_id(self) -> str:
        """ID of the agent handling the request."""
        return self._runner.agent_id

    @property
    def request_envelope(self) -> Envelope:
        """The envelope being handled."""
        return self.parent

    @property
    def trace_id(self) -> str:
        """The call chain's trace ID."""
        return self.parent.trace_id

    def remaining_ms(self) -> float | None:
        """Milliseconds left before the deadline (None for a notification)."""
        return None if self._deadline is None else (self._deadline - self._runner.clock()) * 1000

    def _envelope(self, kind: MsgType, receiver: str, payload: BaseModel | Mapping[str, Any],
                  schema: str | None, timeout_ms: int | None) -> Envelope:
        fields: dict[str, Any] = {"trace_id": self.parent.trace_id,
                                  "hops": (*self.parent.hops, self.agent_id)}
        if self.parent.session_id is not None:
            fields["session_id"] = self.parent.session_id
        now = self._runner.clock()
        if kind is MsgType.NOTIFICATION:
            return Envelope.notification(self.agent_id, receiver, payload, schema, timestamp=now,
                                         **fields)
        left = self.remaining_ms()
        budget = timeout_ms or 30_000
        if left is not None:
            budget = max(1, min(budget, int(left)))
        return Envelope.request(self.agent_id, receiver, payload, schema, timeout_ms=budget,
                                timestamp=now, **fields)

    async def request(self, agent_id: str, payload: BaseModel | Mapping[str, Any],
                      schema: str | None = None, *, returns: type[BaseModel] | None = None,
                      timeout_ms: int | None = None) -> Reply[Any]:
        """Sends a request to one agent by ID and returns its reply.

        Raises:
            ReachError: as :meth:`reach.Client.request` (the error the gateway or the callee
                answered with, typed).
        """
        env = self._envelope(MsgType.REQUEST, agent_id, payload, schema, timeout_ms)
        return read_reply(await self._runner.call(env), returns)

    async def request_capability(self, capability: str, payload: BaseModel | Mapping[str, Any],
                                 schema: str | None = None, *,
                                 returns: type[BaseModel] | None = None,
                                 timeout_ms: int | None = None) -> Reply[Any]:
        """Sends a request to the least-loaded online holder of a capability.

        Raises:
            NoCapableAgent: nobody online holds it.
            ReachError: as :meth:`request`.
        """
        return await self.request(f"{CAPABILITY_PREFIX}{capability}", payload, schema,
                                  returns=returns, timeout_ms=timeout_ms)

    async def notify(self, agent_id: str, payload: BaseModel | Mapping[str, Any],
                     schema: str | None = None) -> None:
        """Sends a notification (no reply) to one agent by ID."""
        self._runner.send(self._envelope(MsgType.NOTIFICATION, agent_id, payload, schema, None))
