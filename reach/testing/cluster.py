"""The fake cluster: reach's processes as objects in one event loop, with Ray's failure semantics
(see :mod:`reach.testing`). It places them on its nodes, finds them by name and fails them as a
test says; each is a simulated process of :mod:`reach.testing.processes`."""


from __future__ import annotations

import asyncio
import tempfile
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from actors.host import AgentHost
from actors.inbox import Inbox
from actors.registry import Registry
from actors.session_storage import SqliteStorage
from actors.sessions import SessionStore
from actors.supervisor import Supervisor
from actors.trace_index import DEFAULT_MAX_BYTES
from actors.trace_store import TraceStore
from policies.poison import POISON_AFTER
from reach._runtime.inline_sqlite import inline_connect
from reach._runtime.names import REGISTRY_NAME, STORE_NAME, TRACES_NAME, supervisor_name
from reach.driver import Driver
from reach.errors import AgentAlreadyExists, AgentNotFound, AgentUnavailable, SessionNotFound
from reach.ports.a2a_tasks import A2ATaskPort
from reach.ports.audit import AuditPort
from reach.ports.cluster import Cluster, NodeInfo
from reach.ports.endpoint import Endpoint
from reach.ports.hosts import CallLimits, HostPort, HostShape
from reach.ports.inbox import InboxPort
from reach.ports.ingress import HttpService, ServiceSettings
from reach.ports.processes import Process
from reach.ports.registry import RegistryPort
from reach.ports.sessions import SessionsPort
from reach.ports.supervisors import SupervisorPort
from reach.ports.traces import TraceStorePort
from reach.security.guard import Guard, SecurityConfig, guard_for
from reach.specs import SupervisorSpec
from reach.testing.ports import (
    FakeEndpoint,
    FakeHost,
    FakeInbox,
    FakePort,
    FakeProcess,
    FakeRegistry,
    FakeSupervisor,
)
from reach.testing.processes import (
    SimulatedProcess,
    copied,
    current_process,
    died,
    track_tasks,
)
from reach.testing.store_ports import FakeA2ATasks, FakeAudit, FakeSessions, FakeTraceStore
from reach.tracing import Tracing

F = TypeVar("F", bound=FakePort)


class FakeCluster(Cluster):
    """An in-process :class:`reach.ports.cluster.Cluster` (see the module's docstring).

    Args:
        security: The deployment's settings (default: signing off).
        nodes: The nodes' IDs; the first is the driver's.
        heartbeat_interval_s: The registry's heartbeat interval.
        heartbeat_misses: Beats a host may miss before its agents are offline.
        folder: Where the session store's (in-memory) database is named, and keyrings are kept.
        restart_delay_s: How long the registry or the store takes to come back after it died.
        poison_after: Incarnations of an agent a request may kill before it is quarantined.
        host_start_s: How long a new host takes to start (calls to it wait meanwhile, as they
            wait for a platform's new process); 0 by default: at once.
        trace_store_bytes: The trace store's memory bound.

    Attributes:
        calls: How many calls each ``(process name, method)`` received.
    """

    def __init__(self, security: SecurityConfig | None = None, *,
                 nodes: Sequence[str] = ("node-a", "node-b"), heartbeat_interval_s: float = 1.0,
                 heartbeat_misses: int = 3, folder: Path | None = None,
                 restart_delay_s: float = 1.5, poison_after: int = POISON_AFTER,
                 host_start_s: float = 0.0, trace_store_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.security = security or SecurityConfig(sign=False)
        # A test traces with a provider of its own (see reach._runtime.tracer.use).
        self.tracing: Tracing | None = None
        self.restart_delay_s = restart_delay_s
        self.host_start_s = host_start_s
        self._nodes = dict.fromkeys(nodes, True)
        self._node_resources: dict[str, dict[str, float]] = {n: {"CPU": 2.0} for n in nodes}
        self._procs: dict[str, SimulatedProcess] = {}
        self._settings = (heartbeat_interval_s, heartbeat_misses, poison_after)
        self._trace_store_bytes = trace_store_bytes
        self._folder = folder or Path(tempfile.gettempdir())
        self.calls: Counter[tuple[str, str]] = Counter()
        self._loop: asyncio.AbstractEventLoop | None = None
        #: The applications served on this cluster (:meth:`serve`), by name, each its one
        #: replica: a test drives ``services[name].app`` (an ASGI application) with an
        #: in-process HTTP client.
        self.services: dict[str, Any] = {}
        self._http_port: int | None = None

    def __reduce__(self) -> Any:
        raise TypeError("a FakeCluster lives in one process: it is never pickled")

    # -- setting up ------------------------------------------------------------------------

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        """Starts the registry, the session store and the trace store, and tracks which process
        each task of ``loop`` runs in (a task belongs to the process that created it)."""
        self._loop = loop
        track_tasks(loop)
        interval, misses, poison_after = self._settings
        self._start(REGISTRY_NAME, lambda: Registry(self, interval, misses, poison_after),
                    self.driver_node, restarts=True)
        db = self._folder / "sessions.db"
        self._start(STORE_NAME, lambda: SessionStore(
            self, str(db), storage=SqliteStorage(db, connect=inline_connect)),
            self.driver_node, restarts=True)
        self._start(TRACES_NAME, lambda: TraceStore(self._trace_store_bytes), self.driver_node,
                    restarts=True)

    def runtime(self, limits: CallLimits | None = None) -> Driver:
        """A driver on this cluster (``reach.Runtime(fake)`` for one that also starts the
        gateway and connects remote A2A agents)."""
        return Driver(self, limits)

    async def close(self) -> None:
        """Closes the session store's database."""
        store = self._procs.get(STORE_NAME)
        if store is not None and store.obj is not None:
            await store.obj.storage.close()

    @property
    def driver_node(self) -> str:
        """The node drivers run on (the first)."""
        return next(iter(self._nodes))

    def _start(self, name: str, make: Callable[[], Any], node: str, *, restarts: bool = False,
               resources: dict[str, float] | None = None) -> SimulatedProcess:
        proc = SimulatedProcess(name, make, node, restarts, resources=dict(resources or {}))
        proc.start()
        self._procs[name] = proc
        return proc

    def _port(self, name: str, kind: type[F]) -> F:
        return kind(self._invoke, name)

    async def _invoke(self, name: str, method: str, args: tuple[object, ...],
                      kwargs: dict[str, object]) -> Any:
        proc = await self._live(name)
        self.calls[(name, method)] += 1
        assert self._loop is not None
        return await proc.call(self._loop, method, args, kwargs)

    async def _live(self, name: str) -> SimulatedProcess:
        proc = self._procs.get(name)
        if proc is None:
            raise AgentUnavailable(f"{name} does not exist (its process is gone)",
                                   details={"endpoint": name})
        while proc.dead:
            if not proc.restarts or proc.back is None:
                raise died(name, proc.lost)
            await proc.back.wait()
        if proc.up is not None:
            await proc.up.wait()
            if proc.dead:  # killed while it started
                raise died(name, proc.lost)
        return proc

    # -- the Cluster interface -------------------------------------------------------------

    def guard(self) -> Guard | None:
        """See :meth:`reach.ports.cluster.Cluster.guard`."""
        return guard_for(self.security)

    def registry(self) -> RegistryPort:
        """See :meth:`reach.ports.cluster.Cluster.registry`."""
        return self._port(REGISTRY_NAME, FakeRegistry)

    def _store(self, kind: type[F]) -> F:
        if STORE_NAME not in self._procs:
            raise SessionNotFound("no session store is running")
        return self._port(STORE_NAME, kind)

    def sessions(self) -> SessionsPort:
        """See :meth:`reach.ports.cluster.Cluster.sessions`."""
        return self._store(FakeSessions)

    def a2a_tasks(self) -> A2ATaskPort:
        """See :meth:`reach.ports.cluster.Cluster.a2a_tasks`."""
        return self._store(FakeA2ATasks)

    def audit_log(self) -> AuditPort:
        """See :meth:`reach.ports.cluster.Cluster.audit_log`."""
        return self._store(FakeAudit)

    def trace_store(self) -> TraceStorePort:
        """See :meth:`reach.ports.cluster.Cluster.trace_store`."""
        return self._live_port(TRACES_NAME, FakeTraceStore)

    def _live_port(self, name: str, kind: type[F]) -> F:
        proc = self._procs.get(name)
        if proc is None or (proc.dead and not proc.restarts):
            raise AgentUnavailable(f"{name} does not exist (its process is gone)",
                                   details={"endpoint": name})
        return self._port(name, kind)

    def endpoint(self, name: str) -> Endpoint:
        """See :meth:`reach.ports.cluster.Cluster.endpoint`."""
        return self._live_port(name, FakeEndpoint)

    def host(self, name: str) -> HostPort:
        """See :meth:`reach.ports.cluster.Cluster.host`."""
        return self._live_port(name, FakeHost)

    def supervisor(self, name: str) -> SupervisorPort:
        """See :meth:`reach.ports.cluster.Cluster.supervisor`."""
        try:
            return self._live_port(name, FakeSupervisor)
        except AgentUnavailable as exc:
            raise AgentNotFound(f"no supervisor {name!r} is running",
                                details={"supervisor": name}) from exc

    def supervisors(self) -> list[str]:
        """See :meth:`reach.ports.cluster.Cluster.supervisors`."""
        return self.names(supervisor_name(""))

    def forget(self, name: str) -> None:
        """See :meth:`reach.ports.cluster.Cluster.forget` (nothing is cached here)."""

    def start_host(self, name: str, shape: HostShape, limits: CallLimits) -> HostPort:
        """See :meth:`reach.ports.cluster.Cluster.start_host`."""

        live = self._procs.get(name)
        if live is not None and shape.lasting and not live.dead:
            return self._port(name, FakeHost)
        node = self._place(shape)
        proc = self._start(name, lambda: AgentHost(name, self, limits), node,
                           resources=dict(shape.resources))
        if self.host_start_s > 0:
            assert self._loop is not None
            up = proc.up = asyncio.Event()
            self._loop.call_later(self.host_start_s, up.set)
        return self._port(name, FakeHost)

    def _place(self, shape: HostShape) -> str:
        alive = [n for n, up in self._nodes.items() if up]
        fits = [n for n in alive if all(self._node_resources[n].get(k, 0.0) >= v
                                        for k, v in shape.resources.items())]
        reserves = (shape.num_cpus is None or shape.num_cpus > 0 or bool(shape.num_gpus)
                    or bool(shape.memory) or bool(shape.resources))
        if shape.node_id in fits and (shape.node_strict or reserves):
            return shape.node_id
        # As on Ray, an actor that reserves nothing (not even the CPU an actor reserves by
        # default to be scheduled) goes to any node when its affinity is soft: here the first.
        if not fits:
            raise AgentUnavailable(f"no live node has the resources {dict(shape.resources)}")
        return fits[0]

    def start_supervisor(self, spec: SupervisorSpec, parent: str | None, limits: CallLimits,
                         node_id: str) -> SupervisorPort:
        """See :meth:`reach.ports.cluster.Cluster.start_supervisor`."""

        name = supervisor_name(spec.name)
        live = self._procs.get(name)
        if live is not None and not live.dead:
            raise AgentAlreadyExists(f"a supervisor named {spec.name!r} is already running",
                                     details={"supervisor": spec.name})
        self._start(name, lambda: Supervisor(copied(spec), self, parent, limits), node_id)
        return self._port(name, FakeSupervisor)

    def start_process(self, name: str, cls: type[object],
                      args: tuple[object, ...]) -> Process:
        """See :meth:`reach.ports.cluster.Cluster.start_process`: ``cls(*args)``, on the caller's
        node, not restarted when it dies."""
        self._start(name, lambda: cls(*args), self.node_id())
        return FakeProcess(self._invoke, name)

    def find_process(self, name: str) -> Process:
        """See :meth:`reach.ports.cluster.Cluster.find_process`."""
        self.endpoint(name)  # AgentUnavailable when no live process has the name
        return FakeProcess(self._invoke, name)

    def start_inbox(self, name: str) -> InboxPort:
        """See :meth:`reach.ports.cluster.Cluster.start_inbox`."""

        self._start(name, Inbox, self.node_id())
        return self._port(name, FakeInbox)

    def kill(self, port: Endpoint) -> None:
        """See :meth:`reach.ports.cluster.Cluster.kill`: ends it for good (no restart)."""
        proc = self._procs.get(port.name)
        if proc is not None:
            proc.end()
            del self._procs[port.name]

    def node_id(self) -> str:
        """See :meth:`reach.ports.cluster.Cluster.node_id`."""
        proc = current_process()
        return proc.node if proc is not None else self.driver_node

    def nodes(self) -> Sequence[NodeInfo]:
        """See :meth:`reach.ports.cluster.Cluster.nodes`."""
        return [NodeInfo(n, up, dict(self._node_resources[n])) for n, up in self._nodes.items()]

    def restarted(self) -> bool:
        """See :meth:`reach.ports.cluster.Cluster.restarted`."""
        proc = current_process()
        return proc is not None and proc.incarnation > 0

    def http_port(self) -> int | None:
        """See :meth:`reach.ports.cluster.Cluster.http_port`."""
        return self._http_port

    def start_http(self, host: str, port: int, proxy_location: str) -> None:
        """See :meth:`reach.ports.cluster.Cluster.start_http`: nothing listens (a test calls an
        application's ASGI object itself); the port is remembered."""
        self._http_port = port

    def serve(self, name: str, service: type[HttpService], args: tuple[object, ...],
              settings: ServiceSettings, timeout_s: float) -> None:
        """See :meth:`reach.ports.cluster.Cluster.serve`: one replica, ``service(*args)``, in this
        loop, in :attr:`services` (the settings are for a platform's server: none runs here)."""
        make: Callable[..., HttpService] = service
        self.services[name] = make(*args)

    def unserve(self, name: str) -> None:
        """See :meth:`reach.ports.cluster.Cluster.unserve`."""
        self.services.pop(name, None)

    # -- failures a test makes -------------------------------------------------------------

    def crash(self, name: str, lost: bool = False) -> None:
        """Kills a process as SIGKILL would (``lost``: with its node): the calls pending on it
        fail, its watches fail, and the registry or the store comes back (empty) after
        :attr:`restart_delay_s`."""
        proc = self._procs[name]
        proc.end(lost)
        if proc.restarts:
            assert self._loop is not None
            self._loop.call_later(self.restart_delay_s, self._revive, proc)
        else:
            del self._procs[name]

    def crash_node(self, node: str, declared: bool = False) -> list[str]:
        """Kills every process of a node, which stays dead; the registry and the store come
        back on a live node. Calls to its processes fail as unreachable, as Ray's do until its
        health checks declare the node dead (``declared``: they did first, as for a machine
        gone without closing its connections: the calls fail as to dead processes). Returns
        the names of the processes killed."""
        self._nodes[node] = False
        hit = [p.name for p in self._procs.values() if p.node == node and not p.dead]
        for name in hit:
            proc = self._procs[name]
            if proc.restarts:
                proc.node = self._place(HostShape())
            self.crash(name, lost=not declared)
        return hit

    def _revive(self, proc: SimulatedProcess) -> None:
        if self._procs.get(proc.name) is proc:  # not killed for good meanwhile
            proc.revive()

    def process(self, name: str) -> Any:
        """The object of a live process (its host, registry, store or supervisor), to inspect.

        Raises:
            KeyError: no process has that name.
        """
        return self._procs[name].obj

    def names(self, prefix: str = "") -> list[str]:
        """The names of the live processes that start with ``prefix``."""
        return sorted(n for n, p in self._procs.items() if n.startswith(prefix) and not p.dead)


__all__ = ["FakeCluster"]
