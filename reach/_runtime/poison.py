"""Poison messages as the runtime meets them: the kills a process reports, and the quarantine a
host enforces.

The rules are :mod:`policies.poison`'s. Here, on the two sides of a request:

- the caller's side, :class:`KillReporter`: a request whose agent's process died while it waited
  for the reply (see :attr:`reach._runtime.transport.Pending.lost`) is reported to the registry,
  which counts it (one registry call per death and process: the reports of one death are sent
  together) and answers whether it is now poison; the caller then gets a fatal
  :class:`~reach.errors.PoisonMessage` instead of a retryable AgentUnavailable, so that no
  session, task or user retries it;
- the receiver's side, :class:`Quarantine`: what the registry quarantined for a host's agents
  (told when it happens, and when an agent registers), so that the host refuses such a request
  from any sender, with the same fatal error. Nothing is hashed on a host while none of its
  agents has anything quarantined.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from policies.poison import Quarantined, fingerprint
from reach.errors import PoisonMessage, ReachError
from reach.ports.registry import RegistryPort
from reach.protocol import Envelope
from reach.security.guard import Guard, signed_call

log = logging.getLogger("reach._runtime.poison")

#: Longest a caller waits for the registry's verdict on a kill before failing as it would have
#: without one (a retryable AgentUnavailable).
REPORT_WAIT_S = 2.0


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


class KillReporter:
    """Reports a process's requests that were in the hands of an agent when it died.

    Args:
        registry: The registry, which counts the kills.
        guard: The process's guard (the reports are signed; None when signing is off).
        principal: Who signs the reports (the process's endpoint name).
    """

    def __init__(self, registry: RegistryPort, guard: Guard | None, principal: str) -> None:
        self._registry = registry
        self._guard = guard
        self._principal = principal
        self._queue: list[tuple[list[Any], asyncio.Future[tuple[int, bool] | None]]] = []
        self._sending: asyncio.Task[None] | None = None

    async def report(self, env: Envelope, epoch: int) -> PoisonMessage | None:
        """Reports that the incarnation ``epoch`` of ``env``'s receiver died with ``env`` in its
        hands; returns the fatal error to raise when that makes the request poison, None
        otherwise (or when the registry did not answer within :data:`REPORT_WAIT_S`)."""
        print_ = envelope_print(env)
        loop = asyncio.get_running_loop()
        verdict: asyncio.Future[tuple[int, bool] | None] = loop.create_future()
        self._queue.append(([env.receiver, epoch, print_, env.msg_id, env.sender,
                             env.trace_id or "", env.payload_schema], verdict))
        if self._sending is None or self._sending.done():
            self._sending = loop.create_task(self._send())
        try:
            answer = await asyncio.wait_for(asyncio.shield(verdict), REPORT_WAIT_S)
        except TimeoutError:
            answer = None
        if answer is None:
            log.warning("no verdict on the death of %s with request %s in its hands (trace %s)",
                        env.receiver, env.msg_id, env.trace_id)
            return None
        kills, quarantined = answer
        return poison_error(env.receiver, env.msg_id, kills, print_) if quarantined else None

    async def _send(self) -> None:
        # Every caller woken by one death reports in the loop iterations that follow it: one
        # registry call carries them all (and those made meanwhile go in the next one).
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        while self._queue:
            batch, self._queue = self._queue, []
            data, sig = signed_call(self._guard, self._principal, [r for r, _ in batch])
            answers: list[tuple[int, bool] | None]
            try:
                answers = list(await self._registry.report_kills(self._principal, data, sig))
            except ReachError as exc:
                log.warning("reporting %d kills failed: %s", len(batch), exc)
                answers = [None] * len(batch)
            for (_, verdict), answer in zip(batch, answers, strict=True):
                if not verdict.done():
                    verdict.set_result(answer)


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


__all__ = ["REPORT_WAIT_S", "KillReporter", "Quarantine", "envelope_print", "poison_error"]
