"""What the cluster's HTTP ingress serves: an ASGI application, one instance a replica."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Protocol

#: An ASGI scope, or message.
_AsgiMapping = MutableMapping[str, object]
#: An ASGI application: ``await app(scope, receive, send)``.
AsgiApp = Callable[[_AsgiMapping, Callable[[], Awaitable[_AsgiMapping]],
                    Callable[[_AsgiMapping], Awaitable[None]]], Awaitable[None]]


class HttpService(Protocol):
    """One replica of an application served over the cluster's HTTP ingress
    (:meth:`~reach.ports.cluster.Cluster.serve`): built from the arguments ``serve`` was given,
    in a process of its own."""

    @property
    def app(self) -> AsgiApp:
        """The ASGI application the replica serves."""
        ...

    async def health(self) -> None:
        """Returns while the replica is healthy; raises when it is not (it is then replaced)."""
        ...

    async def close(self) -> None:
        """Releases what the replica holds, as it stops."""
        ...


@dataclass(frozen=True)
class ServiceSettings:
    """How the cluster's HTTP ingress serves an application
    (:meth:`~reach.ports.cluster.Cluster.serve`).

    Attributes:
        replicas: Replicas serving it, each a process (requests are spread over them).
        route_prefix: The path it answers under.
        max_ongoing: Requests one replica carries at once.
        max_queued: Requests queued for the replicas beyond that (-1: no bound).
        env: Environment variables of each replica's process.
        server_defaults: Settings each replica's own HTTP server (uvicorn) takes as defaults
            of its ``uvicorn.Config``, for what the platform gives no setting of its own (a
            WebSocket frame limit).
    """

    replicas: int = 1
    route_prefix: str = "/"
    max_ongoing: int = 100
    max_queued: int = -1
    env: Mapping[str, str] = field(default_factory=dict)
    server_defaults: Mapping[str, object] = field(default_factory=dict)


__all__ = ["AsgiApp", "HttpService", "ServiceSettings"]
