"""The RemoteHost process: the reach side of the agents connected through one gateway replica.

The replica holds the WebSockets and only bridges them (``reach/remote/channel.py``); this host
is an :class:`~actors.host.AgentHost` whose agents live elsewhere, a process the replica starts
beside itself (:func:`start_remote_host`) and calls through
:class:`~reach.remote.ports.RemoteHostPort`. It registers them (signed as itself), heartbeats
their loads, admits callers by the ACL, audits, and is watched like any host. What it adds:

- ``attach`` verifies a hello (an ID not reserved for reach, signature from the keyring, time
  window, a nonce never seen by any replica: the registry claims it, see below) and registers
  the agent, or, when the agent comes back within its grace period, restarts it: epoch
  + 1, and the requests it had taken and not answered are queued again (``resend``) or failed
  (``cancel``), as its declared pending policy says;
- ``deliver`` queues envelopes for an agent (a bounded queue each: past it, a request's sender
  gets a retryable AgentUnavailable at once); while the agent is disconnected they wait in the
  queue, so a caller waits for it up to its deadline, as for a restarting agent;
- ``take`` (a long poll by the replica) hands over what is queued, as one frame's text;
- ``put`` sends what the agent sent into reach (:mod:`reach.remote.sends`): its replies to the
  requests' senders (each checked against the handler its hello declared, see
  :mod:`reach.remote.replies`: a reply that does not match is refused to the agent and its
  caller gets the fatal error instead), its own requests and notifications to their receivers
  (by ID, or ``cap:<tag>`` by capability);
- ``detach`` starts the grace period (or, after goodbye, ends the agent at once); when the period
  passes, the agent leaves as a death: its watchers (supervisors) see an abnormal exit, and the
  requests still waiting for it fail, retryable.

Hello nonces are claimed in the registry (``claim_nonce``, one call per hello), so a hello seen
by one replica is refused by every other. The registry forgets them when it restarts: a hello
first used before that may then be replayed once more, but only within its time window (a
hello's ``ts`` is at most the window from the clock that checks it), and only while no agent is
online under its ID. When the registry cannot be asked, or holds as many nonces as it may, a
hello is refused with 4503 (the agent reconnects later, with a new nonce).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping
from typing import Any

from actors.host import AgentHost
from policies.priorities import aligned_priorities
from policies.sessions import PendingAction
from reach import clock
from reach._runtime.names import REMOTE_PREFIX, reserved_prefix
from reach.agent import Agent, reads_text
from reach.errors import CodecError, ConfigError, ReachError
from reach.ports.cluster import Cluster
from reach.ports.hosts import CallLimits
from reach.protocol import ERROR_SCHEMA, Envelope, MsgType
from reach.records import AgentRecord, AgentStatus
from reach.remote.ports import RemoteHostClient, RemoteHostPort
from reach.remote.runner import RemoteAgent, RemoteRunner
from reach.remote.sends import AgentSends
from reach.remote.wire import (
    HELLO_WINDOW_S,
    Attached,
    CloseCode,
    Hello,
    WireRefusal,
    envelope_json,
    error_frame,
    hello_refusal,
    safe_envelopes_frame,
)

log = logging.getLogger("reach.remote_host")

#: How long a disconnected agent may take to come back before it counts as dead (seconds).
GRACE_S = 10.0
#: Envelopes queued for one agent before senders are refused (retryable).
QUEUE_LIMIT = 1000


class RemoteHost(AgentHost):
    """Hosts the remote agents of one gateway replica (see the module's docstring).

    Args:
        name: This host's name (``reach.remote.<replica>``).
        cluster: Where the other processes are.
        limits: Hop limit and default timeout of the requests remote agents make.
        grace_s: How long a disconnected agent may take to come back (its restart).
        queue_limit: Envelopes queued per agent before senders are refused.
    """

    def __init__(self, name: str, cluster: Cluster, limits: CallLimits,
                 grace_s: float = GRACE_S, queue_limit: int = QUEUE_LIMIT) -> None:
        super().__init__(name, cluster, limits)
        self.grace_s = grace_s
        self.queue_limit = queue_limit
        self.runners: dict[str, RemoteRunner] = {}  # type: ignore[assignment]
        self.sends = AgentSends(self.link, self._audit)
        # Set whenever a runner has something to take, a connection ends, or the replica
        # pokes the poll (its set of ready connections grew).
        self._signal = asyncio.Event()
        self._poked = False

    # -- joining and leaving -----------------------------------------------------------------

    async def add_agents(  # noqa: PLR0917 - a process call carries its arguments positionally
        self, cls: type[Agent], agent_ids: list[str], args: tuple[Any, ...],
        kwargs: dict[str, Any], epochs: dict[str, int] | None = None,
        priority: int | Mapping[str, int] | None = None,
    ) -> list[AgentRecord]:
        """Remote agents join by connecting, never by being spawned here.

        Raises:
            ConfigError: always.
        """
        raise ConfigError(f"{self.name} hosts remote agents only: they join by connecting to "
                          "the gateway", details={"setting": "placement"})

    async def attach(self, hello: Hello, principal: str) -> Attached | WireRefusal:
        """See :meth:`reach.remote.ports.RemoteHostPort.attach`."""
        refused = await self._check(hello)
        if refused is None:
            try:
                declared = hello.declared()
            except CodecError as exc:
                refused = WireRefusal(code=CloseCode.MALFORMED, reason="declaration",
                                      message=exc.message)
        if refused is not None:
            self._refused(principal, hello.agent_id, refused.reason)
            return refused
        agent = RemoteAgent(hello.agent_id, tuple(declared.capabilities), declared.description,
                            declared)
        runner = self.runners.get(agent.id)
        if runner is not None and runner.conn is not None:
            return self._taken(principal, agent.id, "connected through this gateway replica")
        if agent.id in self.epochs:  # epochs never go backwards, even past a deregistration
            self.epochs[agent.id] += 1
        handed = None if runner is not None else await self._take_over(agent.id)
        try:  # exclusive unless another replica's host handed the agent over (its record)
            epoch = (await self._registry_call("register_many", [[self._remote_entry(agent)],
                                                                  handed is None]))[0]
        except ReachError as exc:
            return self._taken(principal, agent.id, exc.message)
        self.epochs[agent.id] = epoch
        conn = os.urandom(8).hex()
        restarted = runner is not None or handed is not None
        if runner is None:
            runner = RemoteRunner(agent, self.queue_limit, self.link.max_hops, wake=self._signal,
                                  post=self.sends.post, audit=self._audit)
            self.runners[agent.id] = runner
            self._exits[agent.id] = asyncio.get_running_loop().create_future()
            if handed is not None:
                runner.adopt(handed, PendingAction(declared.pending_policy))
        else:
            if runner.grace is not None:
                runner.grace.cancel()
            runner.agent = agent
            runner.restart(PendingAction(declared.pending_policy))
        runner.conn = conn
        self.down.discard(agent.id)
        self._start_heartbeat()
        self.trail.record(principal, agent.id, capability="reach.connect", msg_type="connect",
                          outcome="restarted" if restarted else "ok")
        return Attached(agent_id=agent.id, epoch=epoch, conn=conn, restarted=restarted,
                        queue_limit=self.queue_limit)

    async def _take_over(self, agent_id: str) -> list[list[Any]] | None:
        """Takes over an agent that reconnected here while another replica's host holds it,
        disconnected, within its grace period (its restart, through another replica): that
        host hands over its open requests and lets it go. None when no other replica's host
        held it that way (the registration then decides, exclusive as always)."""
        try:
            rec = await self.registry.lookup(agent_id)
        except ReachError:
            return None
        if (rec is None or rec.status is not AgentStatus.ONLINE or rec.host == self.name
                or not rec.host.startswith(REMOTE_PREFIX)):
            return None
        try:
            handed = await RemoteHostClient(self.link.cluster.find_process(rec.host)).hand_over(
                agent_id, self.name)
        except ReachError as exc:  # that replica is gone: its record expires with its beats
            log.info("%s could not take %s over from %s: %s", self.name, agent_id, rec.host, exc)
            return None
        if handed is not None:
            self.epochs[agent_id] = max(self.epochs.get(agent_id, 0), rec.epoch + 1)
        return handed

    async def hand_over(self, agent_id: str, to: str) -> list[list[Any]] | None:
        """See :meth:`reach.remote.ports.RemoteHostPort.hand_over`."""
        runner = self.runners.get(agent_id)
        if runner is None or runner.conn is not None:
            return None
        handed = runner.hand_over()
        self.trail.record(self.name, agent_id, capability="reach.connect", msg_type="connect",
                          outcome=f"moved: to {to}")
        # Its restart, elsewhere: the host it went to registers it over this one's record.
        await self._leave([agent_id], 0.0, False, f"reconnected through {to}", deregister=False)
        return handed

    async def _check(self, hello: Hello) -> WireRefusal | None:
        """Why a hello is refused before its agent is looked at, or None."""
        prefix = reserved_prefix(hello.agent_id)
        if prefix is not None:
            return WireRefusal(code=CloseCode.MALFORMED, reason="reserved_id",
                               message=f"{hello.agent_id!r} uses the prefix {prefix!r}, "
                                       "reserved for reach's own processes")
        guard = self.transport.codec.guard
        if guard is None:  # signing off: a trusted deployment, hellos are not checked
            return None
        now = clock.now()
        refused = hello_refusal(hello, guard.keyring.secret(hello.agent_id), round(now * 1000),
                                guard.config.window_s)
        if refused is not None:
            return refused
        # Past this, the window refuses the hello anyway, whichever replica's clock checks it.
        expires_at = now + 2 * max(guard.config.window_s, HELLO_WINDOW_S)
        try:
            fresh = await self._registry_call("claim_nonce", [hello.nonce, expires_at])
        except ReachError as exc:  # unchecked is refused: a replay must not pass an outage
            full = exc.details.get("reason") == "nonce_limit"
            return WireRefusal(code=CloseCode.UNAVAILABLE,
                               reason="nonce_limit" if full else "registry_unavailable",
                               message=f"the hello's nonce could not be checked: {exc.message}")
        if not fresh:
            return WireRefusal(code=CloseCode.BAD_SIGNATURE, reason="replayed_nonce",
                               message=f"the hello of {hello.agent_id!r} was replayed")
        return None

    def _taken(self, principal: str, agent_id: str, why: str) -> WireRefusal:
        self._refused(principal, agent_id, "already_online")
        return WireRefusal(code=CloseCode.ALREADY_ONLINE, reason="already_online",
                           message=f"agent {agent_id!r} is online already: {why}")

    def _remote_entry(self, agent: RemoteAgent) -> dict[str, Any]:
        entry = {"agent_id": agent.id, "capabilities": list(agent.capabilities),
                 "description": agent.description, "host": self.name, "node": self.node,
                 "epoch": self.epochs.get(agent.id, 0)}
        ranked = aligned_priorities(agent.capabilities, agent.declaration.priorities)
        if ranked:  # left out when all are primaries, as a host's own entries
            entry["priorities"] = list(ranked)
        return entry

    async def refused(self, principal: str, agent_id: str, reason: str) -> None:
        """See :meth:`reach.remote.ports.RemoteHostPort.refused`."""
        self._refused(principal, agent_id, reason)

    def _refused(self, principal: str, agent_id: str, reason: str) -> None:
        log.warning("refused the connection of %s as %r: %s", principal, agent_id, reason)
        self.trail.record(principal, agent_id or self.name, capability="reach.connect",
                          msg_type="refused", outcome=f"refused: {reason}")

    async def detach(self, agent_id: str, conn: str, reason: str, goodbye: bool) -> None:
        """See :meth:`reach.remote.ports.RemoteHostPort.detach`."""
        runner = self.runners.get(agent_id)
        if runner is None or runner.conn != conn:
            return
        runner.end_connection()
        if goodbye:
            await self._leave([agent_id], 0.0, True, f"goodbye: {reason}" if reason else "goodbye")
            return
        loop = asyncio.get_running_loop()
        runner.grace = loop.call_later(self.grace_s, self._expire, agent_id, reason)

    def _expire(self, agent_id: str, reason: str) -> None:
        runner = self.runners.get(agent_id)
        if runner is None or runner.conn is not None:
            return
        leaving = asyncio.get_running_loop().create_task(self._leave(
            [agent_id], 0.0, False,
            f"disconnected ({reason}) and not back within {self.grace_s:g} s"))
        self._background.add(leaving)
        leaving.add_done_callback(self._background.discard)

    # -- to and from the agent -----------------------------------------------------------------

    async def take(self, ready: dict[str, str]) -> dict[str, str | None]:
        """See :meth:`reach.remote.ports.RemoteHostPort.take`."""
        while True:
            out: dict[str, str | None] = {}
            for agent_id, conn in ready.items():
                runner = self.runners.get(agent_id)
                if runner is None or runner.conn != conn:
                    out[agent_id] = None
                elif runner.queue:
                    text = self._frame(runner, runner.take())
                    if text is not None:
                        out[agent_id] = text
            if out or self._poked:
                self._poked = False
                return out
            self._signal.clear()  # nothing for these connections: wait for news
            await self._signal.wait()

    def _frame(self, runner: RemoteRunner, items: list[dict[str, Any]]) -> str | None:
        """The frame of what was taken. An envelope whose payload has no JSON form does not
        travel: a request is answered with a CodecError (fatal) to its caller; a reply to the
        agent's own request goes as that error instead (its call fails now, not at its
        deadline); anything else is dropped and logged."""
        if not items:
            return None
        text, bad = safe_envelopes_frame(items)
        if not bad:
            return text
        instead: list[dict[str, Any]] = []
        for item in bad:
            asked = runner.asked.get(item["msg_id"])
            error = CodecError(f"the payload of {item['msg_id']} has no JSON form",
                               details={"rule": "json"})
            if asked is not None:
                runner.fail([asked], error)
            elif item.get("request_id") and item.get("msg_type") != MsgType.REQUEST.value:
                instead.append(envelope_json(Envelope(
                    msg_type=MsgType.ERROR, sender=str(item.get("sender")),
                    receiver=runner.agent.id, request_id=str(item["request_id"]),
                    trace_id=item.get("trace_id"), payload_schema=ERROR_SCHEMA,
                    error_info=error.to_info())))
            else:
                log.warning("dropped %s for %s: %s", item["msg_id"], runner.agent.id, error)
        if not instead:
            return text
        kept = [i for i in items if not any(i is b for b in bad)]
        return safe_envelopes_frame(kept + instead)[0]

    async def poke(self) -> None:
        """See :meth:`reach.remote.ports.RemoteHostPort.poke`."""
        self._poked = True
        self._signal.set()

    async def put(self, batches: list[tuple[str, str, list[dict[str, Any]]]],
                  ) -> dict[str, list[dict[str, Any]]]:
        """See :meth:`reach.remote.ports.RemoteHostPort.put`."""
        refused: dict[str, list[dict[str, Any]]] = {}
        for agent_id, conn, items in batches:
            errors = self._put(agent_id, conn, items)
            if errors:
                refused.setdefault(agent_id, []).extend(errors)
        return refused

    def _put(self, agent_id: str, conn: str, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        runner = self.runners.get(agent_id)
        if runner is None or runner.conn != conn:
            return [error_frame(None, "not_attached", "this connection is no longer the "
                                 f"agent's: {agent_id!r} reconnected or left")]
        return self.sends.put(runner, items)

    # -- what tools and the A2A gateway read ------------------------------------------------------

    async def describe(self, agent_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
        """The handlers the remote agents declared (as :meth:`AgentHost.describe` gives them)."""
        return {i: [{"schema": h.schema_ref, "returns": h.returns, "streaming": h.streaming,
                     "reads_text": reads_text(h.schema_ref), "json_schema": h.json_schema}
                    for h in self.runners[i].agent.declaration.handlers]
                for i in agent_ids if i in self.runners}

    async def info(self) -> dict[str, Any]:
        """As :meth:`AgentHost.info`, with which agents are connected now."""
        info = await super().info()
        info["connected"] = sorted(i for i, r in self.runners.items() if r.conn is not None)
        return info


def start_remote_host(cluster: Cluster, name: str, limits: CallLimits, grace_s: float = GRACE_S,
                      queue_limit: int = QUEUE_LIMIT) -> RemoteHostPort:
    """Starts a :class:`RemoteHost` (the arguments are its own) on this process's node, for the
    gateway replica calling: it lives and dies with the process that starts it."""
    process = cluster.start_process(name, RemoteHost,
                                    (name, cluster, limits, grace_s, queue_limit))
    return RemoteHostClient(process)
