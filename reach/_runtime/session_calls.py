"""What the runtime does for sessions below the client: the built-in requests every agent answers
(its session limits, cancel notices), and the sending of a recorded session request until it is
answered or given up.

A session request is recorded as pending in the session store before it is sent; it is sent, and
resent with the same request ID while its receiver restarts, until answered (the record ends
``answered`` and the reply is appended), given up (it ends ``cancelled``, and the receiver is
told to stop) or found poison (it ends ``failed``: it killed its receiver's process too often).
The party that sent it resumes this after its own restart, from the record.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from policies.backoff import poll_delay
from reach import clock
from reach._runtime.courier import Courier
from reach.agent import Agent
from reach.errors import AgentUnavailable, PoisonMessage, ReachError
from reach.ports.sessions import NewMessage
from reach.protocol import Envelope

#: Notification asking a receiver to stop handling a request: {"request_id": str}.
CANCEL_SCHEMA = "reach.cancel@1.0"
#: Request every agent answers with its session limits (see ``Agent.session_limits``).
LIMITS_SCHEMA = "reach.session.limits@1.0"
#: How a pending session request ends that is poison (its other ends: answered, cancelled).
FAILED = "failed"


def turn(env: Envelope, kind: str) -> NewMessage:
    """The session record of an envelope."""
    return {"msg_id": env.msg_id, "sender": env.sender, "kind": kind,
            "payload": dict(env.payload), "schema": env.payload_schema}


async def finish(courier: Courier, env: Envelope) -> Envelope:
    """Sends (and resends) a recorded session request until it is answered or given up.

    Raises:
        PoisonMessage: the request killed its receiver's process too often (the record then
            ends ``failed``).
        ReachError: the receiver's error, or why no answer came (the request is then cancelled).
    """
    store = courier.link.store
    attempt = 0
    while True:
        try:
            reply = await courier.call(env)
        except AgentUnavailable as exc:
            delay = poll_delay(attempt, courier.link.rng)
            left = env.remaining_ms(clock.now())
            if left is not None and left > delay * 1000:
                await asyncio.sleep(delay)  # the receiver is restarting: resend the same request
                attempt += 1
                continue
            await cancel(courier, env, exc)
            raise
        except PoisonMessage:
            # Its receiver died of it, twice: nothing runs there to cancel, and it is not sent
            # again (not even by this party after a restart of its own).
            await store.port.resolve_pending(env.msg_id, FAILED)
            raise
        except ReachError as exc:
            await cancel(courier, env, exc)
            raise
        if await store.port.resolve_pending(env.msg_id, "answered"):
            assert env.session_id is not None
            await store.append(env.session_id, [turn(reply, "reply")])
        return reply


async def cancel(courier: Courier, env: Envelope, why: ReachError) -> bool:
    """Ends a pending session request as cancelled, telling its receiver; False if it had ended."""
    if not await courier.link.store.port.resolve_pending(env.msg_id, "cancelled"):
        return False
    with contextlib.suppress(ReachError):  # a receiver that is gone runs nothing to cancel
        await courier.post(courier.build_notification(
            env.receiver, {"request_id": env.msg_id, "reason": f"{why.code}: {why.message}"},
            CANCEL_SCHEMA))
    return True


def limits_payload(agent: Agent) -> Mapping[str, Any]:
    """What an agent answers to a limits request."""
    return asdict(agent.session_limits)


__all__ = ["CANCEL_SCHEMA", "FAILED", "LIMITS_SCHEMA", "cancel", "finish", "limits_payload", "turn"]
