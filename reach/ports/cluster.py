"""The Cluster: finds, creates, watches and kills reach's processes, and hands out their ports."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from reach.ports.a2a_tasks import A2ATaskPort
from reach.ports.audit import AuditPort
from reach.ports.endpoint import Endpoint
from reach.ports.hosts import CallLimits, HostPort, HostShape
from reach.ports.inbox import InboxPort
from reach.ports.registry import RegistryPort
from reach.ports.remote import RemoteHostPort
from reach.ports.sessions import SessionsPort
from reach.ports.supervisors import SupervisorPort
from reach.specs import SupervisorSpec

if TYPE_CHECKING:
    from reach.security.guard import Guard, SecurityConfig
    from reach.web.options import GatewayOptions


@dataclass(frozen=True)
class NodeInfo:
    """A node of the cluster: its ID, whether it is alive, and its total resources."""

    node_id: str
    alive: bool
    resources: Mapping[str, float]


class Cluster(Protocol):
    """Finds, creates, watches and kills reach's processes, and hands out their ports (one per
    concern: the session store's three are handed out apart, so that each user depends on the
    one it uses).

    A Cluster pickles: a host or supervisor is started with its creator's cluster and uses it
    to reach the others; the deployment's security settings travel with it.

    Attributes:
        security: The deployment's security settings.
    """

    security: SecurityConfig

    def guard(self) -> Guard | None:
        """This process's guard for the deployment (None when signing is off)."""
        ...

    def registry(self) -> RegistryPort:
        """The registry."""
        ...

    def sessions(self) -> SessionsPort:
        """The session store's sessions.

        Raises:
            SessionNotFound: no session store runs.
        """
        ...

    def a2a_tasks(self) -> A2ATaskPort:
        """The A2A gateway's task storage (in the session store).

        Raises:
            SessionNotFound: no session store runs.
        """
        ...

    def audit_log(self) -> AuditPort:
        """The audit log (in the session store).

        Raises:
            SessionNotFound: no session store runs.
        """
        ...

    def endpoint(self, name: str) -> Endpoint:
        """A named endpoint (host, inbox, supervisor, the session store).

        Raises:
            AgentUnavailable: no live process has that name.
        """
        ...

    def host(self, name: str) -> HostPort:
        """A named host.

        Raises:
            AgentUnavailable: no live host has that name.
        """
        ...

    def supervisor(self, name: str) -> SupervisorPort:
        """A running supervisor by its (actor) name.

        Raises:
            AgentNotFound: none runs with that name.
        """
        ...

    def start_host(self, name: str, shape: HostShape, limits: CallLimits) -> HostPort:
        """Starts a host (or, for a lasting one, returns the live host of that name if there is
        one; a dead one's name is free again)."""
        ...

    def start_supervisor(self, spec: SupervisorSpec, parent: str | None, limits: CallLimits,
                         node_id: str) -> SupervisorPort:
        """Starts a supervisor on ``node_id`` (it starts no children until ``start``).

        Raises:
            AgentAlreadyExists: a supervisor of that name runs.
        """
        ...

    def start_inbox(self, name: str) -> InboxPort:
        """Starts a driver's reply inbox on this process's node."""
        ...

    def kill(self, port: Endpoint) -> None:
        """Ends a process at once (no graceful stop)."""
        ...

    def forget(self, name: str) -> None:
        """Drops a cached port of a name whose process died (the next lookup finds anew)."""
        ...

    def node_id(self) -> str:
        """The node this process runs on."""
        ...

    def nodes(self) -> Sequence[NodeInfo]:
        """Every node known, alive or not."""
        ...

    def restarted(self) -> bool:
        """Whether this process is a restart of a process of the same name (registry, store)."""
        ...

    def start_remote_host(self, name: str, limits: CallLimits, grace_s: float,
                          queue_limit: int) -> RemoteHostPort:
        """Starts the host of a gateway replica's remote agents (those connected over its
        WebSockets) on this process's node; it lives and dies with the process that starts it."""
        ...

    def start_gateway(self, options: GatewayOptions) -> str:
        """Starts (or updates) the A2A gateway application; returns the URL it answers at."""
        ...

    def stop_gateway(self, name: str) -> None:
        """Stops the gateway application called ``name`` (nothing when none runs)."""
        ...


__all__ = ["Cluster", "NodeInfo"]
