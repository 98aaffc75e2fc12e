"""Running one delivered envelope through an agent's handler, and replying.

This is the part of a host that knows about agents and handlers: the host decodes frames and
calls :meth:`AgentRunner.deliver`; replies leave through the process's transport. A handler's
exception never kills its agent: a ReachError keeps its severity, anything else becomes a
retryable HandlerError naming the exception's type and message. Where the process traces, each
run is a server span (:mod:`reach._runtime.tracer`): the child of the envelope's span, current
while the handler runs (what it sends is its child), ended in error with the error's code and
severity when the handler fails.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from time import time_ns
from typing import Any

from opentelemetry.trace import Span
from pydantic import BaseModel

from policies.acl import CANCEL_RIGHT, Acl, may_cancel
from policies.routing import check_hops
from policies.sessions import PendingAction, recover
from reach import clock
from reach._runtime.courier import Courier
from reach._runtime.current_span import enter, leave
from reach._runtime.link import Link
from reach._runtime.session_calls import (
    CANCEL_SCHEMA,
    LIMITS_SCHEMA,
    cancel,
    finish,
    limits_payload,
)
from reach._runtime.tracer import (
    TRACING,
    dropped,
    failed,
    handle_shared,
    remember,
    start_handle,
)
from reach._runtime.transport import STREAM_END_SCHEMA
from reach.agent import Agent, HandlerSpec
from reach.errors import (
    AgentUnavailable,
    AuthError,
    HandlerError,
    ProtocolError,
    ReachError,
    RequestTimeout,
    TaskCancelled,
)
from reach.ports.sessions import RecordedReply
from reach.protocol import Envelope, MsgType
from reach.schemas import schema_registry
from reach.spans import Attr, AttrValue

log = logging.getLogger("reach._runtime.runner")

#: How many sets of span attributes a runner keeps (see AgentRunner._span_shared).
_SHARED_KEPT = 64

#: Schema of the empty reply of a handler that returns None.
ACK_SCHEMA = "reach.ack@1.0"

#: The audit outcome of a handler's result that was discarded because a later holder of the same
#: request claimed it meanwhile (see :meth:`AgentRunner._once`).
DISCARDED = "discarded: fenced by a later holder"


class ReplySink:
    """Where the replies to one ``deliver`` call go.

    While the call is open, replies are collected and travel back in its return value (no extra
    Ray call for a fast handler); once closed, they are posted to the sender's endpoint.
    """

    def __init__(self, post: Callable[[str, Envelope], None], reply_to: str) -> None:
        self._post = post
        self.reply_to = reply_to
        self.collected: list[Envelope] | None = []

    def send(self, env: Envelope) -> None:
        """Sends one reply."""
        if self.collected is not None:
            self.collected.append(env)
        else:
            self._post(self.reply_to, env)

    def push(self, env: Envelope) -> None:
        """Sends one reply through the endpoint (stream chunks, which must stay in order)."""
        self._post(self.reply_to, env)

    def close(self) -> list[Envelope]:
        """Stops collecting; returns what was collected."""
        collected, self.collected = self.collected or [], None
        return collected


#: Records a refusal: ``(caller, callee, capability, error, trace_id)``.
Refusals = Callable[[str, str, str, ReachError, str | None], None]

#: Makes what a handler gets with a request, from the link, the agent's ID and the request (the
#: host passes :class:`reach.context.Context`).
ContextFactory = Callable[[Link, str, Envelope], object]


class AgentRunner:
    """One live agent in a host: its instance, its in-flight count, its running handler tasks.

    Args:
        agent: The agent.
        link: Its host's link.
        context: Makes the context each handler gets.
        audit: Hears each handled envelope's outcome, for the audit log.
        refused: Hears the refusals the runner decides itself.
    """

    def __init__(self, agent: Agent, link: Link, context: ContextFactory,
                 audit: Callable[[Envelope, str], None] | None = None,
                 refused: Refusals | None = None) -> None:
        self.agent = agent
        self.link = link
        self.context = context
        # Hears each handled envelope's outcome for the audit log: "ok", "error: <code>", or
        # DISCARDED (a result fenced off by a later holder of the same request).
        self.audit = audit
        # Hears the refusals the runner decides itself (a cancel from a stranger): always audited.
        self.refused = refused
        self.inflight = 0
        self.handled = 0
        #: The agent's epoch and node, as its host registered it (for its spans).
        self.epoch = 0
        self.node = ""
        # Invariant: every running handler task maps to the envelope it handles.
        self._tasks: dict[asyncio.Task[None], Envelope] = {}
        self._cancelled: dict[asyncio.Task[None], ReachError] = {}
        self._spans_shared: dict[tuple[str, MsgType, int, str], Mapping[str, AttrValue]] = {}
        for ref, model in type(agent).schema_models().items():
            if ref not in schema_registry.refs():
                schema_registry.register(ref, model)

    def deliver(self, env: Envelope, sink: ReplySink) -> asyncio.Task[None] | None:
        """Starts handling a request or notification; refusals are replied at once.

        Returns the handler's task, or None when the envelope was refused.
        """
        if env.payload_schema in (LIMITS_SCHEMA, CANCEL_SCHEMA):
            self._builtin(env, sink)
            return None
        try:
            check_hops(env.hops, self.agent.id, self.link.max_hops)
            left = env.remaining_ms(clock.now())
            if left is not None and left <= 0:
                raise RequestTimeout(
                    f"request reached {self.agent.id!r} {-left:.0f} ms after its deadline",
                    details={"agent_id": self.agent.id},
                )
            spec = type(self.agent).handler_for(env.payload_schema)
            message = spec.read(env.payload, env.payload_schema)
        except ReachError as exc:
            self._refuse(env, sink.send, exc)
            return None
        # A handler of a trace sampled out runs in no span (its sends carry the trace on):
        # sampled_out() and dropped() inline, as every envelope asks.
        traced = TRACING.tracer is not None and (
            env.trace_flags & 1 if env.span_id is not None else not dropped(env))
        run = self._run(spec, env, message, sink, time_ns() if traced else None)
        task = asyncio.get_running_loop().create_task(run)
        self._tasks[task] = env
        task.add_done_callback(self._forget)
        return task

    def _builtin(self, env: Envelope, sink: ReplySink) -> None:
        """Requests every agent answers itself: its session limits, and cancel notices."""
        if env.payload_schema == LIMITS_SCHEMA and env.msg_type is MsgType.REQUEST:
            sink.send(env.reply(limits_payload(self.agent), LIMITS_SCHEMA, sender=self.agent.id))
        elif env.payload_schema == CANCEL_SCHEMA:
            self._on_cancel(env, sink)

    def _on_cancel(self, env: Envelope, sink: ReplySink) -> None:
        """A cancel notice (or request): obeyed only from whom :func:`may_cancel` allows: the
        request's own sender, or a caller an ACL rule grants ``reach.cancel``. A refusal is a
        fatal AuthError (``not_your_request``), audited with the canceller; the request runs on.
        A cancel sent as a request is answered (``{"cancelled": n}``, or the refusal)."""
        request_id = str(env.payload.get("request_id"))
        target = next((e for e in self._tasks.values() if e.msg_id == request_id), None)
        if target is not None and env.sender != target.sender:
            guard = self.link.transport.codec.guard
            caps = self.link.directory.known_principal(env.sender) or ()
            decision = may_cancel(guard.acl if guard is not None else Acl(), env.sender, caps,
                                  target.sender)
            if not decision.allowed:
                self._refuse_cancel(env, sink, AuthError(
                    f"{env.sender!r} may not cancel request {request_id}: {decision.reason}",
                    suggestion="only a request's sender (or a caller the ACL grants "
                               f"{CANCEL_RIGHT}) may cancel it",
                    details={"reason": "not_your_request", "principal": env.sender,
                             "request_id": request_id}))
                return
        why = TaskCancelled(f"cancelled by {env.sender}: {env.payload.get('reason', '')}",
                            details={"request_id": request_id})
        hit = self.cancel(why, request_id=request_id)
        if self.audit is not None:
            self.audit(env, f"ok: cancelled {hit}")
        if env.msg_type is MsgType.REQUEST:
            sink.send(env.reply({"cancelled": hit}, CANCEL_SCHEMA, sender=self.agent.id))

    def _refuse_cancel(self, env: Envelope, sink: ReplySink, error: AuthError) -> None:
        if self.refused is not None:
            self.refused(env.sender, self.agent.id, CANCEL_SCHEMA, error, env.trace_id)
        else:
            log.warning("refused a cancel from %s: %s (trace %s)", env.sender, error.message,
                        env.trace_id)
        if env.msg_type is MsgType.REQUEST:
            sink.send(env.fail(error, sender=self.agent.id))

    def _forget(self, task: asyncio.Task[None]) -> None:
        self._tasks.pop(task, None)
        self._cancelled.pop(task, None)

    def cancel(self, why: ReachError, trace_id: str | None = None,
               request_id: str | None = None) -> int:
        """Cancels running handlers (of one trace, of one request, or all); callers get ``why``."""
        hit = [t for t, env in self._tasks.items()
               if (trace_id is None or env.trace_id == trace_id)
               and (request_id is None or env.msg_id == request_id)]
        for task in hit:
            self._cancelled[task] = why
            task.cancel()
        return len(hit)

    def _refuse(self, env: Envelope, send: Callable[[Envelope], None], exc: ReachError,
                span: Span | None = None) -> None:
        if span is not None:
            failed(span, exc)
        refuse(env, send, exc, self.agent.id, self.audit)

    def _span_shared(self, env: Envelope) -> Mapping[str, AttrValue]:
        """The attributes this agent's handler spans share for ``env``'s schema and type."""
        key = (env.payload_schema, env.msg_type, self.epoch, self.node)
        return self._spans_shared.get(key) or remember(  # (past ones: epochs, nodes of the past)
            self._spans_shared, key, handle_shared(env, tuple(self.agent.capabilities), {
                Attr.HOST: self.link.transport.endpoint, Attr.NODE: self.node,
                Attr.EPOCH: self.epoch}), _SHARED_KEPT)

    async def _run(self, spec: HandlerSpec, env: Envelope, message: Any, sink: ReplySink,
                   received_ns: int | None = None) -> None:
        """Runs a handler; with ``received_ns`` (when its host took ``env``), in a server span
        of its own, current while the handler runs."""
        span: Span | None = None
        if received_ns is not None and (tracer := TRACING.tracer) is not None:  # (or stopped)
            span = start_handle(tracer, env, self._span_shared(env),
                                max(time_ns() - received_ns, 0) / 1e6)
            token = enter(span)  # (trace.use_span's, cheaper)
        self.inflight += 1
        ctx = self.context(self.link, self.agent.id, env)
        # A stream's chunks, end and error all take the same (ordered) path.
        send = sink.push if spec.streaming else sink.send
        left = env.remaining_ms(clock.now())
        try:
            async with asyncio.timeout(None if left is None else left / 1000):
                outcome = await self._invoke(spec, ctx, message, env, sink)
            if self.audit is not None:
                self.audit(env, outcome)
        except asyncio.CancelledError:
            why = self._cancelled.get(asyncio.current_task())  # type: ignore[arg-type]
            if why is not None:
                self._refuse(env, send, why, span)
            raise
        except TimeoutError:
            self._refuse(env, send, RequestTimeout(
                f"handler {spec.method} of {self.agent.id!r} passed the deadline",
                details={"agent_id": self.agent.id, "timeout_ms": env.timeout_ms}), span)
        except ReachError as exc:
            self._refuse(env, send, exc, span)
        except Exception as exc:
            self._refuse(env, send, HandlerError(
                f"{type(exc).__name__}: {exc}",
                details={"type": type(exc).__name__, "agent_id": self.agent.id}), span)
        finally:
            self.inflight -= 1
            self.handled += 1
            if span is not None:
                leave(token)
                span.end()

    async def _invoke(self, spec: HandlerSpec, ctx: object, message: Any, env: Envelope,
                      sink: ReplySink) -> str:
        """Runs the handler and sends its reply (or its chunks and end of stream); returns the
        outcome to audit."""
        fn = getattr(self.agent, spec.method)
        if spec.streaming:
            sent = 0
            async for chunk in fn(ctx, message):
                sink.push(self._chunk(env, spec, chunk))
                sent += 1
            if env.msg_type is MsgType.REQUEST:
                sink.push(env.reply({"chunks": sent}, STREAM_END_SCHEMA, sender=self.agent.id))
        elif env.msg_type is MsgType.REQUEST and (spec.once or env.session_id):
            reply, outcome = await self._once(fn, ctx, message, env, spec)
            sink.send(reply)
            return outcome
        else:
            result = await fn(ctx, message)
            if env.msg_type is MsgType.REQUEST:
                sink.send(self._reply(env, spec, result))
        return "ok"

    async def _once(self, fn: Any, ctx: object, message: Any, env: Envelope,
                    spec: HandlerSpec) -> tuple[Envelope, str]:
        """Runs a handler at most once per request ID; a retry gets the recorded reply.

        The run is fenced: it claims the request (a token from the store) before running, and
        its reply is recorded only if no later holder claimed the request meanwhile (a failover
        away from this holder while it was slow, not dead). Returns the reply to send and the
        outcome to audit: ``ok``, or :data:`DISCARDED` for a result fenced off.
        """
        earlier = [t for t, e in self._tasks.items()
                   if e.msg_id == env.msg_id and t is not asyncio.current_task()]
        if earlier:  # the same request is running here already: wait for its recorded reply
            await asyncio.wait(earlier)
        store = self.link.store.port
        recorded = await store.reply_for(env.msg_id)
        if recorded is not None:
            return env.reply(recorded["payload"], recorded["schema"], sender=self.agent.id), "ok"
        token = await store.claim(env.msg_id, self.agent.id)
        reply = self._reply(env, spec, await fn(ctx, message))
        commit = await store.commit_reply(env.msg_id, token, self.agent.id, dict(reply.payload),
                                          reply.payload_schema or "")
        if commit["committed"]:
            return reply, "ok"
        return self._fenced(env, token, commit["reply"]), DISCARDED

    def _fenced(self, env: Envelope, token: int, recorded: RecordedReply | None) -> Envelope:
        """The answer of a holder whose result a later claim fenced off: the recorded reply, or
        while the other holder has recorded none, a retryable AgentUnavailable."""
        log.warning("discarded the result of %s for request %s (token %d, trace %s): a later "
                    "holder claimed the request", self.agent.id, env.msg_id, token, env.trace_id)
        if recorded is not None:
            return env.reply(recorded["payload"], recorded["schema"], sender=self.agent.id)
        return env.fail(AgentUnavailable(
            f"request {env.msg_id} is being answered by another holder; {self.agent.id!r} "
            "discarded its own result",
            suggestion="retry under the same request ID: the retry gets the other holder's reply",
            details={"reason": "fenced", "agent_id": self.agent.id, "request_id": env.msg_id}),
            sender=self.agent.id)

    async def recover(self) -> int:
        """After a (re)start: resends or cancels the session requests this agent had pending.

        Returns how many there were. Each ends answered or cancelled, once, and the agent's
        ``on_recovered`` hook hears the outcome.
        """
        try:
            pending = await self.link.store.port.pending_for(self.agent.id)
        except ReachError as exc:  # no store, or it is restarting: nothing to recover now
            log.warning("could not read the pending requests of %s: %s", self.agent.id, exc)
            return 0
        courier = Courier(self.link, self.agent.id)
        for rec in pending:
            env = Envelope.parse(rec["envelope"])
            action = recover(type(self.agent).pending_policy, rec["deadline"], clock.now())
            reply: Envelope | None = None
            error: ReachError | None = None
            if action is PendingAction.RESEND:
                try:
                    reply = await finish(courier, env)
                except ReachError as exc:
                    error = exc
            else:
                error = TaskCancelled(f"agent {self.agent.id!r} restarted and cancelled it",
                                      details={"request_id": env.msg_id})
                await cancel(courier, env, error)
            try:
                await self.agent.on_recovered(env, reply, error)
            except Exception:
                log.exception("on_recovered of %s raised", self.agent.id)
        return len(pending)

    def _reply(self, env: Envelope, spec: HandlerSpec, result: Any) -> Envelope:
        if result is None:
            return env.reply({}, ACK_SCHEMA, sender=self.agent.id)
        if isinstance(result, BaseModel):
            return env.reply(result, spec.returns, sender=self.agent.id)
        if spec.returns is None:
            raise ProtocolError(
                f"handler {spec.method} returned a {type(result).__name__} but declares no "
                "returns= schema",
                suggestion="return a registered pydantic model, or pass returns= to @handler",
            )
        return env.reply(result, spec.returns, sender=self.agent.id)

    def _chunk(self, env: Envelope, spec: HandlerSpec, chunk: Any) -> Envelope:
        reply = self._reply(env, spec, chunk)
        return Envelope(
            msg_type=MsgType.EVENT, sender=reply.sender, receiver=reply.receiver,
            payload=reply.payload, payload_schema=reply.payload_schema,
            request_id=env.msg_id, trace_id=env.trace_id, session_id=env.session_id,
            hops=env.hops,
        )

    async def stop(self, timeout_s: float) -> None:
        """Lets running handlers finish for up to ``timeout_s``, then cancels them.

        A request cut short is answered with a retryable AgentUnavailable, so that its task owner
        can hand it to another holder of the capability.
        """
        running = [t for t in self._tasks if t is not asyncio.current_task()]
        if running:
            _, late = await asyncio.wait(running, timeout=timeout_s)
            if late:
                self.cancel(AgentUnavailable(
                    f"agent {self.agent.id!r} stopped before finishing the request",
                    suggestion="retry on another holder of the capability",
                    details={"agent_id": self.agent.id}))
                await asyncio.wait(late, timeout=1.0)
        try:
            await self.agent.on_stop()
        except Exception:
            log.exception("on_stop of %s raised", self.agent.id)


def refuse(env: Envelope, send: Callable[[Envelope], None], exc: ReachError, agent_id: str,
           audit: Callable[[Envelope, str], None] | None) -> None:
    """Refuses an envelope for ``agent_id``: audited, a request answered with the error, anything
    else logged (nobody waits for it)."""
    if audit is not None:
        audit(env, f"error: {exc.code}")
    if env.msg_type is MsgType.REQUEST:
        send(env.fail(exc, sender=agent_id))
    else:
        log.warning("refused %s %s from %s: %s (trace %s)", env.msg_type.value, env.msg_id,
                    env.sender, exc, env.trace_id)
