"""The AgentHost actor: one agent (dedicated placement) or many (a packed pool host).

Thin by design: it decodes frames, admits their senders by the ACL, hands replies to the
transport and requests to each agent's runner, and sends back the replies ready within a short
linger in the same call. Its agents' life (adding, watching, removing, heartbeats, the ACL) is
:class:`actors.host_agents.HostedAgents`, its base.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Any

from actors._mem import rss_bytes
from actors.host_agents import HostedAgents
from reach import clock
from reach._runtime.metrics import messages
from reach._runtime.names import is_endpoint
from reach._runtime.runner import ReplySink
from reach.agent import Agent, HandlerSpec, reads_text
from reach.errors import (
    AgentNotFound,
    AuthError,
    CodecError,
    ReachError,
)
from reach.protocol import ERROR_SCHEMA, Envelope, MsgType
from reach.security.guard import Guard

log = logging.getLogger("reach.host")

#: How long a deliver call waits for its handlers so that fast replies ride back in its return.
LINGER_S = 0.002


class AgentHost(HostedAgents):
    """Hosts agents and delivers envelopes to them.

    Args:
        name: This host's name (its endpoint).
        cluster: Where the other processes are.
        limits: Hop limit, and the timeout of requests made from handlers that give none.
    """

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
            task = self._hand_in(env, sink, not_here)
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
                decision = guard.allow(env.sender, sender_caps, tuple(callee.capabilities))
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

    def _hand_in(self, env: Envelope, sink: ReplySink,
                 not_here: list[str]) -> asyncio.Task[None] | None:
        """Hands a request or notification to its agent's runner; returns the handler's task
        (None when refused, or when the agent is not here: a request's ID is then added to
        ``not_here``, anything else is a dead letter)."""
        runner = self.runners.get(env.receiver)
        if runner is None:
            if env.msg_type is MsgType.REQUEST:
                not_here.append(env.msg_id)
            else:
                self.directory.dead_letter([env], AgentNotFound(
                    f"no agent {env.receiver!r} on host {self.name}",
                    details={"agent_id": env.receiver, "host": self.name}))
            return None
        if self.quarantined and env.msg_type is MsgType.REQUEST and self._poison(env, sink):
            return None
        return runner.deliver(env, sink)

    def _poison(self, env: Envelope, sink: ReplySink) -> bool:
        """Refuses a request whose content is quarantined for its receiver (a fatal
        PoisonMessage to its sender, a dead letter, an audit record); False if it is not."""
        error = self.quarantined.refusal(env, clock.monotonic())
        if error is None:
            return False
        log.warning("refused poison request %s from %s to %s (trace %s)", env.msg_id,
                    env.sender, env.receiver, env.trace_id)
        self.trail.record(env.sender, env.receiver, capability=env.payload_schema,
                          msg_type="poison", trace_id=env.trace_id,
                          outcome=f"refused: poison (killed {error.kills} incarnations)")
        self.directory.dead_letter([env], error)
        sink.send(env.fail(error, sender=env.receiver))
        return True

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

    async def info(self) -> dict[str, Any]:
        """Agents here with their in-flight counts, transport counters, resident memory and the
        CPU time this process has used (seconds, all its threads)."""
        return {"host": self.name, "node": self.node, "rss_bytes": rss_bytes(),
                "cpu_s": time.process_time(), "pid": os.getpid(),
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
