"""What the session store folds a session's oldest messages into: a new summary, from the
deterministic default (:func:`policies.sessions.default_summary`) or from an agent.

A summariser agent answers ``reach.summarise@1.0`` requests (``{"summary": str, "messages":
[...]}``) with ``{"summary": str}``. The store asks it over reach's own client, as the endpoint
its replies go to: they come back through the store's ``deliver``, which hands them to
:meth:`Summariser.accept`.
"""

from __future__ import annotations

from typing import Any

from policies.sessions import default_summary
from reach._runtime.directory import Directory
from reach._runtime.transport import Transport
from reach.client import Client, Link
from reach.ports.cluster import Cluster

#: What a summariser agent reads: {"summary": str, "messages": [...]}; it answers {"summary"}.
SUMMARISE_SCHEMA = "reach.summarise@1.0"


class Summariser:
    """Summaries for compaction.

    Args:
        cluster: Where the summariser agent is.
        name: The store's endpoint name, where the agent's replies are sent.
        agent: The summariser agent's ID; None for the deterministic default.
    """

    def __init__(self, cluster: Cluster, name: str, agent: str | None) -> None:
        self.cluster = cluster
        self.name = name
        self.agent = agent
        self._link: Link | None = None

    async def summarise(self, previous: str, messages: list[dict[str, Any]]) -> str:
        """The summary of ``previous`` followed by ``messages``.

        Raises:
            ReachError: the summariser agent failed or did not answer.
        """
        if self.agent is None:
            return default_summary(previous, messages)
        reply = await self._client().request(
            self.agent, {"summary": previous, "messages": messages}, SUMMARISE_SCHEMA)
        return str(reply.envelope.payload["summary"])

    def accept(self, frame: bytes) -> None:
        """Takes a frame of the agent's replies (nothing was asked yet: it is dropped)."""
        if self._link is not None:
            self._link.transport.accept_frame(frame)

    def _client(self) -> Client:
        """A client for asking the summariser agent; the store is its reply endpoint."""
        if self._link is None:
            directory = Directory(self.cluster.registry())
            transport = Transport(self.name, self.cluster,
                                  on_dead_endpoint=directory.drop_endpoint)
            self._link = Link(self.cluster, transport, directory)
        return Client(self._link, self.name)
