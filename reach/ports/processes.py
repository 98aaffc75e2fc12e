"""A process a feature starts from a class of its own, and calls by method name."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Protocol


class Process(Protocol):
    """A process a feature started from a class of its own
    (:meth:`~reach.ports.cluster.Cluster.start_process`), called by method name: the feature
    wraps it in a typed adapter of its own port (as :class:`reach.remote.ports.RemoteHostClient`
    does).

    Attributes:
        name: Its name (an endpoint's, when the class is a host).
    """

    name: str

    def call(self, method: str, *args: object) -> Awaitable[object]:
        """Starts a call of the process's method ``method`` with ``args`` (under way when this
        returns); awaiting it gives what the method returned, or its failure: the method's own
        exception, or AgentUnavailable when the process is dead or unreachable."""
        ...


__all__ = ["Process"]
