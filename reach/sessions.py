"""Durable sessions as a driver or an agent uses them.

A session is a conversation between two agents, opened with negotiated terms and kept by the
SessionStore actor. Every turn sent through :meth:`Session.request` is appended (numbered by the
session's sequence), recorded as pending until its reply comes, and resent with the same request
ID if the receiver dies mid-request; the receiver runs the handler of a session request at most
once, replaying its recorded reply to a resend. The pending record always ends, once, as
``answered`` or ``cancelled``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

import ray
from pydantic import BaseModel
from ray.exceptions import RayError

from reach.client import Client
from reach.errors import (
    AgentUnavailable,
    ErrorInfo,
    ReachError,
    SessionNotFound,
    error_from_info,
)
from reach.names import NAMESPACE, STORE_NAME
from reach.protocol import Envelope, new_id
from reach.transport import translate_ray_error

#: Notification asking a receiver to stop handling a request: {"request_id": str}.
CANCEL_SCHEMA = "reach.cancel@1.0"
#: Request every agent answers with its session limits (see ``Agent.session_limits``).
LIMITS_SCHEMA = "reach.session.limits@1.0"

_store: Any = None


def store() -> Any:
    """The SessionStore actor's handle.

    Raises:
        SessionNotFound: no session store runs (the runtime starts one on first use).
    """
    global _store  # noqa: PLW0603 - one handle per process, looked up once
    if _store is None:
        try:
            _store = ray.get_actor(STORE_NAME, namespace=NAMESPACE)
        except ValueError as exc:
            raise SessionNotFound("no session store is running",
                                  suggestion="open a session from the driver first") from exc
    return _store


class Appender:
    """Coalesces a process's appends into one store call while the previous one is in flight
    (as the transport does for envelopes): many small appends, few Ray calls, group commits."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle
        self._queue: list[tuple[str, list[dict[str, Any]], asyncio.Future[list[int]]]] = []
        self._busy = False
        self._drain_task: asyncio.Task[None] | None = None

    async def append(self, session_id: str, messages: list[dict[str, Any]]) -> list[int]:
        """Appends once committed; returns the sequence numbers.

        Raises:
            SessionNotFound: no such session (or another store error, typed).
        """
        future: asyncio.Future[list[int]] = asyncio.get_running_loop().create_future()
        self._queue.append((session_id, messages, future))
        if not self._busy:
            self._busy = True
            self._drain_task = asyncio.get_running_loop().create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        try:
            while self._queue:
                batch, self._queue = self._queue, []
                try:
                    results = await self.handle.append_many.remote(
                        [(s, m) for s, m, _ in batch])
                except Exception as exc:
                    error = translate_ray_error(exc, STORE_NAME)
                    for *_, future in batch:
                        if not future.done():
                            future.set_exception(error)
                    continue
                for (*_, future), result in zip(batch, results, strict=True):
                    if future.done():
                        continue
                    if isinstance(result, dict):
                        future.set_exception(error_from_info(ErrorInfo.model_validate(result)))
                    else:
                        future.set_result(result)
                await asyncio.sleep(0)  # let woken appenders join the next call
        finally:
            self._busy = False


_appenders: dict[int, Appender] = {}


def appender(handle: Any) -> Appender:
    """This process's appender for a store handle."""
    key = id(handle)
    if key not in _appenders:
        _appenders[key] = Appender(handle)
    return _appenders[key]


def turn(env: Envelope, kind: str) -> dict[str, Any]:
    """The session record of an envelope."""
    return {"msg_id": env.msg_id, "sender": env.sender, "kind": kind,
            "payload": dict(env.payload), "schema": env.payload_schema}


class Session:
    """One open session.

    Attributes:
        session_id: Its ID.
        terms: The negotiated terms.
    """

    def __init__(self, session_id: str, terms: dict[str, Any], handle: Any = None) -> None:
        self.session_id = session_id
        self.terms = terms
        self._store = handle

    @property
    def store(self) -> Any:
        """The store actor."""
        if self._store is None:
            self._store = store()
        return self._store

    async def append(self, sender: str, payload: BaseModel | Mapping[str, Any],
                     schema: str = "", *, kind: str = "message", msg_id: str | None = None,
                     ) -> int:
        """Appends one message once committed; returns its sequence number."""
        body = payload.model_dump(mode="python") if isinstance(payload, BaseModel) else payload
        seqs = await appender(self.store).append(self.session_id, [{
            "msg_id": msg_id or new_id(), "sender": sender, "kind": kind, "payload": dict(body),
            "schema": schema}])
        return seqs[0]

    async def context(self, last_n: int = 20) -> dict[str, Any]:
        """The summary and the last ``last_n`` messages."""
        ctx: dict[str, Any] = await self.store.context.remote(self.session_id, last_n)
        return ctx

    async def since(self, seq: int, limit: int | None = None) -> dict[str, Any]:
        """Resumes after ``seq`` (with the summary when part of what follows was folded)."""
        out: dict[str, Any] = await self.store.since.remote(self.session_id, seq, limit)
        return out

    async def request(self, client: Client, receiver: str,
                      payload: BaseModel | Mapping[str, Any], schema: str | None = None, *,
                      timeout_ms: int | None = None) -> Envelope:
        """One turn: sends a request within the session and records both sides of it.

        If the receiver dies mid-request, the same request is sent again once it is back (its
        handler runs at most once); if no answer comes before the deadline, the request is
        cancelled, with a notice to the receiver.

        Raises:
            ReachError: the receiver's error, or RequestTimeout / AgentUnavailable when no
                answer came in time (the pending record then ends ``cancelled``).
        """
        env = client.make_request(receiver, payload, schema,
                                  timeout_ms=timeout_ms or self.terms.get("timeout_ms"),
                                  session_id=self.session_id)
        await appender(self.store).append(self.session_id, [turn(env, "request")])
        await stored(self.store.add_pending.remote(
            env.msg_id, agent_id=client.sender, receiver=receiver, session_id=self.session_id,
            envelope=env.model_dump(mode="json"), deadline=env.deadline))
        return await finish(self.store, client, env)


async def finish(handle: Any, client: Client, env: Envelope) -> Envelope:
    """Sends (and resends) a recorded session request until it is answered or given up.

    Raises:
        ReachError: the receiver's error, or why no answer came (the request is then cancelled).
    """
    delay = 0.02
    while True:
        try:
            reply = await client.call(env)
        except AgentUnavailable as exc:
            left = env.remaining_ms(time.time())
            if left is not None and left > delay * 1000:
                await asyncio.sleep(delay)  # the receiver is restarting: resend the same request
                delay = min(delay * 2, 0.25)
                continue
            await cancel(handle, client, env, exc)
            raise
        except ReachError as exc:
            await cancel(handle, client, env, exc)
            raise
        if await stored(handle.resolve_pending.remote(env.msg_id, "answered")):
            assert env.session_id is not None
            await appender(handle).append(env.session_id, [turn(reply, "reply")])
        return reply


async def stored(ref: Any) -> Any:
    """Awaits a store call, its Ray failures translated (the store may be restarting)."""
    try:
        return await ref
    except RayError as exc:
        raise translate_ray_error(exc, STORE_NAME) from exc


async def cancel(handle: Any, client: Client, env: Envelope, why: ReachError) -> bool:
    """Ends a pending session request as cancelled, telling its receiver; False if it had ended."""
    if not await stored(handle.resolve_pending.remote(env.msg_id, "cancelled")):
        return False
    with contextlib.suppress(ReachError):  # a receiver that is gone runs nothing to cancel
        await client.notify(env.receiver, {"request_id": env.msg_id,
                                           "reason": f"{why.code}: {why.message}"},
                            CANCEL_SCHEMA)
    return True


def limits_payload(agent: Any) -> dict[str, Any]:
    """What an agent answers to a limits request."""
    return asdict(agent.session_limits)

