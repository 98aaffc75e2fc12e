"""Poison messages as the runtime meets them: the kills a process reports, the answers that
clear them, and the quarantine a host enforces.

The rules are :mod:`policies.poison`'s. Here, on the two sides of a request:

- the caller's side, :class:`KillReporter`: a request whose agent's process died while it waited
  for the reply (see :attr:`reach._runtime.transport.Pending.lost`) is reported to the registry,
  which counts it (one registry call per death and process: the reports of one death are sent
  together) and answers whether it is now poison; the caller then gets a fatal
  :class:`~reach.errors.PoisonMessage` instead of a retryable AgentUnavailable, so that no
  session, task or user retries it. The reporter keeps the contents it reported, per agent
  (:class:`Suspects`); when a later incarnation of that agent answers a request of one of them
  (a response, or a stream's end), it tells the registry, which forgets that content's earlier
  kills, so that a probe or a query sent often with the same content, in hands at unrelated
  deaths, is never taken for poison. Nothing is hashed after a reply unless this process
  reported a death of its agent lately, and no call is made unless the reply answers a reported
  content (then one, fire and forget, batched with the reports);
- the receiver's side, :class:`Quarantine`: what the registry quarantined for a host's agents
  (told when it happens, and when an agent registers), so that the host refuses such a request
  from any sender, with the same fatal error. Nothing is hashed on a host while none of its
  agents has anything quarantined.

Only a reply that is not an error clears: an error reply may come from the agent's host or
runner refusing the request before its handler ran (its deadline passed, the hop limit, an ACL,
an unknown schema, the quarantine itself), which proves nothing of the content, and a poison
request refused once so would otherwise be handed to a third incarnation.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from policies.poison import REMEMBER_S, Quarantined, fingerprint
from reach import clock
from reach.errors import PoisonMessage, ReachError
from reach.ports.registry import RegistryPort
from reach.protocol import Envelope
from reach.security.guard import Guard, signed_call

log = logging.getLogger("reach._runtime.poison")

#: Longest a caller waits for the registry's verdict on a kill before failing as it would have
#: without one (a retryable AgentUnavailable); also the longest the reporter waits for the
#: registry to take the answers it reports.
REPORT_WAIT_S = 2.0
#: Contents a process remembers reporting, per agent, and agents with any, at most (the
#: oldest dropped first).
MAX_LOCAL_SUSPECTS = 1000
MAX_SUSPECT_AGENTS = 10_000


def poison_error(agent_id: str, request_id: str, kills: int, print_: str) -> PoisonMessage:
    """The fatal error of a request quarantined for ``agent_id`` after ``kills`` deaths."""
    return PoisonMessage(
        f"request {request_id} to {agent_id!r} is poison: {kills} incarnations of the agent "
        "died with it in their hands, so it is quarantined and will not be delivered again",
        suggestion="fix the handler (a crash in it, or in a library it calls, on this payload), "
                   "or stop sending this payload to this agent",
        details={"agent_id": agent_id, "request_id": request_id, "kills": kills,
                 "fingerprint": print_, "reason": "poison"})


def envelope_print(env: Envelope) -> str:
    """The fingerprint of a request's content (see :func:`policies.poison.fingerprint`)."""
    return fingerprint(env.receiver, env.payload_schema, env.payload)


class Suspects(dict[str, dict[str, float]]):
    """The request contents a process reported in hands at a death, by agent ID, each with
    when it last reported it (on the monotonic clock): empty, and falsy, until it reports one;
    a dict, so that the test after each reply is the dict's own, at no cost. A content is
    forgotten once answered, after :data:`~policies.poison.REMEMBER_S` (when the registry's
    ledger forgets its kills too), or past the bounds, the oldest first."""

    def add(self, agent_id: str, print_: str, now: float) -> None:
        """Remembers that ``print_`` was reported in hands at a death of ``agent_id``."""
        prints = self.get(agent_id)
        if prints is None:
            while len(self) >= MAX_SUSPECT_AGENTS:
                del self[next(iter(self))]
            prints = self[agent_id] = {}
        prints.pop(print_, None)
        prints[print_] = now
        while len(prints) > MAX_LOCAL_SUSPECTS:
            del prints[next(iter(prints))]

    def take(self, agent_id: str, print_: str, now: float) -> bool:
        """Forgets ``print_`` for ``agent_id`` (and what expired); whether it was suspected."""
        prints = self.get(agent_id)
        if prints is None:
            return False
        while prints and next(iter(prints.values())) <= now - REMEMBER_S:
            del prints[next(iter(prints))]  # reported earliest first: the expired lead
        found = prints.pop(print_, None) is not None
        if not prints:
            del self[agent_id]
        return found


class KillReporter:
    """Reports a process's requests that were in the hands of an agent when it died, and the
    answers, by a later incarnation, to requests of a content it so reported.

    Args:
        registry: The registry, which counts the kills.
        guard: The process's guard (the reports are signed; None when signing is off).
        principal: Who signs the reports (the process's endpoint name).
    """

    def __init__(self, registry: RegistryPort, guard: Guard | None, principal: str) -> None:
        self._registry = registry
        self._guard = guard
        self._principal = principal
        #: The contents this process reported, by agent (see :class:`Suspects`): the courier
        #: calls :meth:`answered` after a reply only for an agent in it.
        self.suspects = Suspects()
        # Kill reports (with the future of their verdict) and answers (with None), in the order
        # they were made: the registry must see a kill and a later answer in that order.
        self._queue: list[tuple[list[Any], asyncio.Future[tuple[int, bool] | None] | None]] = []
        self._sending: asyncio.Task[None] | None = None

    async def report(self, env: Envelope, epoch: int) -> PoisonMessage | None:
        """Reports that the incarnation ``epoch`` of ``env``'s receiver died with ``env`` in its
        hands; returns the fatal error to raise when that makes the request poison, None
        otherwise (or when the registry did not answer within :data:`REPORT_WAIT_S`)."""
        print_ = envelope_print(env)
        self.suspects.add(env.receiver, print_, clock.monotonic())
        verdict: asyncio.Future[tuple[int, bool] | None] = (
            asyncio.get_running_loop().create_future())
        self._enqueue([env.receiver, epoch, print_, env.msg_id, env.sender, env.trace_id or "",
                       env.payload_schema], verdict)
        try:
            answer = await asyncio.wait_for(asyncio.shield(verdict), REPORT_WAIT_S)
        except TimeoutError:
            answer = None
        if answer is None:
            log.warning("no verdict on the death of %s with request %s in its hands (trace %s)",
                        env.receiver, env.msg_id, env.trace_id)
            return None
        kills, quarantined = answer
        if not quarantined:
            return None
        self.suspects.take(env.receiver, print_, clock.monotonic())  # never answered now
        return poison_error(env.receiver, env.msg_id, kills, print_)

    def answered(self, env: Envelope, epoch: int) -> None:
        """Notes that the incarnation ``epoch`` of ``env``'s receiver answered ``env`` (a reply
        that is not an error): if this process reported its content in hands at a death of
        that agent, the registry is told to forget that content's earlier kills (fire and
        forget). Called only for a receiver in :attr:`suspects` (only then is ``env`` hashed).
        """
        print_ = envelope_print(env)
        if self.suspects.take(env.receiver, print_, clock.monotonic()):
            self._enqueue([env.receiver, epoch, print_], None)

    def _enqueue(self, item: list[Any],
                 verdict: asyncio.Future[tuple[int, bool] | None] | None) -> None:
        self._queue.append((item, verdict))
        if self._sending is None or self._sending.done():
            self._sending = asyncio.get_running_loop().create_task(self._send())

    async def _send(self) -> None:
        # Every caller woken by one death reports in the loop iterations that follow it: one
        # registry call carries them all (and those made meanwhile go in the next one). Kills
        # and answers leave in the order they were made, each run of one kind in one call.
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        while self._queue:
            kills = self._queue[0][1] is not None
            run = next((i for i, (_, v) in enumerate(self._queue) if (v is not None) != kills),
                       len(self._queue))
            batch, self._queue = self._queue[:run], self._queue[run:]
            data, sig = signed_call(self._guard, self._principal, [r for r, _ in batch])
            if kills:
                await self._send_kills(batch, data, sig)
            else:
                await self._send_answers(len(batch), data, sig)

    async def _send_kills(self, batch: list[tuple[list[Any], Any]], data: bytes,
                          sig: Any) -> None:
        answers: list[tuple[int, bool] | None]
        try:
            answers = list(await self._registry.report_kills(self._principal, data, sig))
        except ReachError as exc:
            log.warning("reporting %d kills failed: %s", len(batch), exc)
            answers = [None] * len(batch)
        for (_, verdict), answer in zip(batch, answers, strict=True):
            if verdict is not None and not verdict.done():
                verdict.set_result(answer)

    async def _send_answers(self, count: int, data: bytes, sig: Any) -> None:
        try:
            await asyncio.wait_for(self._registry.forget_kills(self._principal, data, sig),
                                   REPORT_WAIT_S)
        except (ReachError, TimeoutError) as exc:
            log.info("reporting %d answers to suspected requests failed: %s", count, exc)


class Quarantine(dict[str, dict[str, Quarantined]]):
    """A host's quarantined fingerprints, by agent ID (empty, and falsy, until the registry
    quarantines something for one of its agents): a dict, so that the test before each
    delivery is the dict's own, at no cost."""

    def hold(self, agent_id: str, prints: Mapping[str, tuple[int, float]], now: float) -> int:
        """Quarantines ``prints`` (fingerprint -> kills and seconds left) for ``agent_id``;
        returns how many are quarantined for it now."""
        held = self.setdefault(agent_id, {})
        for print_, (kills, left_s) in prints.items():
            held[print_] = Quarantined(int(kills), now + float(left_s))
        for print_ in [p for p, q in held.items() if q.until <= now]:
            del held[print_]
        if not held:
            del self[agent_id]
        return len(held)

    def refusal(self, env: Envelope, now: float) -> PoisonMessage | None:
        """The error refusing ``env``, when its content is quarantined for its receiver."""
        held = self.get(env.receiver)
        if not held:
            return None
        print_ = envelope_print(env)
        entry = held.get(print_)
        if entry is None:
            return None
        if entry.until <= now:
            del held[print_]
            return None
        return poison_error(env.receiver, env.msg_id, entry.kills, print_)


__all__ = [
    "MAX_LOCAL_SUSPECTS",
    "MAX_SUSPECT_AGENTS",
    "REPORT_WAIT_S",
    "KillReporter",
    "Quarantine",
    "Suspects",
    "envelope_print",
    "poison_error",
]
