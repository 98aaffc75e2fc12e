"""A host's agents and their life: the part of an AgentHost that is not delivery.

Agents are added (constructed, started, registered in one registry call), watched until they
leave (normally or not: what their supervisors hear), marked online or offline as they report
themselves, and removed (deregistered first, their handlers let finish). One heartbeat carries
the loads of all of them, re-registers those the registry does not know (after its restart) and
brings the ACL up to date; a host with no agents yet can offer itself as a warm spare (again
with each heartbeat), and ends its own process when the registry answers that it is one too many.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections.abc import Coroutine, Mapping
from typing import Any

from policies.acl import Acl
from policies.priorities import aligned_priorities, resolve_priorities
from reach import clock
from reach._runtime.directory import Directory
from reach._runtime.link import Link
from reach._runtime.metrics import metrics
from reach._runtime.names import check_agent_ids
from reach._runtime.poison import Quarantine
from reach._runtime.runner import AgentRunner
from reach._runtime.trace_setup import setup
from reach._runtime.trail import AuditTrail
from reach._runtime.transport import Transport
from reach.agent import Agent
from reach.context import Context
from reach.errors import AgentAlreadyExists, ReachError, TaskCancelled
from reach.ports.cluster import Cluster
from reach.ports.hosts import CallLimits
from reach.protocol import Envelope
from reach.records import AgentExit, AgentRecord, AgentStatus
from reach.security.guard import acl_from_doc, signed_call

log = logging.getLogger("reach.host")

#: The least young-generation threshold of a host's process (Python's default is 700). A
#: batch's messages keep their envelopes, tasks and spans alive until its replies leave: at 700,
#: tracing made a young collection of nearly every batch (10 times off's), and with them the
#: full collections, some 5 us of the host's CPU a message. Long-lived objects are unaffected.
YOUNG_GC_THRESHOLD = 10_000


def raise_young_gc_threshold(least: int = YOUNG_GC_THRESHOLD) -> None:
    """Raises this process's young-generation collection threshold to ``least`` (never
    lowers it, nor turns collecting back on: an application's own setting stays)."""
    young, *older = gc.get_threshold()
    if 0 < young < least:
        gc.set_threshold(least, *older)


class HostedAgents:
    """The agents of one host and their life (the base of :class:`actors.host.AgentHost`).

    Args:
        name: This host's name (its endpoint).
        cluster: Where the other processes are.
        limits: Hop limit, and the timeout of requests made from handlers that give none.
    """

    def __init__(self, name: str, cluster: Cluster, limits: CallLimits) -> None:
        setup(cluster, name)
        raise_young_gc_threshold()
        self.name = name
        self.cluster = cluster
        self.limits = limits
        self.registry = cluster.registry()
        self.directory = Directory(self.registry)
        self.transport = Transport(name, cluster, on_dead_endpoint=self.directory.drop_endpoint,
                                   on_undelivered=self.directory.dead_letter)
        self.link = Link(cluster, self.transport, self.directory, limits)
        self.node = cluster.node_id()
        self.runners: dict[str, AgentRunner] = {}
        # The shape this host is a warm spare of, while it is one (empty, offered).
        self.spare_shape: str | None = None
        self.epochs: dict[str, int] = {}
        # The capability priorities given to agents here when they were added (resolved by
        # tag), in place of their classes' own.
        self.priorities: dict[str, dict[str, int]] = {}
        self.interval_s = 10.0
        self._heartbeat: asyncio.Task[None] | None = None
        self._stopped: asyncio.Event | None = None
        # Invariant: an exit future exists for every agent here, until a watcher reads it.
        self._exits: dict[str, asyncio.Future[AgentExit]] = {}
        self._background: set[asyncio.Task[Any]] = set()
        self._adding: set[str] = set()
        # Agents here that report themselves unavailable (a proxy whose remote agent stopped
        # answering): marked offline, and left out of heartbeats, which would mark them online.
        self.down: set[str] = set()
        self.trail = AuditTrail(cluster)
        # What the registry quarantined for agents of this host (poison: refused on delivery).
        self.quarantined = Quarantine()
        self.acl_version = -1
        self._acl_fetch: asyncio.Task[None] | None = None
        # Agent classes kept loaded (see preload).
        self._classes: set[type[Agent]] = set()
        guard = self.transport.codec.guard
        self._audit = self._audit_call if guard is not None and guard.config.audit_calls else None
        self._hooks = _AgentHooks(self)

    def _stop_event(self) -> asyncio.Event:
        if self._stopped is None:
            self._stopped = asyncio.Event()
        return self._stopped

    async def add_agents(  # noqa: PLR0917 - a process call carries its arguments positionally
        self, cls: type[Agent], agent_ids: list[str], args: tuple[Any, ...],
        kwargs: dict[str, Any], epochs: dict[str, int] | None = None,
        priority: int | Mapping[str, int] | None = None,
    ) -> list[AgentRecord]:
        """Constructs, starts and registers agents; returns their registry records.

        ``epochs`` are the least epochs the new incarnations may have (a supervisor passes its
        child's last epoch plus one, so that epochs never go backwards, not even after the
        registry restarted and forgot them). ``priority`` replaces the capability priorities
        the class declares (one for every capability of each agent, or one by tag: see
        :func:`policies.priorities.resolve_priorities`).

        Raises:
            AgentAlreadyExists: an ID is live here or elsewhere; nothing is added.
            ConfigError: an ID uses a prefix reserved for reach's own processes, or
                ``priority`` names a capability an agent does not hold.
            Exception: whatever an agent's constructor or on_start raised.
        """
        check_agent_ids(*agent_ids)  # reach's own names: an agent may not sign as one of them
        taken = [i for i in agent_ids if i in self.runners or i in self._adding]
        if taken:
            raise AgentAlreadyExists(f"agent {taken[0]!r} is already live on host {self.name}",
                                     details={"agent_id": taken[0], "host": self.name})
        self._adding.update(agent_ids)  # held until added or failed: two spawns cannot race
        for agent_id, epoch in (epochs or {}).items():
            if agent_id in agent_ids:
                self.epochs[agent_id] = max(self.epochs.get(agent_id, 0), epoch)
        try:
            return await self._add(cls, agent_ids, args, kwargs, priority)
        finally:
            self._adding.difference_update(agent_ids)

    async def _add(self, cls: type[Agent], agent_ids: list[str], args: tuple[Any, ...],
                   kwargs: dict[str, Any], priority: int | Mapping[str, int] | None,
                   ) -> list[AgentRecord]:
        agents: list[Agent] = []
        for agent_id in agent_ids:
            agent = cls(*args, **kwargs)
            agent.id = agent_id
            agent._reach_hooks = self._hooks
            if priority is None:
                self.priorities.pop(agent_id, None)
            else:  # against the agent's own tags: an A2A proxy's are its instance's
                self.priorities[agent_id] = resolve_priorities(
                    tuple(agent.capabilities), agent.capability_priorities, priority)
            agents.append(agent)
        # Side by side, as agents added by calls of their own start: one agent's slow start
        # (its state read from a store) does not hold up the others of its call.
        started = await asyncio.gather(*(a.on_start() for a in agents), return_exceptions=True)
        failure = next((e for e in started if isinstance(e, BaseException)), None)
        if failure is not None:
            raise failure
        fresh: dict[str, AgentRunner] = {}
        for agent in agents:
            fresh[agent.id] = AgentRunner(agent, self.link, Context, audit=self._audit,
                                          refused=self._audit_refusal)
            fresh[agent.id].node = self.node
        entries = [self._entry(r.agent) for r in fresh.values()]
        await self._acl_ready()  # before the first agent can be called
        epochs = await self._registry_call("register_many", [entries, True])
        records = []
        for entry, epoch in zip(entries, epochs, strict=True):
            self.epochs[entry["agent_id"]] = fresh[entry["agent_id"]].epoch = epoch
            records.append(AgentRecord(entry["agent_id"], tuple(entry["capabilities"]),
                                       entry["description"], self.name, self.node, epoch=epoch,
                                       priorities=tuple(entry.get("priorities", ()))))
        self.runners.update(fresh)
        self.spare_shape = None  # a spare given agents is one no more
        loop = asyncio.get_running_loop()
        for agent_id, runner in fresh.items():
            self._exits[agent_id] = loop.create_future()
            self._in_background(runner.recover())  # its pending session requests
        self._start_heartbeat()
        return records

    def _in_background(self, work: Coroutine[Any, Any, Any]) -> None:
        """Runs ``work`` as a task this host keeps until it ends."""
        task = asyncio.get_running_loop().create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _mark(self, agent_id: str, available: bool) -> None:
        """Marks an agent here online or offline in the registry, as the agent reported."""
        status = AgentStatus.ONLINE if available else AgentStatus.OFFLINE
        try:
            await self._registry_call("mark", [[agent_id], status.value])
        except Exception as exc:  # the registry may be restarting: the next report marks again
            log.warning("marking %s %s failed: %s", agent_id, status.value, exc)
            if available:
                self.down.add(agent_id)
            elif agent_id in self.runners:
                self.down.discard(agent_id)

    async def watch_agent(self, agent_id: str) -> AgentExit:
        """Returns when the agent leaves this host, normally or not.

        An agent that is not here (this host restarted empty) has left abnormally. If the host
        itself dies, the call fails, which the watcher reads as an abnormal exit too.
        """
        exit_ = self._exits.get(agent_id)
        if exit_ is None:
            return AgentExit(False, f"agent {agent_id!r} is not on host {self.name}")
        return await asyncio.shield(exit_)

    async def cancel_trace(self, trace_id: str, reason: str) -> int:
        """Cancels every running handler of one trace (a task was aborted); returns how many."""
        why = TaskCancelled(reason, details={"trace_id": trace_id})
        return sum(r.cancel(why, trace_id) for r in self.runners.values())

    async def quarantine(self, agent_id: str, prints: dict[str, tuple[int, float]]) -> int:
        """Refuses from now on, as poison, the requests to ``agent_id`` with one of these
        fingerprints (each with its kills and the seconds its quarantine lasts); told by the
        registry, before the agent is added here when it is being added. Returns how many are
        quarantined for the agent now."""
        held = self.quarantined.hold(agent_id, prints, clock.monotonic())
        log.warning("quarantined %d request contents for %s (poison)", held, agent_id)
        return held

    def _entry(self, agent: Agent) -> dict[str, Any]:
        tags = tuple(agent.capabilities)
        entry = {"agent_id": agent.id, "capabilities": list(tags),
                 "description": agent.description, "host": self.name, "node": self.node,
                 "epoch": self.epochs.get(agent.id, 0)}
        ranked = aligned_priorities(tags, self.priorities.get(agent.id,
                                                              agent.capability_priorities))
        if ranked:  # left out when all are primaries, as before priorities existed
            entry["priorities"] = list(ranked)
        return entry

    async def remove_agents(self, agent_ids: list[str], timeout_s: float = 5.0) -> int:
        """Deregisters agents first, lets their in-flight handlers finish, then drops them.

        Their watchers see a normal exit.
        """
        return await self._leave(agent_ids, timeout_s, True, "stopped")

    async def _leave(self, agent_ids: list[str], timeout_s: float, normal: bool,
                     reason: str, *, deregister: bool = True) -> int:
        """Drops agents (deregistered first, unless another host has taken them over) and
        tells their watchers why."""
        here = [i for i in agent_ids if i in self.runners]
        try:
            if deregister:
                await self._registry_call("deregister", [here, self.name])
        except Exception as exc:  # the registry may be restarting; its table rebuilds anyway
            log.warning("deregistering %s failed: %s", here, exc)
        runners = [self.runners.pop(i) for i in here]
        for agent_id in here:
            self.priorities.pop(agent_id, None)
        self.down.difference_update(here)
        await asyncio.gather(*(r.stop(timeout_s) for r in runners))
        await self.transport.flush()  # the last replies leave before anyone kills this host
        for agent_id in here:
            exit_ = self._exits.pop(agent_id, None)
            if exit_ is not None and not exit_.done():
                exit_.set_result(AgentExit(normal, reason))
        return len(runners)

    def _audit_refusal(self, caller: str, callee: str, capability: str, error: ReachError,
                       trace_id: str | None) -> None:
        reason = str(error.details.get("reason", error.code))
        metrics.count("reach_auth_refusals", 1, reason)
        log.warning("refused a call from %s to %s: %s (trace %s)", caller, callee or self.name,
                    error.message, trace_id)
        self.trail.record(caller, callee or self.name, capability=capability,
                          msg_type="refused", trace_id=trace_id,
                          outcome=f"refused: {reason}")

    def _audit_call(self, env: Envelope, outcome: str) -> None:
        self.trail.record(env.sender, env.receiver, capability=env.payload_schema or "",
                          msg_type=env.msg_type.value, outcome=outcome, trace_id=env.trace_id)

    async def watch(self) -> None:
        """Returns only when this host stops; a caller's open watch fails the moment it dies."""
        await self._stop_event().wait()

    async def stop(self, timeout_s: float = 5.0) -> None:
        """Removes every agent gracefully, then releases the watches."""
        await self.remove_agents(list(self.runners), timeout_s)
        if self._heartbeat is not None:
            self._heartbeat.cancel()
        self._stop_event().set()

    async def count(self) -> int:
        """Number of agents on this host.

        A spawner asks this first (a new host's liveness probe), so the first call also fetches
        the ACL, in the background: the host's first agent then need not wait for it.
        """
        if self.acl_version < 0 and self._acl_fetch is None:
            self._acl_fetch = asyncio.get_running_loop().create_task(self._refresh_acl())
            self._acl_fetch.add_done_callback(_read_failure)
        return len(self.runners)

    async def preload(self, classes: list[type[Agent]]) -> int:
        """Keeps agent classes this host is likely to be given (its pool's, or those of the
        agents a spare would take over); returns how many it keeps.

        A class defined in a script travels by value, and the first time a process receives it
        costs it about 10 ms (rebuilding the class and its models' schemas); later arrivals
        find it rebuilt, as long as the process holds it. Paid here, ahead, not by a restart.
        """
        self._classes.update(classes)
        return len(self._classes)

    async def _acl_ready(self) -> None:
        """Has the ACL fetched (by the background fetch under way, else now)."""
        if self.acl_version >= 0:
            return
        if self._acl_fetch is not None:
            with contextlib.suppress(Exception):  # it failed: fetched again below
                await asyncio.shield(self._acl_fetch)
        if self.acl_version < 0:
            await self._refresh_acl()

    async def _refresh_acl(self) -> None:
        guard = self.transport.codec.guard
        version, doc = await self.registry.acl()
        if guard is not None:
            guard.set_acl(Acl() if doc is None else acl_from_doc(doc))
        self.acl_version = version

    async def _registry_call(self, method: str, args: Any) -> Any:
        """Calls the registry with arguments signed by this host."""
        data, sig = signed_call(self.transport.codec.guard, self.name, args)
        return await getattr(self.registry, method)(self.name, data, sig)

    def _start_heartbeat(self) -> None:
        if self._heartbeat is None:
            self._heartbeat = asyncio.get_running_loop().create_task(self._beat_forever())

    async def _beat_forever(self) -> None:
        while True:
            try:
                await self.beat()
            except Exception as exc:  # the registry may be restarting: beat again later
                log.warning("heartbeat from %s failed: %s", self.name, exc)
            await asyncio.sleep(self.interval_s)

    async def offer_as_spare(self, shape: str) -> None:
        """Offers this empty host to the registry as a warm spare of ``shape`` (until it is
        given agents), heartbeating so that a dead spare is never handed out for long; it ends
        its own process when the registry answers an offer with "retire"."""
        self.spare_shape = shape
        await self._offer()
        self._start_heartbeat()

    async def _offer(self) -> bool:
        """Offers this host as a spare, with the deployment's sizing; ends this process if told
        to retire (and returns False)."""
        keep = await self._registry_call("offer_spare", [
            self.node, self.spare_shape, self.limits.spares, self.limits.max_spares])
        if keep is not False or self.runners or self._adding:
            return True  # a spare still, or given agents while the offer was on its way
        # More spares than the recent restarts want, and they have stopped for a while: an idle
        # process is memory held for nothing.
        log.info("spare %s retires", self.name)
        self.spare_shape = None
        self.cluster.kill(self.cluster.host(self.name))
        return False

    async def beat(self) -> list[str]:
        """Sends one heartbeat; re-registers agents the registry does not know. Returns them."""
        if self.spare_shape is not None and not self.runners and not await self._offer():
            return []  # a spare offered again, which retired
        loads = {i: r.inflight for i, r in self.runners.items() if i not in self.down}
        unknown, self.interval_s, acl_version = await self._registry_call("heartbeat", loads)
        if acl_version != self.acl_version:
            await self._refresh_acl()
        if unknown:
            entries = [self._entry(self.runners[i].agent) for i in unknown if i in self.runners]
            epochs = await self._registry_call("register_many", [entries, False])
            for entry, epoch in zip(entries, epochs, strict=True):
                self.epochs[entry["agent_id"]] = epoch
        return list(unknown)


class _AgentHooks:
    """A host's side of what its agents ask of it (:class:`reach.agent.HostHooks`): one object
    per host, given to each agent it adds."""

    def __init__(self, host: HostedAgents) -> None:
        self._host = host

    def agent_exit(self, agent_id: str, normal: bool, reason: str) -> None:
        """See :meth:`reach.agent.HostHooks.agent_exit`."""
        host = self._host
        host._in_background(host._leave([agent_id], 5.0, normal, reason or "agent exited"))

    def agent_available(self, agent_id: str, available: bool) -> None:
        """See :meth:`reach.agent.HostHooks.agent_available`."""
        host = self._host
        if available == (agent_id not in host.down):
            return
        if available:
            host.down.discard(agent_id)
        else:
            host.down.add(agent_id)
        host._in_background(host._mark(agent_id, available))


def _read_failure(task: asyncio.Task[None]) -> None:
    """Reads a background fetch's failure (the next need of it fetches again)."""
    if not task.cancelled() and task.exception() is not None:
        log.info("fetching the ACL failed: %s", task.exception())
