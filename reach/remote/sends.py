"""What a remote agent sends into reach, as its RemoteHost (:mod:`reach.remote.host`) is given it.

Each envelope is checked first: its sender must be the agent, and a request's deadline counts
from its arrival here (the agent's clock is not this one). A reply to a request the agent was
handed is checked against the handler its hello declared (:mod:`reach.remote.replies`: a reply
that does not match is refused to the agent, and its caller gets the fatal error instead), then
posted to the caller. The agent's own requests and notifications go to their receivers, by ID or
``cap:<tag>`` by capability, through the one send path (:class:`~reach._runtime.courier.Courier`,
with its routing, resends while the receiver moves, and deadline); a request's reply, or its
error, is queued for the agent.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from reach import clock
from reach._runtime.courier import Courier
from reach._runtime.link import Link
from reach.errors import AgentUnavailable, ProtocolError, ReachError
from reach.protocol import Envelope, MsgType
from reach.remote.replies import check_reply
from reach.remote.runner import RemoteRunner
from reach.remote.wire import CAPABILITY_PREFIX, envelope_json, error_frame

log = logging.getLogger("reach.remote_host")


class AgentSends:
    """Sends into reach what the remote agents of one host send.

    Args:
        link: The host's link (its transport, directory and limits).
        audit: The host's audit of a handled call (None: calls are not audited).
    """

    def __init__(self, link: Link, audit: Callable[[Envelope, str], None] | None) -> None:
        self.link = link
        self._audit = audit
        self._outgoing: set[asyncio.Task[None]] = set()

    def put(self, runner: RemoteRunner, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Sends what ``runner``'s agent sent (its requests and notifications in the
        background); returns the error frames of the items refused."""
        errors: list[dict[str, Any]] = []
        for item in items:
            try:
                env = self._admit_from(runner, item)
            except ReachError as exc:
                msg_id = item.get("msg_id") if isinstance(item.get("msg_id"), str) else None
                errors.append(error_frame(msg_id, exc.code, exc.message))
                continue
            if env.request_id is not None and env.msg_type is not MsgType.REQUEST:
                self._reply(runner, env, errors)
            else:
                task = asyncio.get_running_loop().create_task(self._send_in(runner, env))
                self._outgoing.add(task)
                task.add_done_callback(self._outgoing.discard)
        return errors

    def post(self, endpoint: str, env: Envelope) -> None:
        """Posts a reply to its caller's endpoint (one whose process is gone is kept as a dead
        letter: nobody waits for it)."""
        try:
            self.link.transport.post(endpoint, env)
        except ReachError as exc:  # the caller's process is gone: nobody waits for it
            self.link.directory.dead_letter([env], exc)
        except Exception as exc:  # StaleRoute: the same, for a reply
            self.link.directory.dead_letter([env], AgentUnavailable(str(exc)))

    def _admit_from(self, runner: RemoteRunner, item: dict[str, Any]) -> Envelope:
        """An envelope the agent sent, validated; a request's deadline set by this clock."""
        env = Envelope.parse(item)
        if env.sender != runner.agent.id:
            raise ProtocolError(f"an envelope from {runner.agent.id!r} names another sender "
                                f"({env.sender!r})", details={"rule": "sender"})
        if env.msg_type is MsgType.REQUEST and env.timeout_ms is not None:
            # Clocks differ: the budget counts from arrival here, never past a given deadline.
            limit = clock.now() + env.timeout_ms / 1000
            deadline = limit if env.deadline is None else min(env.deadline, limit)
            env = env.model_copy(update={"deadline": deadline})
        return env

    def _reply(self, runner: RemoteRunner, env: Envelope, errors: list[dict[str, Any]]) -> None:
        request_id = env.request_id
        assert request_id is not None
        final = env.msg_type is not MsgType.EVENT
        asked = runner.answer(request_id, final)
        if asked is None:
            errors.append(error_frame(env.msg_id, "unknown_request",
                                       f"no open request {request_id!r} (answered, cancelled "
                                       "or timed out)"))
            return
        try:
            check_reply(runner.agent.declaration, asked.env, env)
        except ReachError as exc:  # the agent's fault: it hears why, its caller gets the error
            errors.append(error_frame(env.msg_id, exc.code, exc.message))
            runner.fail([asked], exc)  # ends the request (a stream too), audited
            return
        if final and self._audit is not None:
            info = env.error_info
            self._audit(asked.env, "ok" if info is None else f"error: {info.code}")
        if env.receiver != asked.env.sender:
            env = env.model_copy(update={"receiver": asked.env.sender})
        self.post(asked.reply_to, env)

    async def _send_in(self, runner: RemoteRunner, env: Envelope) -> None:
        """Sends a request or notification of the agent into reach; a request's reply (or its
        error) is queued for the agent."""
        directory = self.link.directory
        try:
            if env.receiver.startswith(CAPABILITY_PREFIX):
                capability = env.receiver[len(CAPABILITY_PREFIX):]
                holders = await directory.holders(capability, None)
                (picked,) = self.link.pick(capability, holders)
                env = env.model_copy(update={"receiver": picked.agent_id})
            if env.msg_type is MsgType.REQUEST:
                # The client's send path: routing, resends while the receiver moves, deadline.
                reply = await Courier(self.link, runner.agent.id).call(env)
            else:
                self.link.transport.post(await directory.route(env.receiver), env)
                return
        except ReachError as exc:
            if env.msg_type is not MsgType.REQUEST:
                directory.dead_letter([env], exc)
                return
            reply = env.fail(exc, sender=env.receiver)
        except Exception as exc:  # StaleRoute of a notification
            log.warning("could not send %s from %s: %s", env.msg_id, runner.agent.id, exc)
            return
        runner.queue.append((None, envelope_json(reply)))
        runner.wake.set()
