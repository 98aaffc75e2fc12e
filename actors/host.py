"""The AgentHost actor: one agent (dedicated placement) or many (a packed pool host).

Thin by design: it decodes frames, hands replies to the transport and requests to each agent's
runner, heartbeats the registry once for all its agents, and re-registers them when the registry
answers that it does not know them (after a registry restart).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from typing import Any

from actors._mem import rss_bytes
from policies.acl import Acl
from reach._runtime.directory import Directory
from reach._runtime.link import Link
from reach._runtime.metrics import messages, metrics
from reach._runtime.names import check_agent_ids, is_endpoint
from reach._runtime.runner import AgentRunner, ReplySink
from reach._runtime.transport import Transport
from reach.agent import Agent, HandlerSpec, reads_text
from reach.cluster import CallLimits, Cluster
from reach.context import Context
from reach.errors import (
    AgentAlreadyExists,
    AgentNotFound,
    AuthError,
    CodecError,
    ReachError,
    TaskCancelled,
)
from reach.protocol import ERROR_SCHEMA, Envelope, MsgType
from reach.records import AgentExit, AgentRecord, AgentStatus
from reach.security.guard import Guard, acl_from_doc, signed_call
from reach.security.trail import AuditTrail

log = logging.getLogger("reach.host")

#: How long a deliver call waits for its handlers so that fast replies ride back in its return.
LINGER_S = 0.002


class AgentHost:
    """Hosts agents and delivers envelopes to them.

    Args:
        name: This host's name (its endpoint).
        cluster: Where the other processes are.
        limits: Hop limit, and the timeout of requests made from handlers that give none.
    """

    def __init__(self, name: str, cluster: Cluster, limits: CallLimits) -> None:
        self.name = name
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
        self.acl_version = -1
        self._acl_fetch: asyncio.Task[None] | None = None
        # Agent classes kept loaded (see preload).
        self._classes: set[type[Agent]] = set()
        guard = self.transport.codec.guard
        self._audit = self._audit_call if guard is not None and guard.config.audit_calls else None

    def _stop_event(self) -> asyncio.Event:
        if self._stopped is None:
            self._stopped = asyncio.Event()
        return self._stopped

    async def add_agents(self, cls: type[Agent], agent_ids: list[str], args: tuple[Any, ...],
                         kwargs: dict[str, Any], epochs: dict[str, int] | None = None,
                         ) -> list[AgentRecord]:
        """Constructs, starts and registers agents; returns their registry records.

        ``epochs`` are the least epochs the new incarnations may have (a supervisor passes its
        child's last epoch plus one, so that epochs never go backwards, not even after the
        registry restarted and forgot them).

        Raises:
            AgentAlreadyExists: an ID is live here or elsewhere; nothing is added.
            ConfigError: an ID uses a prefix reserved for reach's own processes.
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
            return await self._add(cls, agent_ids, args, kwargs)
        finally:
            self._adding.difference_update(agent_ids)

    async def _add(self, cls: type[Agent], agent_ids: list[str], args: tuple[Any, ...],
                   kwargs: dict[str, Any]) -> list[AgentRecord]:
        fresh: dict[str, AgentRunner] = {}
        for agent_id in agent_ids:
            agent = cls(*args, **kwargs)
            agent.id = agent_id
            agent._reach_exit = self._exit_hook(agent_id)  # type: ignore[attr-defined]
            agent._reach_available = self._available_hook(agent_id)  # type: ignore[attr-defined]
            await agent.on_start()
            fresh[agent_id] = AgentRunner(agent, self.link, Context, audit=self._audit,
                                           refused=self._audit_refusal)
        entries = [self._entry(r.agent) for r in fresh.values()]
        await self._acl_ready()  # before the first agent can be called
        epochs = await self._registry_call("register_many", [entries, True])
        records = []
        for entry, epoch in zip(entries, epochs, strict=True):
            self.epochs[entry["agent_id"]] = epoch
            records.append(AgentRecord(entry["agent_id"], tuple(entry["capabilities"]),
                                       entry["description"], self.name, self.node, epoch=epoch))
        self.runners.update(fresh)
        self.spare_shape = None  # a spare given agents is one no more
        loop = asyncio.get_running_loop()
        for agent_id, runner in fresh.items():
            self._exits[agent_id] = loop.create_future()
            recovery = loop.create_task(runner.recover())  # its pending session requests
            self._background.add(recovery)
            recovery.add_done_callback(self._background.discard)
        self._start_heartbeat()
        return records

    def _exit_hook(self, agent_id: str) -> Any:
        def hook(normal: bool, reason: str) -> None:
            leaving = asyncio.get_running_loop().create_task(
                self._leave([agent_id], 5.0, normal, reason or "agent exited"))
            self._background.add(leaving)
            leaving.add_done_callback(self._background.discard)

        return hook

    def _available_hook(self, agent_id: str) -> Any:
        def hook(available: bool) -> None:
            if available == (agent_id not in self.down):
                return
            if available:
                self.down.discard(agent_id)
            else:
                self.down.add(agent_id)
            marking = asyncio.get_running_loop().create_task(self._mark(agent_id, available))
            self._background.add(marking)
            marking.add_done_callback(self._background.discard)

        return hook

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

    def _entry(self, agent: Agent) -> dict[str, Any]:
        return {"agent_id": agent.id, "capabilities": list(agent.capabilities),
                "description": agent.description, "host": self.name, "node": self.node,
                "epoch": self.epochs.get(agent.id, 0)}

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
        self.down.difference_update(here)
        await asyncio.gather(*(r.stop(timeout_s) for r in runners))
        await self.transport.flush()  # the last replies leave before anyone kills this host
        for agent_id in here:
            exit_ = self._exits.pop(agent_id, None)
            if exit_ is not None and not exit_.done():
                exit_.set_result(AgentExit(normal, reason))
        return len(runners)

    async def deliver(self, frame: bytes, reply_to: str) -> tuple[list[str], bytes | None]:
        """Takes a frame of envelopes.

        Returns the IDs of requests for agents not on this host, and a frame of the replies that
        were ready within the linger (fast handlers answer in the same Ray call); later replies
        are sent to ``reply_to``.
        """
        envelopes, refused = self.transport.codec.decode_batch_partial(frame)
        messages(envelopes, "received")
        sink = ReplySink(self.transport.post, reply_to)
        for bad in refused:
            if isinstance(bad.error, AuthError):
                self._audit_refusal(bad.sender or reply_to, "", "", bad.error, None)
            self._refuse(bad.msg_id, bad.sender, bad.error, sink)
        guard = self.transport.codec.guard
        if guard is not None:
            envelopes = await self._admit(envelopes, guard, sink)
        not_here: list[str] = []
        tasks = []
        for env in envelopes:
            if env.request_id is not None and env.msg_type is not MsgType.REQUEST:
                self.transport.accept(env)
                continue
            runner = self.runners.get(env.receiver)
            if runner is None:
                if env.msg_type is MsgType.REQUEST:
                    not_here.append(env.msg_id)
                else:
                    self.directory.dead_letter([env], AgentNotFound(
                        f"no agent {env.receiver!r} on host {self.name}",
                        details={"agent_id": env.receiver, "host": self.name}))
                continue
            task = runner.deliver(env, sink)
            if task is not None:
                tasks.append(task)
        if tasks:
            await asyncio.sleep(0)  # one iteration runs every handler that needs no I/O
            if not all(t.done() for t in tasks):
                await asyncio.wait(tasks, timeout=LINGER_S)
        # With the replies of this call, those of the caller's earlier calls not sent yet.
        replies = sink.close() + self.transport.take_replies(reply_to)
        if not replies:
            return not_here, None
        messages(replies, "sent")
        return not_here, self._reply_frame(replies)

    async def _admit(self, envelopes: list[Envelope], guard: Guard,
                     sink: ReplySink) -> list[Envelope]:
        """The envelopes whose senders are known and allowed by the ACL to call their receivers;
        the others are refused (a fatal AuthError to the caller) and audited."""
        calls = [e for e in envelopes if e.msg_type is not MsgType.RESPONSE
                 and e.msg_type is not MsgType.ERROR and e.receiver in self.runners
                 and not (e.request_id is not None and e.msg_type is MsgType.EVENT)]
        if not calls:
            return envelopes
        # reach's own processes sign as themselves and hold no capabilities
        caps: dict[str, Any] = {s: () if is_endpoint(s) else self.directory.known_principal(s)
                                for s in {e.sender for e in calls}}
        missing = [s for s, c in caps.items() if c is None]
        if missing:  # first calls from these senders: ask the registry who they are
            caps.update(zip(missing, await asyncio.gather(
                *(self.directory.principal(s) for s in missing), return_exceptions=True),
                strict=True))
        refused: set[str] = set()
        for env in calls:
            callee = self.runners[env.receiver].agent
            sender_caps = caps[env.sender]
            if isinstance(sender_caps, BaseException) or sender_caps is None:
                error = AuthError(
                    f"{env.sender!r} is not a known agent: refused its call to {callee.id!r}",
                    details={"reason": "unknown_principal", "principal": env.sender})
            else:
                decision = guard.allow(env.sender, sender_caps, callee.capabilities)
                if decision.allowed:
                    continue
                error = AuthError(f"access denied: {decision.reason}",
                                  suggestion="ask the deployment's operator to change its ACL",
                                  details={"reason": "acl", "principal": env.sender,
                                           "rule": decision.rule})
            refused.add(env.msg_id)
            self._audit_refusal(env.sender, env.receiver, env.payload_schema or "", error,
                                env.trace_id)
            self._refuse(env.msg_id, env.sender if env.msg_type is MsgType.REQUEST else None,
                         error, sink)
        return [e for e in envelopes if e.msg_id not in refused] if refused else envelopes

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

    def _reply_frame(self, replies: list[Envelope]) -> bytes:
        """The replies as one frame; a reply that cannot be encoded becomes its error."""
        codec = self.transport.codec
        try:
            return codec.encode_batch(replies)
        except CodecError:
            fixed = []
            for reply in replies:
                try:
                    codec.encode(reply)
                    fixed.append(reply)
                except CodecError as exc:
                    fixed.append(Envelope(
                        msg_type=MsgType.ERROR, sender=reply.sender, receiver=reply.receiver,
                        request_id=reply.request_id or reply.msg_id, trace_id=reply.trace_id,
                        payload_schema=ERROR_SCHEMA, error_info=exc.to_info()))
            return codec.encode_batch(fixed)

    def _refuse(self, msg_id: str | None, sender: str | None, error: ReachError,
                sink: ReplySink) -> None:
        if msg_id is None or not sender:
            log.warning("refused an unreadable envelope from %s: %s", sink.reply_to, error)
            return
        sink.send(Envelope(
            msg_type=MsgType.ERROR, sender=self.name, receiver=sender, request_id=msg_id,
            payload_schema=ERROR_SCHEMA, error_info=error.to_info()))

    async def watch(self) -> None:
        """Returns only when this host stops; a caller's open watch fails the moment it dies."""
        await self._stop_event().wait()

    async def stop(self, timeout_s: float = 5.0) -> None:
        """Removes every agent gracefully, then releases the watches."""
        await self.remove_agents(list(self.runners), timeout_s)
        if self._heartbeat is not None:
            self._heartbeat.cancel()
        self._stop_event().set()

    async def info(self) -> dict[str, Any]:
        """Agents here with their in-flight counts, transport counters and resident memory."""
        return {"host": self.name, "node": self.node, "rss_bytes": rss_bytes(),
                "pid": os.getpid(),
                "agents": {i: r.inflight for i, r in self.runners.items()},
                "batches_sent": self.transport.batches_sent,
                "envelopes_sent": self.transport.envelopes_sent}

    async def describe(self, agent_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
        """The handlers of these agents (those here): for each, a list of ``{"schema",
        "returns", "streaming", "reads_text", "json_schema"}`` (what the A2A gateway puts in an
        agent's card and validates a payload against)."""
        return {i: _described(type(self.runners[i].agent)) for i in agent_ids if i in self.runners}

    async def flush_audit(self) -> int:
        """Writes the buffered audit records now; returns how many."""
        return await self.trail.flush()

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
        given agents), heartbeating so that a dead spare is never handed out for long."""
        self.spare_shape = shape
        await self._registry_call("offer_spare", [self.node, shape])
        self._start_heartbeat()

    async def beat(self) -> list[str]:
        """Sends one heartbeat; re-registers agents the registry does not know. Returns them."""
        if self.spare_shape is not None and not self.runners:  # a spare: offered again
            await self._registry_call("offer_spare", [self.node, self.spare_shape])
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


def _read_failure(task: asyncio.Task[None]) -> None:
    """Reads a background fetch's failure (the next need of it fetches again)."""
    if not task.cancelled() and task.exception() is not None:
        log.info("fetching the ACL failed: %s", task.exception())


# Agent class -> its handlers as describe() gives them (JSON schemas are worth computing once).
_DESCRIBED: dict[type[Agent], list[dict[str, Any]]] = {}


def _described(cls: type[Agent]) -> list[dict[str, Any]]:
    described = _DESCRIBED.get(cls)
    if described is None:
        described = _DESCRIBED[cls] = [_handler_doc(s) for s in cls.handler_specs()]
    return described


def _handler_doc(spec: HandlerSpec) -> dict[str, Any]:
    return {"schema": spec.reads, "returns": spec.returns, "streaming": spec.streaming,
            "reads_text": reads_text(spec.reads),
            "json_schema": spec.model.model_json_schema() if spec.model is not None else None}
