"""The Cluster on Ray: reach's processes as Ray actors (the classes of ``actors/``, made remote
here; a feature's own class by :meth:`RayCluster.start_process`), each reached through a typed
adapter of its handle (:mod:`reach._ray.ports`), and what is served over HTTP on Ray Serve
(:meth:`RayCluster.serve`, with :mod:`reach._ray.serving`)."""


from __future__ import annotations

import logging
import warnings
from collections.abc import Awaitable, Sequence
from typing import Any, TypeVar

import ray
from ray.exceptions import RayError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from actors.host import AgentHost
from actors.inbox import Inbox
from actors.registry import Registry
from actors.sessions import SessionStore
from actors.supervisor import Supervisor
from actors.trace_store import TraceStore
from policies.poison import POISON_AFTER
from reach._ray.calls import RayCall, RayPort, translate
from reach._ray.ports import (
    RayA2ATasks,
    RayAudit,
    RayEndpoint,
    RayHost,
    RayInbox,
    RayProcess,
    RayRegistry,
    RaySessions,
    RaySupervisor,
    RayTraceStore,
)
from reach._ray.serving import port_free, proxy_is_local, served_class, wait_running
from reach._runtime.names import (
    NAMESPACE,
    REGISTRY_NAME,
    STORE_NAME,
    TRACES_NAME,
    supervisor_name,
)
from reach.errors import (
    AgentAlreadyExists,
    AgentNotFound,
    AgentUnavailable,
    ConfigError,
    SessionNotFound,
)
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
from reach.tracing import Tracing

P = TypeVar("P", bound=RayPort)
T = TypeVar("T")

log = logging.getLogger("reach.ray")

#: Actor options of each kind of reach process (see actors/).
_OPTIONS: dict[str, dict[str, Any]] = {
    "host": {"max_concurrency": 10_000},
    "registry": {"max_restarts": -1, "max_task_retries": -1},
    "store": {"max_restarts": -1, "max_task_retries": 0, "max_concurrency": 10_000},
    "supervisor": {"max_restarts": 0, "max_concurrency": 10_000},
    # Restarted empty when its process dies; a batch sent meanwhile is lost, not queued.
    "traces": {"max_restarts": -1, "max_task_retries": 0},
    "inbox": {"num_cpus": 0},
}


#: Each kind of reach process: its plain class (Ray is applied here).
_ACTORS: dict[str, type[object]] = {"host": AgentHost, "registry": Registry,
                                    "store": SessionStore, "supervisor": Supervisor,
                                    "inbox": Inbox, "traces": TraceStore}
_CLASSES: dict[str, Any] = {}


def _remote(kind: str) -> Any:
    """The Ray actor class of a kind of reach process (made once per process)."""
    made = _CLASSES.get(kind)
    if made is None:
        made = _CLASSES[kind] = ray.remote(**_OPTIONS[kind])(_ACTORS[kind])
    return made


#: The actor options of a process :meth:`RayCluster.start_process` starts: it reserves no CPU
#: and takes many calls at once (they wait on other processes, not on the CPU).
_PROCESS_OPTIONS: dict[str, Any] = {"num_cpus": 0, "max_concurrency": 10_000}
_PROCESS_CLASSES: dict[type[object], Any] = {}


def _process_class(cls: type[object]) -> Any:
    """The Ray actor class of a class given to :meth:`RayCluster.start_process` (made once per
    process and class)."""
    made = _PROCESS_CLASSES.get(cls)
    if made is None:
        made = _PROCESS_CLASSES[cls] = ray.remote(**_PROCESS_OPTIONS)(cls)
    return made


class RayCluster(Cluster):
    """The :class:`~reach.ports.cluster.Cluster` on Ray: reach's processes are named actors in the
    ``reach`` namespace, and their ports are the adapters of :mod:`reach._ray.ports` over the
    actors' handles. Pickles as its namespace and the handles of the registry, the session
    store and the trace store when it has them (Ray restarts those three in place, so their
    handles stay good); other processes are looked up anew by name.

    Looking an actor up by name (``ray.get_actor``) blocks the caller's event loop for a
    round trip to Ray's control store, 20-30 ms when a process has just died: a host given a
    restarted agent must not pay that for the session store before it can serve.
    """

    def __init__(self, security: SecurityConfig, namespace: str = NAMESPACE,
                 handles: dict[str, Any] | None = None, tracing: Tracing | None = None) -> None:
        self.security = security
        self.tracing = tracing
        self.namespace = namespace
        # Invariant: every port cached for a name wraps that name's handle here.
        self._handles: dict[str, Any] = dict(handles or {})
        self._ports: dict[str, dict[type[RayPort], RayPort]] = {}

    def __reduce__(self) -> tuple[Any, ...]:
        known = {name: self._handles[name] for name in (REGISTRY_NAME, STORE_NAME, TRACES_NAME)
                 if name in self._handles}
        return (RayCluster, (self.security, self.namespace, known, self.tracing))

    def guard(self) -> Guard | None:
        """See :meth:`reach.ports.cluster.Cluster.guard`."""
        return guard_for(self.security)

    def _port(self, name: str, kind: type[P]) -> P:
        """The port of kind ``kind`` of the actor ``name`` (looked up once, then cached)."""
        ports = self._ports.get(name)
        port = ports.get(kind) if ports is not None else None
        if isinstance(port, kind):
            return port
        handle = self._handles.get(name)
        if handle is None:
            try:
                handle = ray.get_actor(name, namespace=self.namespace)
            except ValueError as exc:  # Ray's way of saying that no actor has the name
                raise AgentUnavailable(f"{name} does not exist (its process is gone)",
                                       details={"endpoint": name}) from exc
            self._handles[name] = handle
        made = kind(handle, name)
        self._ports.setdefault(name, {})[kind] = made
        return made

    def _started(self, name: str, handle: Any, kind: type[P]) -> P:
        """The port of an actor just started (replacing what was cached of the name)."""
        self.forget(name)
        self._handles[name] = handle
        return self._port(name, kind)

    def registry(self) -> RegistryPort:
        """See :meth:`reach.ports.cluster.Cluster.registry`."""
        return self._port(REGISTRY_NAME, RayRegistry)

    def _store(self, kind: type[P]) -> P:
        try:
            return self._port(STORE_NAME, kind)
        except AgentUnavailable as exc:
            raise SessionNotFound("no session store is running",
                                  suggestion="start the runtime with reach.init() first") from exc

    def sessions(self) -> SessionsPort:
        """See :meth:`reach.ports.cluster.Cluster.sessions`."""
        return self._store(RaySessions)

    def a2a_tasks(self) -> A2ATaskPort:
        """See :meth:`reach.ports.cluster.Cluster.a2a_tasks`."""
        return self._store(RayA2ATasks)

    def audit_log(self) -> AuditPort:
        """See :meth:`reach.ports.cluster.Cluster.audit_log`."""
        return self._store(RayAudit)

    def trace_store(self) -> TraceStorePort:
        """See :meth:`reach.ports.cluster.Cluster.trace_store`."""
        return self._port(TRACES_NAME, RayTraceStore)

    def endpoint(self, name: str) -> Endpoint:
        """See :meth:`reach.ports.cluster.Cluster.endpoint`."""
        return self._port(name, RayEndpoint)

    def host(self, name: str) -> HostPort:
        """See :meth:`reach.ports.cluster.Cluster.host`."""
        return self._port(name, RayHost)

    def supervisor(self, name: str) -> SupervisorPort:
        """See :meth:`reach.ports.cluster.Cluster.supervisor`."""
        try:
            return self._port(name, RaySupervisor)
        except AgentUnavailable as exc:
            raise AgentNotFound(f"no supervisor {name!r} is running",
                                details={"supervisor": name}) from exc

    def supervisors(self) -> list[str]:
        """See :meth:`reach.ports.cluster.Cluster.supervisors`."""
        prefix = supervisor_name("")
        return sorted(n for n in self.named() if n.startswith(prefix))

    def forget(self, name: str) -> None:
        """See :meth:`reach.ports.cluster.Cluster.forget`."""
        self._handles.pop(name, None)
        self._ports.pop(name, None)

    def start_host(self, name: str, shape: HostShape, limits: CallLimits) -> HostPort:
        """See :meth:`reach.ports.cluster.Cluster.start_host`."""
        options: dict[str, Any] = {"name": name, "namespace": self.namespace}
        for key in ("num_cpus", "num_gpus", "memory"):
            if getattr(shape, key) is not None:
                options[key] = getattr(shape, key)
        if shape.resources:
            options["resources"] = dict(shape.resources)
        if shape.node_id is not None:
            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(
                shape.node_id, soft=not shape.node_strict)
        if shape.lasting:
            # Not restarted by Ray: a call pending on an actor Ray would restart fails only
            # after about 1.5 s, one on an actor that stays dead within milliseconds. The
            # spawner starts a dead pool host again, under its name, when it needs it.
            options.update(get_if_exists=True, lifetime="detached")
        handle = _remote("host").options(**options).remote(name, self, limits)
        return self._started(name, handle, RayHost)

    def start_supervisor(self, spec: SupervisorSpec, parent: str | None, limits: CallLimits,
                         node_id: str) -> SupervisorPort:
        """See :meth:`reach.ports.cluster.Cluster.start_supervisor`."""
        name = supervisor_name(spec.name)
        # Hard affinity: Ray ignores soft affinity for an actor that asks for no CPU.
        options: dict[str, Any] = {
            "name": name, "namespace": self.namespace, "num_cpus": 0,
            "scheduling_strategy": NodeAffinitySchedulingStrategy(node_id, soft=False)}
        if parent is None:  # a root outlives the driver's job only as long as the driver
            options["lifetime"] = "detached"
        try:
            handle = _remote("supervisor").options(**options).remote(spec, self, parent, limits)
        except ValueError as exc:
            raise AgentAlreadyExists(f"a supervisor named {spec.name!r} is already running",
                                     details={"supervisor": spec.name}) from exc
        return self._started(name, handle, RaySupervisor)

    def start_inbox(self, name: str) -> InboxPort:
        """See :meth:`reach.ports.cluster.Cluster.start_inbox`."""
        # Hard affinity: the driver's node is alive while the driver is.
        here = NodeAffinitySchedulingStrategy(self.node_id(), soft=False)
        handle = _remote("inbox").options(name=name, namespace=self.namespace,
                                          scheduling_strategy=here).remote()
        return self._started(name, handle, RayInbox)

    def start_process(self, name: str, cls: type[object],
                      args: tuple[object, ...]) -> Process:
        """See :meth:`reach.ports.cluster.Cluster.start_process`: an actor owned by this process
        (Ray ends an actor with its owner, and does not restart it), pinned to this node."""
        # Hard affinity: Ray ignores soft affinity for an actor that asks for no CPU.
        here = NodeAffinitySchedulingStrategy(self.node_id(), soft=False)
        handle = _process_class(cls).options(name=name, namespace=self.namespace,
                                             scheduling_strategy=here).remote(*args)
        self._started(name, handle, RayEndpoint)  # found as an endpoint without a lookup
        return RayProcess(handle, name)

    def find_process(self, name: str) -> Process:
        """See :meth:`reach.ports.cluster.Cluster.find_process`."""
        return RayProcess(self._port(name, RayEndpoint).handle, name)

    def kill(self, port: Endpoint) -> None:
        """See :meth:`reach.ports.cluster.Cluster.kill`: the actor of the port, or of the process
        of that name this cluster started or found (a feature's adapter of a process)."""
        handle = port.handle if isinstance(port, RayPort) else self._handles.get(port.name)
        self.forget(port.name)
        if handle is not None:
            ray.kill(handle)

    def node_id(self) -> str:
        """See :meth:`reach.ports.cluster.Cluster.node_id`."""
        return str(ray.get_runtime_context().get_node_id())

    def nodes(self) -> Sequence[NodeInfo]:
        """See :meth:`reach.ports.cluster.Cluster.nodes`."""
        found: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
        return [NodeInfo(str(n["NodeID"]), bool(n.get("Alive")), dict(n.get("Resources", {})))
                for n in found]

    def restarted(self) -> bool:
        """See :meth:`reach.ports.cluster.Cluster.restarted`."""
        # Ray's own property reads its deprecated ``actor_id`` and warns on every call: a user
        # should not see that warning for reach's use of it.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return bool(ray.get_runtime_context().was_current_actor_reconstructed)

    # -- the HTTP ingress: Ray Serve ---------------------------------------------------------

    def http_port(self) -> int | None:
        """See :meth:`reach.ports.cluster.Cluster.http_port`."""
        from ray.serve.context import _get_global_client  # noqa: PLC0415 - Serve loads where it serves

        # Serve's private client: ``serve.status()`` would start Serve to answer.
        running = _get_global_client(raise_if_no_controller_running=False)
        return None if running is None else int(running.http_config.port)

    def start_http(self, host: str, port: int, proxy_location: str) -> None:
        """See :meth:`reach.ports.cluster.Cluster.start_http`: Ray Serve, with its HTTP proxy."""
        from ray import serve  # noqa: PLC0415 - Serve loads where it serves

        if proxy_is_local() and not port_free(port):  # the proxy would listen here
            raise ConfigError(f"port {port} is in use on this machine: the cluster's HTTP "
                              "proxy cannot listen there",
                              suggestion="choose another port",
                              details={"setting": "port", "port": port})
        try:
            serve.start(proxy_location=proxy_location, http_options={"host": host, "port": port})
        except (RayError, RuntimeError) as exc:
            raise ConfigError(f"Ray Serve's HTTP proxy did not start on port {port}: "
                              f"{str(exc).strip().splitlines()[-1]}",
                              details={"setting": "port", "port": port}) from exc

    def serve(self, name: str, service: type[HttpService], args: tuple[object, ...],
              settings: ServiceSettings, timeout_s: float) -> None:
        """See :meth:`reach.ports.cluster.Cluster.serve`: a Ray Serve application of one
        deployment, behind Serve's ASGI ingress."""
        from ray import serve  # noqa: PLC0415 - Serve loads where it serves

        deployment = served_class(service).options(
            name=name, num_replicas=settings.replicas,
            max_ongoing_requests=settings.max_ongoing, max_queued_requests=settings.max_queued,
            health_check_period_s=5.0, health_check_timeout_s=10.0,
            # Serve's access log writes a line a request: a tenth of a replica's CPU at load
            # (reach's audit log records the calls).
            logging_config={"enable_access_log": False},
            ray_actor_options={"num_cpus": 0,
                               "runtime_env": {"env_vars": dict(settings.env)}})
        serve.run(deployment.bind(dict(settings.server_defaults), *args), name=name,
                  route_prefix=settings.route_prefix, blocking=False)
        wait_running(name, timeout_s)

    def unserve(self, name: str) -> None:
        """See :meth:`reach.ports.cluster.Cluster.unserve`."""
        from ray import serve  # noqa: PLC0415 - Serve loads where it serves

        try:
            serve.delete(name)
        except RayError as exc:  # no Serve running: nothing to stop
            log.debug("no application %s to stop: %s", name, exc)

    # -- what only a driver does -------------------------------------------------------------

    def start_registry(self, interval_s: float, misses: int, pin: str | None,
                       poison_after: int = POISON_AFTER) -> RegistryPort:
        """The registry, started unless it runs (two drivers at once get the same one)."""
        options: dict[str, Any] = {"name": REGISTRY_NAME, "namespace": self.namespace,
                                   "lifetime": "detached", "get_if_exists": True, "num_cpus": 0}
        if pin:  # where the session store is (the head, on a `ray up` cluster)
            options["resources"] = {pin: 0.001}
        handle = _remote("registry").options(**options).remote(self, interval_s, misses,
                                                                poison_after)
        return self._started(REGISTRY_NAME, handle, RayRegistry)

    def start_store(self, path: str, pin: str | None, options: dict[str, Any]) -> SessionsPort:
        """The session store, started unless it runs; pinned to the node with ``pin``."""
        actor: dict[str, Any] = {"name": STORE_NAME, "namespace": self.namespace,
                                 "lifetime": "detached", "get_if_exists": True, "num_cpus": 0}
        if pin:  # so that its SQLite file stays put
            actor["resources"] = {pin: 0.001}
        handle = _remote("store").options(**actor).remote(self, path, **options)
        return self._started(STORE_NAME, handle, RaySessions)

    def start_traces(self, max_bytes: int, pin: str | None) -> TraceStorePort:
        """The trace store, started unless it runs, keeping to ``max_bytes``; pinned to the
        node with ``pin`` (beside the registry)."""
        options: dict[str, Any] = {"name": TRACES_NAME, "namespace": self.namespace,
                                   "lifetime": "detached", "get_if_exists": True, "num_cpus": 0}
        if pin:
            options["resources"] = {pin: 0.001}
        handle = _remote("traces").options(**options).remote(max_bytes)
        return self._started(TRACES_NAME, handle, RayTraceStore)

    def wait(self, calls: Sequence[Awaitable[Any]], timeout_s: float) -> None:
        """Blocks until the calls end or ``timeout_s`` passes (for synchronous shutdowns)."""
        refs = [c.ref for c in calls if isinstance(c, RayCall)]
        ray.wait(refs, num_returns=len(refs), timeout=timeout_s)

    def get(self, call: Awaitable[T], timeout_s: float) -> T:
        """The result of a call, blocking (outside an event loop only).

        Raises:
            ReachError: the call failed (translated), or took longer than ``timeout_s``.
        """
        assert isinstance(call, RayCall)
        try:
            result: T = ray.get(call.ref, timeout=timeout_s)
        except RayError as exc:
            raise translate(exc, call.name) from exc
        return result

    def resources(self) -> dict[str, float]:
        """The cluster's total resources, by name."""
        found: dict[str, float] = ray.cluster_resources()  # type: ignore[no-untyped-call]
        return found

    def named(self) -> list[str]:
        """Names of the live actors of this namespace."""
        return [str(n["name"]) for n in ray.util.list_named_actors(all_namespaces=True)
                if n.get("namespace") == self.namespace]


