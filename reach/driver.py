"""A driver's handle on the cluster: spawn, supervise and talk to agents, open sessions.

:class:`Driver` is what every process that acts on the cluster from outside an agent holds: a
user's driver (through :class:`reach.Runtime`, which adds what faces outward: the gateway and
remote A2A agents), a gateway replica, a test on the fake cluster. It talks to the cluster only
through its ports (:mod:`reach.ports`).
"""


from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Awaitable, Mapping, Sequence
from pathlib import Path
from typing import Any, Self

from policies.acl import Acl
from policies.priorities import check_priority
from policies.sessions import Terms
from reach._runtime.directory import Directory
from reach._runtime.metrics import metrics
from reach._runtime.names import (
    DRIVER_PREFIX,
    INBOX_PREFIX,
    supervisor_name,
)
from reach._runtime.spawner import Spawner
from reach._runtime.trace_setup import setup
from reach._runtime.transport import Transport
from reach.agent import Agent, Dedicated, Placement
from reach.client import Client, Link
from reach.errors import (
    AgentNotFound,
    AgentUnavailable,
    ConfigError,
    ReachError,
)
from reach.ports.cluster import Cluster
from reach.ports.hosts import CallLimits
from reach.ports.inbox import InboxPort
from reach.protocol import new_id
from reach.records import AgentRecord, DeadLetter
from reach.security.guard import (
    ENCRYPTED_SESSION_PREFIX,
    acl_to_doc,
    load_acl,
    signed_call,
)
from reach.sessions import Session, find_session, open_session
from reach.specs import SupervisorSpec
from reach.supervision import SupervisorRef

log = logging.getLogger("reach.driver")


class Driver:
    """A handle on reach from outside its agents: spawn agents, supervise them, talk to them,
    open sessions.

    Users hold its subclass :class:`reach.Runtime` (from :func:`reach.init`); a gateway replica
    and a test on a :class:`~reach.testing.FakeCluster` hold a Driver directly. Send with
    :attr:`client`. Close it with ``await d.close()`` (or ``async with``), which lets what this
    driver sent leave first.

    Args:
        cluster: Where the processes are.
        limits: Hop limit and default timeout of this driver's requests and of the hosts and
            supervisors it starts.
        owns_ray: This driver started the Ray it runs on (it goes when the driver does).
    """

    def __init__(self, cluster: Cluster, limits: CallLimits | None = None, *,
                 owns_ray: bool = False) -> None:
        self.cluster = cluster
        self.limits = limits or CallLimits()
        self.driver_id = secrets.token_hex(6)
        inbox_name = f"{INBOX_PREFIX}{self.driver_id}"
        setup(cluster, inbox_name)
        self._inbox: InboxPort = cluster.start_inbox(inbox_name)
        self.directory = Directory(cluster.registry())
        self.transport = Transport(inbox_name, cluster,
                                   on_dead_endpoint=self.directory.drop_endpoint,
                                   on_expect=self._ensure_polling,
                                   on_undelivered=self.directory.dead_letter)
        self.link = Link(cluster, self.transport, self.directory, self.limits)
        self.client = Client(self.link, f"{DRIVER_PREFIX}{self.driver_id}")
        self._poller: asyncio.Task[None] | None = None
        self.owns_ray = owns_ray
        self.spawner = Spawner(cluster, self.limits)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _ensure_polling(self) -> None:
        if self._poller is None or self._poller.done():
            self._poller = asyncio.get_running_loop().create_task(self._poll())

    async def _poll(self) -> None:
        """Takes the replies that reached this driver's inbox, for as long as the driver runs.

        A frame that cannot be read is logged and skipped; an inbox that died (its node went)
        fails every waiting request with AgentUnavailable instead of leaving it to time out.
        """
        failures = 0
        while True:
            try:
                frames = await self._inbox.take()
                failures = 0
            except AgentUnavailable as exc:
                failures += 1
                if failures < 3:  # a transient failure of the call: try again shortly
                    log.warning("taking replies from the inbox failed: %s", exc)
                    await asyncio.sleep(0.1)
                    continue
                log.error("this driver's inbox is gone: %s", exc)  # noqa: TRY400 - no traceback
                gone = AgentUnavailable(
                    f"this driver's reply inbox died: {exc.message}",
                    suggestion="start a new runtime (reach.init) to receive replies again")
                for pending in list(self.transport.pending.values()):
                    pending.settle(gone)
                self.transport.pending.clear()
                return
            for frame in frames:
                try:
                    self.transport.accept_frame(frame)
                except ReachError as exc:
                    log.warning("skipped an unreadable reply frame: %s", exc)

    # -- agents --------------------------------------------------------------------------------

    async def spawn(self, cls: type[Agent], agent_id: str, *, placement: Placement | None = None,
                    args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None,
                    priority: int | Mapping[str, int] | None = None) -> AgentRecord:
        """Starts an agent and registers it; returns its registry record.

        Args:
            priority: The priority of its capabilities, in place of what its class declares:
                one for all of them, or one per capability tag (those left out keep the
                class's); 0 is the primary, 1, 2... backups.

        Raises:
            AgentAlreadyExists: an agent with that ID is live.
            ConfigError: ``priority`` is not an int of at least 0, or names a capability the
                class does not declare.
            UnknownSchema: a handler reads a model that is not registered.
        """
        records = await self.spawn_many(cls, [agent_id], placement=placement, args=args,
                                        kwargs=kwargs, priority=priority)
        return records[0]

    async def spawn_many(self, cls: type[Agent], agent_ids: Sequence[str], *,
                         placement: Placement | None = None, args: Sequence[Any] = (),
                         kwargs: dict[str, Any] | None = None,
                         priority: int | Mapping[str, int] | None = None) -> list[AgentRecord]:
        """Starts several agents of one class (packed agents spread over the pool's hosts),
        all with ``priority`` when given (see :meth:`spawn`).

        Raises:
            AgentAlreadyExists: an ID is live.
            AgentUnavailable: a placement requires resources no live node has.
            ConfigError: ``priority`` is not valid for the class's capabilities.
            Exception: what an agent's constructor or ``on_start`` raised.
        """
        if priority is not None:
            check_priority(priority, tuple(cls.capabilities))
        self._ensure_polling()
        records = await self.spawner.spawn(cls, agent_ids, placement or Dedicated(), args,
                                           kwargs, priority=priority)
        for record in records:
            self.directory.learn(record)
        return records

    async def stop(self, agent_id: str, timeout_s: float = 5.0) -> None:
        """Stops one agent: deregistered first, in-flight requests finish, then it is dropped;
        its host, if one of its own (a dedicated agent's, or a warm spare a pool took), is ended
        once it holds no agent.

        Raises:
            AgentNotFound: no agent has that ID.
        """
        rec = await self.cluster.registry().lookup(agent_id)
        if rec is None or not rec.host:
            raise AgentNotFound(f"no agent {agent_id!r} is registered",
                                details={"agent_id": agent_id})
        host = self.cluster.host(rec.host)
        await host.remove_agents([agent_id], timeout_s)
        self.directory.drop(agent_id)
        await self.spawner.release(host, timeout_s)

    async def agents(self) -> list[AgentRecord]:
        """Every registered agent."""
        return await self.cluster.registry().agents()

    async def dead_letters(self, limit: int = 1000) -> list[DeadLetter]:
        """Messages that could not be delivered, with their reasons, oldest first."""
        return await self.cluster.registry().dead_letters(limit)

    # -- supervision ---------------------------------------------------------------------------

    async def supervise(self, spec: SupervisorSpec) -> SupervisorRef:
        """Starts a supervision tree (its root is this spec, on this driver's node) and returns
        its handle.

        Raises:
            AgentAlreadyExists: a supervisor with that name, or a child ID, is already live.
            Exception: a child failed to start (what its constructor raised).
        """
        self._ensure_polling()
        port = self.cluster.start_supervisor(spec, None, self.limits, self.cluster.node_id())
        try:
            await port.start()
        except Exception:
            self.cluster.kill(port)
            raise
        return SupervisorRef(port, spec.name, root=True, cluster=self.cluster)

    def find_supervisor(self, name: str) -> SupervisorRef:
        """A running supervisor by name.

        Raises:
            AgentNotFound: no supervisor of that name is running.
        """
        return SupervisorRef(self.cluster.supervisor(supervisor_name(name)), name)

    # -- sessions ------------------------------------------------------------------------------

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
        return await open_session(self.client, initiator, responder, terms or Terms(), sid)

    async def session(self, session_id: str) -> Session:
        """A handle on an existing session (to read its context, or resume it).

        Raises:
            SessionNotFound: no such session.
        """
        return await find_session(self.client, session_id)

    # -- deployment ----------------------------------------------------------------------------

    async def set_acl(self, acl: Acl | str | Path) -> int:
        """Replaces the deployment's ACL (an :class:`~policies.acl.Acl` or a JSON file); every
        host applies it by its next heartbeat. Returns the ACL's version.

        Raises:
            ConfigError: signing is off (an ACL needs identities), or the ACL is malformed.
            AuthError: the registry refused this driver's signature.
        """
        return await self._acl_call(acl)

    def _acl_call(self, acl: Acl | str | Path) -> Awaitable[int]:
        """The registry call, signed by this driver, that installs ``acl`` (under way).

        Raises:
            ConfigError: signing is off, or the ACL is malformed.
        """
        guard = self.transport.codec.guard
        if guard is None:
            raise ConfigError("an ACL needs signing on: without identities it cannot be enforced",
                              details={"setting": "acl"})
        data, sig = signed_call(guard, self.client.sender, acl_to_doc(load_acl(acl)))
        return self.cluster.registry().set_acl(self.client.sender, data, sig)

    async def configure_heartbeat(self, interval_s: float, misses: int) -> None:
        """Changes the heartbeat interval and miss count cluster-wide."""
        await self.cluster.registry().configure(interval_s, misses)

    # -- closing -------------------------------------------------------------------------------

    async def close(self, timeout_s: float = 5.0) -> None:
        """Lets every envelope this driver queued leave, waits (up to ``timeout_s``) for the
        replies still pending, then stops receiving. Agents keep running in the cluster."""
        try:
            await asyncio.wait_for(self._drain(), timeout_s)
        except TimeoutError:
            log.warning("closing: %d replies still pending after %.1f s",
                        len(self.transport.pending), timeout_s)
        await self._flush_audit(timeout_s)
        self._stop_receiving()

    async def _drain(self) -> None:
        await self.transport.flush()
        while self.transport.pending:
            await asyncio.sleep(0.01)

    def shutdown(self) -> None:
        """Stops receiving at once (agents keep running in the cluster); prefer
        :meth:`close`. Warns, with how many, when envelopes queued here had not left yet."""
        queued = self.transport.queued()
        if queued:
            log.warning("shutdown dropped %d envelopes still queued in this driver's outboxes; "
                        "await rt.close() lets them leave", queued)
        self._stop_receiving()

    def _stop_receiving(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
        self.transport.close()
        metrics.flush()

    async def _flush_audit(self, timeout_s: float) -> None:
        """When this driver started its Ray (which goes when the driver does), the hosts write
        their buffered audit records first."""
        if not self.owns_ray:
            return
        try:
            hosts = await self.cluster.registry().hosts()
            calls = []
            for name in hosts:
                try:
                    calls.append(self.cluster.host(name).flush_audit())
                except AgentUnavailable:  # a host gone already
                    continue
            await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), timeout_s)
        except (ReachError, TimeoutError) as exc:  # closing: report, never raise
            log.warning("audit records of the hosts may not all be written: %s", exc)
