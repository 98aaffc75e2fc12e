"""The Cluster: finds, creates, watches and kills reach's processes, and hands out their ports.

Features build on two of its primitives that know nothing of them: a process of a class the
feature gives (:meth:`Cluster.start_process`, a :class:`~reach.ports.processes.Process` the
feature wraps in a typed adapter of its own port), and an application served over the
cluster's HTTP ingress (:meth:`Cluster.serve`, each replica an
:class:`~reach.ports.ingress.HttpService`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from reach.ports.a2a_tasks import A2ATaskPort
from reach.ports.audit import AuditPort
from reach.ports.endpoint import Endpoint
from reach.ports.hosts import CallLimits, HostPort, HostShape
from reach.ports.inbox import InboxPort
from reach.ports.ingress import HttpService, ServiceSettings
from reach.ports.processes import Process
from reach.ports.registry import RegistryPort
from reach.ports.sessions import SessionsPort
from reach.ports.supervisors import SupervisorPort
from reach.ports.traces import TraceStorePort
from reach.specs import SupervisorSpec

if TYPE_CHECKING:
    from reach.security.guard import Guard, SecurityConfig
    from reach.tracing import Tracing


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
    to reach the others; the deployment's security and tracing settings travel with it.

    Attributes:
        security: The deployment's security settings.
        tracing: The deployment's tracing settings (None: its processes do not trace).
    """

    security: SecurityConfig
    tracing: Tracing | None

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

    def trace_store(self) -> TraceStorePort:
        """The trace store: the recent finished spans of every process.

        Raises:
            AgentUnavailable: no trace store runs.
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

    def supervisors(self) -> list[str]:
        """The (actor) names of the running supervisors, sorted (each one :meth:`supervisor`
        finds)."""
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

    # -- what features build on: processes of their own, and HTTP ----------------------------

    def start_process(self, name: str, cls: type[object], args: tuple[object, ...]) -> Process:
        """Starts ``cls(*args)`` as a process called ``name`` on this process's node: it
        reserves no CPU, takes up to 10,000 calls at once, is not restarted when it dies, and
        lives and dies with the process that starts it. It is an endpoint too when ``cls`` is
        a host (:meth:`host` and :meth:`endpoint` find it; :meth:`kill` ends it)."""
        ...

    def find_process(self, name: str) -> Process:
        """A live process :meth:`start_process` started, found by its name from any process.

        Raises:
            AgentUnavailable: no live process has that name.
        """
        ...

    def http_port(self) -> int | None:
        """The port the cluster's HTTP ingress listens on; None when it is not started."""
        ...

    def start_http(self, host: str, port: int, proxy_location: str) -> None:
        """Starts the cluster's HTTP ingress (one per cluster: its port is settled from then on)
        on ``host``/``port``, with proxies ``HeadOnly`` (on the head node) or ``EveryNode``.

        Raises:
            ConfigError: it did not start (the port is taken on this machine, or the
                platform's reason).
        """
        ...

    def serve(self, name: str, service: type[HttpService], args: tuple[object, ...],
              settings: ServiceSettings, timeout_s: float) -> None:
        """Serves the application ``name`` over the HTTP ingress (started first), each replica
        ``service(*args)``; starts it, or updates the one running under that name, and returns
        once it runs.

        Raises:
            ConfigError: it failed to start, or did not run within ``timeout_s`` (with the
                platform's reason).
        """
        ...

    def unserve(self, name: str) -> None:
        """Stops the application called ``name`` (nothing when none runs)."""
        ...


__all__ = ["Cluster", "NodeInfo"]
