"""Starting reach: ``reach.init()`` connects to (or starts) Ray and finds the system actors.

This module is the one seam between the SDK and ``actors/``: it imports the actor classes inside
the functions that need them, so that a Ray worker importing ``actors.host`` never imports this
module's callers in a cycle.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import RayActorError, RayError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from policies.acl import Acl
from policies.sessions import Terms
from reach.agent import Agent, Dedicated, Placement
from reach.client import Client, Link
from reach.directory import AgentInfo, Directory
from reach.errors import (
    AgentAlreadyExists,
    AgentNotFound,
    AgentUnavailable,
    ConfigError,
    ReachError,
)
from reach.guard import (
    ENCRYPTED_SESSION_PREFIX,
    SecurityConfig,
    acl_to_doc,
    install,
    load_acl,
    resolve_keyring,
    signed_call,
)
from reach.guard import ENV as SECURITY_ENV
from reach.metrics import metrics
from reach.names import (
    DEFAULT_SESSIONS,
    DRIVER_PREFIX,
    NAMESPACE,
    REGISTRY_NAME,
    SESSION_RESOURCE,
    STORE_NAME,
    is_dedicated,
    supervisor_name,
)
from reach.protocol import new_id
from reach.sessions import LIMITS_SCHEMA, Session
from reach.spawner import Spawner, unwrap
from reach.supervision import SupervisorRef, SupervisorSpec
from reach.transport import Transport

log = logging.getLogger("reach.runtime")


class Runtime:
    """A driver's handle on reach: spawn agents, talk to them, inspect the registry.

    Created by :func:`init`; use :attr:`client` (or the shortcuts) to send.
    """

    def __init__(self, registry: Any, inbox: Any, inbox_name: str, *, max_hops: int,
                 default_timeout_ms: int, store: Any, owns_ray: bool = False) -> None:
        self.registry = registry
        self.store = store
        self.driver_id = inbox_name.removeprefix("reach.inbox.")
        self.directory = Directory(registry)
        self.transport = Transport(inbox_name, NAMESPACE,
                                   on_dead_endpoint=self.directory.drop_endpoint,
                                   on_expect=self._ensure_polling,
                                   on_undelivered=self.directory.dead_letter)
        self.transport.remember(inbox_name, inbox)
        self.link = Link(self.transport, self.directory, default_timeout_ms, max_hops)
        self.client = Client(self.link, f"{DRIVER_PREFIX}{self.driver_id}")
        self._inbox = inbox
        self._poller: asyncio.Task[None] | None = None
        self.owns_ray = owns_ray  # this driver started the Ray it runs on
        self.spawner = Spawner(registry, self.transport, max_hops, default_timeout_ms)

    def _ensure_polling(self) -> None:
        if self._poller is None or self._poller.done():
            self._poller = asyncio.get_running_loop().create_task(self._poll())

    async def _poll(self) -> None:
        """Takes the replies that reached this driver's inbox, for as long as the driver runs.

        A frame that cannot be read is logged and skipped; an inbox that died (its node went)
        fails every waiting request with AgentUnavailable instead of leaving it to time out.
        """
        while True:
            try:
                frames = await self._inbox.take.remote()
            except RayActorError as exc:
                log.exception("this driver's inbox is gone")
                gone = AgentUnavailable(
                    f"this driver's reply inbox died: {type(exc).__name__}",
                    suggestion="start a new runtime (reach.init) to receive replies again")
                for pending in list(self.transport.pending.values()):
                    pending.settle(gone)
                self.transport.pending.clear()
                return
            except RayError as exc:  # a transient failure of the call: try again shortly
                log.warning("taking replies from the inbox failed: %s", exc)
                await asyncio.sleep(0.1)
                continue
            for frame in frames:
                try:
                    self.transport.accept_frame(frame)
                except ReachError as exc:
                    log.warning("skipped an unreadable reply frame: %s", exc)

    # -- spawning ------------------------------------------------------------------------------

    async def spawn(self, cls: type[Agent], agent_id: str, *, placement: Placement | None = None,
                    args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None) -> AgentInfo:
        """Starts an agent and registers it; returns its registry record.

        Raises:
            AgentAlreadyExists: an agent with that ID is live.
            UnknownSchema: a handler reads a model that is not registered.
        """
        infos = await self.spawn_many(cls, [agent_id], placement=placement, args=args,
                                      kwargs=kwargs)
        return infos[0]

    async def spawn_many(self, cls: type[Agent], agent_ids: Sequence[str], *,
                         placement: Placement | None = None, args: Sequence[Any] = (),
                         kwargs: dict[str, Any] | None = None) -> list[AgentInfo]:
        """Starts several agents of one class (packed agents spread over the pool's hosts).

        Raises:
            AgentAlreadyExists: an ID is live.
            Exception: what an agent's constructor or ``on_start`` raised.
        """
        self._ensure_polling()
        entries = await self.spawner.spawn(cls, agent_ids, placement or Dedicated(), args,
                                           kwargs)
        infos = [AgentInfo.from_record({**e, "status": "online", "load": 0}) for e in entries]
        for info in infos:
            self.directory.learn(info)
        return infos

    async def stop(self, agent_id: str, timeout_s: float = 5.0) -> None:
        """Stops one agent: deregistered first, in-flight requests finish, then it is dropped.

        Raises:
            AgentNotFound: no agent has that ID.
        """
        rec = await self.registry.lookup.remote(agent_id)
        if rec is None:
            raise AgentNotFound(f"no agent {agent_id!r} is registered",
                                details={"agent_id": agent_id})
        host = self.transport.handle(rec["host"])
        await host.remove_agents.remote([agent_id], timeout_s)
        self.directory.drop(agent_id)
        if is_dedicated(rec["host"]):
            await host.stop.remote(timeout_s)
            ray.kill(host)

    async def supervise(self, spec: SupervisorSpec) -> SupervisorRef:
        """Starts a supervision tree (its root is this spec) and returns its handle.

        Raises:
            AgentAlreadyExists: a supervisor with that name, or a child ID, is already live.
            Exception: a child failed to start (what its constructor raised).
        """
        from actors.supervisor import Supervisor

        self._ensure_polling()
        name = supervisor_name(spec.name)
        sup_cls: Any = Supervisor
        try:
            # On this driver's node (alive while the driver runs): Ray ignores soft affinity for
            # an actor that asks for no CPU, and a root placed at random dies with any node.
            here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(),
                                                  soft=False)
            handle = sup_cls.options(name=name, namespace=NAMESPACE, max_concurrency=10_000,
                                     lifetime="detached", num_cpus=0,
                                     scheduling_strategy=here).remote(
                spec, self.registry, None, self.link.max_hops, self.link.default_timeout_ms)
        except ValueError as exc:
            raise AgentAlreadyExists(f"a supervisor named {spec.name!r} is already running",
                                     details={"supervisor": spec.name}) from exc
        try:
            await handle.start.remote()
        except Exception as exc:
            ray.kill(handle)
            raise unwrap(exc) from None
        self.transport.remember(name, handle)
        return SupervisorRef(handle, spec.name, root=True)

    async def open_session(self, initiator: str, responder: str, terms: Terms | None = None,
                           *, session_id: str | None = None, encrypt: bool = False) -> Session:
        """Opens a session between two agents (``initiator`` may be this driver's client ID).

        The responder is asked for its limits (``Agent.session_limits``) and the terms are
        negotiated against them. With ``encrypt``, every payload of the session is encrypted
        (its ID starts with ``enc-``, which every process reads the same way).

        Raises:
            ConfigError: ``encrypt`` while signing is off.
            SessionRefused: a setting the responder cannot accept (named in the error).
            AgentNotFound: the responder does not exist.
        """
        sid = session_id or new_id()
        if encrypt:
            if self.transport.codec.guard is None:
                raise ConfigError("an encrypted session needs signing on (reach.init(sign=True))",
                                  details={"setting": "encrypt"})
            if not sid.startswith(ENCRYPTED_SESSION_PREFIX):
                sid = ENCRYPTED_SESSION_PREFIX + sid
        limits = await self.client.request(responder, {}, LIMITS_SCHEMA)
        opened = await self.store.open_session.remote(
            sid, initiator, responder, asdict(terms or Terms()),
            dict(limits.payload))
        return Session(opened["session_id"], opened["terms"], self.store)

    def session(self, session_id: str) -> Session:
        """A handle on an existing session (to read its context or resume it)."""
        return Session(session_id, {}, self.store)

    async def dead_letters(self, limit: int = 1000) -> list[dict[str, Any]]:
        """Messages that could not be delivered, with their reasons, oldest first."""
        letters: list[dict[str, Any]] = await self.registry.dead_letters.remote(limit)
        return letters

    # -- shortcuts -----------------------------------------------------------------------------

    async def request(self, agent_id: str, payload: Any, schema: str | None = None,
                      **kw: Any) -> Any:
        """``runtime.client.request`` (see :meth:`Client.request`)."""
        return await self.client.request(agent_id, payload, schema, **kw)

    async def agents(self) -> list[AgentInfo]:
        """Every registered agent."""
        return [AgentInfo.from_record(r) for r in await self.registry.agents.remote()]

    async def set_acl(self, acl: Acl | str | Path) -> int:
        """Replaces the deployment's ACL (an :class:`~policies.acl.Acl` or a JSON file); every
        host applies it by its next heartbeat. Returns the ACL's version.

        Raises:
            ConfigError: signing is off (an ACL needs identities), or the ACL is malformed.
            AuthError: the registry refused this driver's signature.
        """
        version: int = await self.acl_call(load_acl(acl))
        return version

    def acl_call(self, acl: Acl) -> Any:
        """The registry call that installs ``acl`` (an ObjectRef)."""
        guard = self.transport.codec.guard
        if guard is None:
            raise ConfigError("an ACL needs signing on: without identities it cannot be enforced",
                              details={"setting": "acl"})
        data, sig = signed_call(guard, self.client.sender, acl_to_doc(acl))
        return self.registry.set_acl.remote(self.client.sender, data, sig)

    async def configure_heartbeat(self, interval_s: float, misses: int) -> None:
        """Changes the heartbeat interval and miss count cluster-wide."""
        await self.registry.configure.remote(interval_s, misses)

    def shutdown(self) -> None:
        """Stops this driver's polling and watches (agents keep running in the cluster).

        When this driver started its Ray (the embedded default), which goes when the driver
        does, the hosts first write their buffered audit records (waiting 5 s at most).
        """
        if self._poller is not None:
            self._poller.cancel()
        self.transport.close()
        metrics.flush()
        if self.owns_ray:
            self._flush_audit(timeout_s=5.0)

    def _flush_audit(self, timeout_s: float) -> None:
        try:
            hosts = ray.get(self.registry.hosts.remote(), timeout=timeout_s)
            calls: list[Any] = []
            for name in hosts:
                with contextlib.suppress(ValueError):  # a host gone already
                    calls.append(ray.get_actor(name, namespace=NAMESPACE).flush_audit.remote())
            ray.wait(calls, num_returns=len(calls), timeout=timeout_s)
        except Exception as exc:  # shutting down: report, never raise
            log.warning("audit records of the hosts may not all be written: %s", exc)


def init(address: str | None = None, *, heartbeat_interval_s: float = 10.0,
         heartbeat_misses: int = 3, max_hops: int = 16, default_timeout_ms: int = 30_000,
         session_path: str | None = None, session_resource: str | None = None,
         session_options: dict[str, Any] | None = None, sign: bool = True,
         encrypt: bool = False, keyring: str | Path | None = None,
         acl: Acl | str | Path | None = None, audit_calls: bool = True,
         **ray_init_kwargs: Any) -> Runtime:
    """Connects to Ray (starting a local one when none is running) and finds reach's actors.

    Args:
        address: ``"auto"`` (the cluster running on this machine) or a cluster address; by
            default RAY_ADDRESS, else a new local Ray of this driver's own (never one that
            happens to run on the machine already, as ``ray.init()`` alone would join).
        heartbeat_interval_s: Interval at which hosts heartbeat (when the registry is created).
        heartbeat_misses: Beats missed before a host's agents are marked offline.
        max_hops: Longest call chain accepted.
        default_timeout_ms: Timeout of requests that give none.
        session_path: The session store's SQLite file (when this call creates the store);
            default REACH_SESSIONS, else ``.reach/sessions.db`` under the current folder.
        session_resource: A custom resource that pins the store to one node on a cluster;
            by default ``reach_state`` where the cluster has it (``cluster.yaml`` gives it to
            the head node).
        session_options: Options of the store (``synchronous``, ``group_commit``,
            ``compact_after``, ``keep_last``, ``summariser``).
        sign: Sign envelopes, registrations and heartbeats, and refuse unsigned ones.
        encrypt: Encrypt every payload (otherwise only sessions opened with ``encrypt=True``).
        keyring: The deployment's keyring file; default REACH_KEYRING, else
            ``.reach/keyring.json`` under the current folder (generated when missing).
        acl: Who may call which capabilities: an :class:`~policies.acl.Acl` or a JSON file
            (default: everyone may call everything).
        audit_calls: Record every call's outcome in the audit log (refusals always are).
        **ray_init_kwargs: Passed to ``ray.init`` when this call starts or joins Ray.

    The security settings reach every process this driver starts through the Ray job's
    runtime environment; the keyring's file must exist at the same path on every node.
    Idempotent: two drivers calling it at once get the same registry.

    Raises:
        AuthError: an explicitly given keyring file is missing or unreadable.
        ConfigError: a setting is invalid, or Ray was started (by ``ray.init``) without them.
    """
    from actors.inbox import Inbox
    from actors.registry import Registry

    starts = False
    if not ray.is_initialized():
        starts = not (address or os.environ.get("RAY_ADDRESS")) or address == "local"
        settings = SecurityConfig(
            sign=sign, encrypt=encrypt, audit_calls=audit_calls,
            keyring=resolve_keyring(keyring, create=keyring is None) if sign else None)
        install(settings)
        runtime_env = dict(ray_init_kwargs.pop("runtime_env", None) or {})
        runtime_env["env_vars"] = {**runtime_env.get("env_vars", {}),
                                   SECURITY_ENV: settings.to_env()}
        ray.init(address=address or os.environ.get("RAY_ADDRESS") or "local", namespace=NAMESPACE,
                 runtime_env=runtime_env, **ray_init_kwargs)
    else:
        _check_security_env()
    resources: dict[str, float] = ray.cluster_resources()  # type: ignore[no-untyped-call]
    if session_resource is None and SESSION_RESOURCE in resources:
        session_resource = SESSION_RESOURCE
    registry_cls: Any = Registry
    inbox_cls: Any = Inbox
    # The registry lives where the session store does (the head, on a `ray up` cluster), not on
    # a node picked at random that may be the first to die.
    pinned = {"resources": {session_resource: 0.001}} if session_resource else {}
    registry = registry_cls.options(
        name=REGISTRY_NAME, namespace=NAMESPACE, lifetime="detached", get_if_exists=True,
        num_cpus=0, **pinned,
    ).remote(heartbeat_interval_s, heartbeat_misses)
    inbox_name = f"reach.inbox.{secrets.token_hex(6)}"
    node = ray.get_runtime_context().get_node_id()
    # Hard affinity: the driver's node is alive while the driver is (soft is ignored for an
    # actor that asks for no CPU, and an inbox elsewhere could die without its driver).
    inbox = inbox_cls.options(name=inbox_name, namespace=NAMESPACE,
                              scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False),
                              ).remote()
    store = _session_store(session_path, session_resource, session_options or {})
    runtime = Runtime(registry, inbox, inbox_name, max_hops=max_hops,
                      default_timeout_ms=default_timeout_ms, store=store, owns_ray=starts)
    if acl is not None:
        ray.get(runtime.acl_call(load_acl(acl)))
    return runtime


def _check_security_env() -> None:
    """Ray is already up: its job must carry reach's settings, or actors would run without them."""
    job_env = ray.get_runtime_context().runtime_env.env_vars()
    if job_env.get(SECURITY_ENV) is None:
        raise ConfigError(
            "Ray was started without reach's security settings, so the agents started from here "
            "could not sign or verify",
            suggestion="call reach.init() before ray.init() (it starts or joins Ray itself)",
            details={"setting": SECURITY_ENV})
    if os.environ.get(SECURITY_ENV) != job_env[SECURITY_ENV]:
        os.environ[SECURITY_ENV] = job_env[SECURITY_ENV]


def _session_store(path: str | None, resource: str | None, options: dict[str, Any]) -> Any:
    from actors.sessions import SessionStore

    where = Path(path or os.environ.get("REACH_SESSIONS", DEFAULT_SESSIONS)).absolute()
    actor_options: dict[str, Any] = {"name": STORE_NAME, "namespace": NAMESPACE,
                                     "lifetime": "detached", "get_if_exists": True,
                                     "num_cpus": 0, "max_concurrency": 10_000}
    if resource:  # pinned to the node that has the resource, so that its file stays put
        actor_options["resources"] = {resource: 0.001}
    store_cls: Any = SessionStore
    return store_cls.options(**actor_options).remote(str(where), **options)
