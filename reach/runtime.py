"""Starting reach: :func:`init` starts or joins Ray and finds (or starts) reach's processes.

A :class:`Runtime` is a user's handle on a deployment: a :class:`~reach.driver.Driver` (spawn,
supervise, talk, sessions) with what faces outward (the A2A gateway, remote A2A agents). Its
settings are one frozen :class:`RuntimeConfig`. :func:`init` builds the Ray cluster handle
(:mod:`reach._ray`); a test passes a :class:`reach.testing.FakeCluster` to :class:`Runtime`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import warnings
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from actors.trace_index import DEFAULT_MAX_BYTES
from policies.acl import Acl
from policies.poison import POISON_AFTER, check_poison_after
from reach._runtime.names import DEFAULT_SESSIONS, REGISTRY_NAME, SESSION_RESOURCE
from reach._runtime.trace_setup import check_installed
from reach.agent import Dedicated
from reach.driver import Driver
from reach.errors import AuthError, ConfigError
from reach.ports.cluster import Cluster
from reach.ports.hosts import CallLimits
from reach.records import AgentRecord
from reach.security.guard import SecurityConfig, resolve_keyring, signed_call
from reach.tracing import Tracing, tracing_from
from reach.web.options import GATEWAY_APP, GatewayOptions

if TYPE_CHECKING:
    from reach._ray import RayCluster

log = logging.getLogger("reach.runtime")

T = TypeVar("T")

#: How long a call of :func:`init` to the cluster may take before it is an error (seconds).
INIT_CALL_S = 30.0


@dataclass(frozen=True, slots=True)
class RuntimeConfig:
    """reach's settings for one driver: :func:`init` takes them as one value or as keywords.

    The first seven are the deployment's: the driver that starts the registry, the session
    store and the trace store sets them, and a driver joining a running deployment cannot
    change them (it is warned, with the names of those it gave, that they are ignored).

    Attributes:
        heartbeat_interval_s: Interval at which hosts heartbeat.
        heartbeat_misses: Beats missed before a host's agents are marked offline.
        session_path: The session store's SQLite file; default REACH_SESSIONS, else
            ``.reach/sessions.db`` under the current folder.
        session_resource: A custom resource that pins the store to one node of a cluster; by
            default ``reach_state`` where the cluster has it (``cluster.yaml`` gives it to the
            head node).
        session_options: Options of the store (``synchronous``, ``group_commit``,
            ``compact_after``, ``keep_last``, ``summariser``).
        poison_after: How many incarnations of an agent a request may kill (the agent's
            process dies while the request is in its hands) before it is quarantined as
            poison: a dead letter, a fatal ``PoisonMessage`` to its caller, never delivered to
            that agent again (nor is any request of the same content).
        trace_store_bytes: The memory bound of the cluster's trace store (the recent finished
            spans, as their estimated size): past it the oldest spans are dropped first.
            64 MiB by default: some 40,000 spans of a request's kind, about 1.6 KB each
            (``bench/trace_store.py``).
        max_hops: Longest call chain accepted.
        default_timeout_ms: Timeout of requests that give none.
        sign: Sign envelopes, registrations and heartbeats, and refuse unsigned ones.
        encrypt: Encrypt every payload (otherwise only sessions opened with ``encrypt=True``).
        keyring: The deployment's keyring file; default REACH_KEYRING, else
            ``.reach/keyring.json`` under the current folder (generated when missing).
        acl: Who may call which capabilities: an :class:`~policies.acl.Acl` or a JSON file
            (default: everyone may call everything).
        audit_calls: Record every call's outcome in the audit log (refusals always are).
        spares: Warm spare hosts kept ready per node, for the restarts of dedicated agents (one
            of the default shape per node is started by :func:`init`; supervisors keep one of
            each other shape in use); 0 turns them off. Each spare is an idle process (about
            107 MB resident, 58 MB of it its own).
        max_spares: How many spares a node may keep of one shape while restarts come faster
            than one spare is replaced: the pool grows by one for each restart of the last 10 s,
            up to this bound (never below ``spares``), and shrinks back to ``spares`` after a
            minute without one.
        tracing: How every process this driver starts traces (:class:`~reach.tracing.Tracing`;
            ``True``: with the defaults; ``False``: not at all); by default, as the
            ``OTEL_*`` environment variables say (tracing when they name an OTLP endpoint).
            Needs ``reach[otel]``. A driver joining a running deployment traces with its own;
            the processes already running keep theirs.
    """

    heartbeat_interval_s: float = 10.0
    heartbeat_misses: int = 3
    session_path: str | None = None
    session_resource: str | None = None
    session_options: Mapping[str, Any] = field(default_factory=dict)
    poison_after: int = POISON_AFTER
    trace_store_bytes: int = DEFAULT_MAX_BYTES
    max_hops: int = 16
    default_timeout_ms: int = 30_000
    sign: bool = True
    encrypt: bool = False
    keyring: str | Path | None = None
    acl: Acl | str | Path | None = None
    audit_calls: bool = True
    spares: int = 1
    max_spares: int = 4
    tracing: Tracing | bool | None = None

    def __post_init__(self) -> None:
        if self.heartbeat_interval_s <= 0 or self.heartbeat_misses < 1:
            raise ConfigError("heartbeats need a positive interval and at least one miss, got "
                              f"{self.heartbeat_interval_s} s and {self.heartbeat_misses}",
                              details={"setting": "heartbeat_interval_s"})
        if self.max_hops < 1 or self.default_timeout_ms <= 0:
            raise ConfigError("max_hops and default_timeout_ms must be positive, got "
                              f"{self.max_hops} and {self.default_timeout_ms}",
                              details={"setting": "max_hops"})
        if self.spares < 0:
            raise ConfigError(f"spares must be 0 or more, got {self.spares}",
                              details={"setting": "spares"})
        if self.max_spares < 0:
            raise ConfigError(f"max_spares must be 0 or more, got {self.max_spares}",
                              details={"setting": "max_spares"})
        check_poison_after(self.poison_after)
        tracing_from(self.tracing, {})  # its type (the environment is read by init)
        if self.trace_store_bytes <= 0:
            raise ConfigError(f"trace_store_bytes must be positive, got {self.trace_store_bytes}",
                              details={"setting": "trace_store_bytes"})

    #: The settings a running deployment keeps: its registry's and its session store's.
    DEPLOYMENT = ("heartbeat_interval_s", "heartbeat_misses", "session_path",
                  "session_resource", "session_options", "poison_after", "trace_store_bytes")

    def given(self) -> list[str]:
        """The names of the settings that differ from their defaults."""
        default = RuntimeConfig()
        return [f.name for f in dataclasses.fields(self)
                if getattr(self, f.name) != getattr(default, f.name)]

    @property
    def limits(self) -> CallLimits:
        """The limits every host and supervisor this driver starts shares."""
        return CallLimits(self.max_hops, self.default_timeout_ms, self.spares, self.max_spares)

    def security(self) -> SecurityConfig:
        """The deployment's security settings (the keyring's path resolved; generated when it
        is the default one and missing).

        Raises:
            AuthError: an explicitly given keyring file is missing or unreadable.
        """
        keyring = (resolve_keyring(self.keyring, create=self.keyring is None) if self.sign
                   else None)
        return SecurityConfig(sign=self.sign, encrypt=self.encrypt, audit_calls=self.audit_calls,
                              keyring=keyring)


_FIELDS = frozenset(f.name for f in dataclasses.fields(RuntimeConfig))


class Runtime(Driver):
    """A user's handle on reach: a :class:`~reach.driver.Driver` (spawn agents, supervise them,
    talk to them, open sessions) that also serves agents over A2A and calls remote A2A agents.

    Created by :func:`init` (on Ray), or directly on a :class:`~reach.ports.cluster.Cluster`
    (a test's :class:`~reach.testing.FakeCluster`). Send with :attr:`client`. Close it with
    ``await rt.close()`` (or ``async with``), which lets what this driver sent leave first.
    Its arguments are the :class:`~reach.driver.Driver`'s.
    """

    def __init__(self, cluster: Cluster, limits: CallLimits | None = None, *,
                 owns_ray: bool = False) -> None:
        super().__init__(cluster, limits, owns_ray=owns_ray)
        self._checks: asyncio.Task[None] | None = None

    async def ready(self) -> None:
        """Waits for the checks :func:`init` left to the event loop it was called in (the
        keyring's match with the cluster's, the warm spares, the ACL); at once otherwise.

        Raises:
            AuthError: this driver's keyring is not the cluster's.
            ConfigError: the ACL is malformed.
        """
        if self._checks is not None:
            await self._checks

    async def __aenter__(self) -> Runtime:
        await self.ready()
        return self

    # -- reach from outside ---------------------------------------------------------------------

    def start_gateway(self, options: GatewayOptions | None = None, **settings: Any) -> str:
        """Serves every agent as an A2A 1.0 agent over HTTP (a Ray Serve application on the
        cluster); returns its base URL. Blocks until its replicas answer; calling it again
        updates the running gateway (say, to more replicas).

        Args:
            options: The gateway's settings; or give them as keywords
                (:class:`~reach.web.options.GatewayOptions`: ``port``, ``replicas``, ...).

        Raises:
            ConfigError: a setting is invalid, or the gateway failed to start (with Serve's
                reason).
        """
        # The gateway loads on first use: it brings the A2A SDK and Starlette (about 0.4 s and
        # 35 MB), which every process importing reach (each host) would pay otherwise.
        from reach.gateway import deploy  # noqa: PLC0415 - the gateway loads where it is started

        opts = replace(options, **settings) if options else GatewayOptions(**settings)
        return deploy.start_gateway(self.cluster, opts)

    def stop_gateway(self, name: str = GATEWAY_APP) -> None:
        """Stops the gateway (agents keep running)."""
        from reach.gateway import deploy  # on first use, as in start_gateway  # noqa: PLC0415 - the gateway loads where it is started

        deploy.stop_gateway(self.cluster, name)

    async def connect_a2a(self, url_or_card: Any, **settings: Any) -> AgentRecord:
        """Makes a remote A2A agent a reach agent: reads its card and registers a proxy agent
        that reach agents call by ID or capability like any other.
        See :func:`reach.a2a.client.proxy.connect` for the settings."""
        # Loaded on first use: the A2A client brings the A2A SDK and httpx (about 20 MB and
        # 0.2 s a process), and every reach process (each host of agents) imports reach.
        from reach.a2a.client.proxy import connect  # noqa: PLC0415 - the A2A SDK loads where it is used

        return await connect(self, url_or_card, **settings)


def init(address: str | None = None, config: RuntimeConfig | None = None,
         **settings: Any) -> Runtime:
    """Connects to Ray (starting a local one when none is running) and finds reach's actors.

    Args:
        address: ``"auto"`` (the cluster running on this machine) or a cluster address; by
            default RAY_ADDRESS, else a new local Ray of this driver's own (never one that
            happens to run on the machine already, as ``ray.init()`` alone would join).
        config: reach's settings (:class:`RuntimeConfig`).
        **settings: Each of :class:`RuntimeConfig`'s settings may be given as a keyword instead
            (over ``config``'s); any other keyword goes to ``ray.init`` when this call starts
            or joins Ray.

    The security settings travel to every process this driver starts with the cluster handle;
    the keyring's file must exist at the same path on every node. Idempotent: two drivers
    calling it at once get the same registry. Settings that cannot apply are named in a
    warning: the deployment's own (heartbeats, session store) when joining a running
    deployment, and Ray's keywords when Ray already runs in this process.

    Called with an event loop running (``async with reach.init() as rt``), the calls it makes
    to the cluster's actors are not waited for on that loop's thread: they run on the loop, and
    ``async with`` (or ``await rt.ready()``) waits for them, raising what they raise.

    Raises:
        AuthError: an explicitly given keyring file is missing or unreadable, or this driver's
            keyring is not the one the running cluster's registry was started with.
        ConfigError: a setting is invalid.
    """
    # Ray loads where a process joins it: the remote agents' client imports reach and runs outside
    # any cluster, without Ray (about 65 MB and 0.35 s a process).
    from reach import _ray  # noqa: PLC0415 - Ray loads where a process joins it

    ours = {k: v for k, v in settings.items() if k in _FIELDS}
    ray_kwargs = {k: v for k, v in settings.items() if k not in _FIELDS}
    cfg = replace(config, **ours) if config is not None else RuntimeConfig(**ours)
    security = cfg.security()
    tracing = tracing_from(cfg.tracing)
    if tracing is not None:  # before anything starts: the SDK must be there
        check_installed(tracing)
    starts = False
    if _ray.is_initialized():
        if ray_kwargs:
            _warn_ignored(sorted(ray_kwargs), "Ray already runs in this process")
    else:
        where = _ray.check_address(address)
        starts = where == "local"
        _ray.start(where, dict(ray_kwargs.pop("runtime_env", None) or {}), **ray_kwargs)
    cluster = _ray.RayCluster(security, tracing=tracing)
    joined = REGISTRY_NAME in cluster.named()
    if joined:
        _warn_ignored([n for n in cfg.given() if n in RuntimeConfig.DEPLOYMENT],
                      "this driver joined a running deployment, which keeps its own")
    resource = cfg.session_resource
    if resource is None and SESSION_RESOURCE in cluster.resources():
        resource = SESSION_RESOURCE
    cluster.start_registry(cfg.heartbeat_interval_s, cfg.heartbeat_misses, resource,
                           cfg.poison_after)
    where_db = Path(cfg.session_path or os.environ.get("REACH_SESSIONS", DEFAULT_SESSIONS))
    cluster.start_store(str(where_db.absolute()), resource, dict(cfg.session_options))
    # Started here, not on a first span: every process this driver starts then carries its
    # handle (a first span never waits for a lookup by name, nor starts a process).
    cluster.start_traces(cfg.trace_store_bytes, resource)
    runtime = Runtime(cluster, cfg.limits, owns_ray=starts)
    checks = _checks(runtime, cluster, cfg)
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    if loop is None:
        asyncio.run(checks)
    else:
        runtime._checks = loop.create_task(checks)
        runtime._checks.add_done_callback(_report)
    return runtime


def _report(task: asyncio.Task[None]) -> None:
    """Logs a failure of init's checks that nobody awaited (``rt.ready()`` raises it too)."""
    if not task.cancelled() and task.exception() is not None:
        log.error("reach.init's checks of the cluster failed: %s", task.exception())


def _warn_ignored(names: list[str], why: str) -> None:
    if names:
        warnings.warn(f"reach.init ignored {', '.join(names)}: {why}", stacklevel=3)


async def _checks(runtime: Runtime, cluster: RayCluster, cfg: RuntimeConfig) -> None:
    """What :func:`init` asks of the running cluster once its handles exist: that this driver's
    keyring is the cluster's, that each node has its warm spares, and the ACL installed."""
    data, sig = signed_call(runtime.transport.codec.guard, runtime.client.sender, ["hello"])
    try:  # a driver with another deployment's keyring learns it here, not by timeouts
        await _within(cluster.registry().check_key(runtime.client.sender, data, sig))
    except AuthError as exc:
        raise AuthError(
            f"this driver's keyring does not match the cluster's: {exc.message}",
            suggestion="use the keyring file the cluster was started with "
                       "(reach.init(keyring=...) or REACH_KEYRING)",
            details=exc.details) from exc
    if cfg.spares > 0:  # topped up: a second driver joining the cluster starts none
        for node in [n.node_id for n in cluster.nodes() if n.alive]:
            await _within(runtime.spawner.top_up(Dedicated(), node))
    if cfg.acl is not None:
        await _within(runtime._acl_call(cfg.acl))


async def _within(call: Awaitable[T]) -> T:
    return await asyncio.wait_for(call, INIT_CALL_S)
