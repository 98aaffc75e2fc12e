"""Poison messages: a request that kills its agent's process again and again is quarantined.

A request is *in the hands* of an incarnation of its agent when that incarnation's process dies
while the request waits for its reply. Whoever waited (a driver, another agent, a supervisor's
task, a session) reports the death as a *kill*: the agent, the incarnation's epoch and the
request's :func:`fingerprint`. The registry keeps a :class:`KillLedger`: once one fingerprint
has been in the hands of ``poison_after`` distinct incarnations of one agent (2 by default),
each of which died, with no request of that content answered by the agent in between, it is
quarantined for that agent, and neither that request nor any of the same content is delivered
to the agent again for :data:`QUARANTINE_S`.

A request of that content *answered* (a reply that is not an error) by an incarnation clears
the kills of the incarnations before it (:meth:`KillLedger.answered`): the content did not kill
that one, so the deaths it was in hands at were someone else's doing. This is what keeps a
request sent often with the same content (a health probe, a status query, a router's identical
queries) from being quarantined because it happened to be in hands at two unrelated deaths.
Kills are cleared by epoch, not by arrival, so that an answer reported late never clears the
kill of the incarnation that answered it (or of a later one); a quarantine is never cleared by
an answer (a quarantined request is not delivered, so it cannot be answered).

Counting distinct epochs, not reports, makes one death one kill however many callers saw it
(two callers waiting on identical requests, or a resend reported twice). The requests of a
packed agent's host-mates were in hands too when their shared host died: each is a suspect of
that one death, and only a second death of its own agent's next incarnation with the same
request in its hands again makes it poison; a host-mate's request that is answered in between
(or simply not in hands at the next death) never is.

Everything here is pure: time is passed in, and memory is bounded (kills are forgotten after
:data:`REMEMBER_S`, quarantines after :data:`QUARANTINE_S`, and at most :data:`MAX_SUSPECTS`
and :data:`MAX_QUARANTINED` of each are kept, the oldest dropped first).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgpack

from reach.errors import ConfigError

#: How many incarnations a request may kill before it is quarantined, by default.
POISON_AFTER = 2
#: How long a kill counts (seconds): deaths further apart than this are not one poison's.
REMEMBER_S = 600.0
#: How long a fingerprint stays quarantined for its agent (seconds).
QUARANTINE_S = 3600.0
#: Suspects (fingerprints that killed once, per agent) remembered at most.
MAX_SUSPECTS = 10_000
#: Fingerprints quarantined at most, all agents together.
MAX_QUARANTINED = 10_000
#: Epochs remembered per suspect (more than any sensible ``poison_after``).
MAX_EPOCHS = 64


def check_poison_after(poison_after: int) -> int:
    """Returns ``poison_after`` if it is a valid count of kills.

    Raises:
        ConfigError: it is below 1 (``details["setting"]`` is ``poison_after``).
    """
    if isinstance(poison_after, bool) or not isinstance(poison_after, int) or poison_after < 1:
        raise ConfigError(f"poison_after must be an integer of at least 1, got {poison_after!r}",
                          details={"setting": "poison_after"})
    return poison_after


def fingerprint(receiver: str, schema: str, payload: Mapping[str, Any]) -> str:
    """The content of a request: its receiver, payload schema and payload, as 32 hex digits.

    The same for a resend under the request's ID and for a retry under a new one (its keys'
    order does not matter); any other receiver, schema or payload gives another.
    """
    digest = hashlib.blake2b(digest_size=16)
    for part in (receiver, schema):
        digest.update(part.encode("utf-8"))
        digest.update(b"\0")
    digest.update(msgpack.packb(_canonical(payload), use_bin_type=True))
    return digest.hexdigest()


def _canonical(value: Any) -> Any:
    """``value`` with every mapping's keys in sorted order (msgpack keeps the order given)."""
    if isinstance(value, Mapping):
        return {k: _canonical(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, list | tuple):
        return [_canonical(v) for v in value]
    return value


@dataclass(frozen=True)
class Verdict:
    """What one reported kill makes of its request.

    Attributes:
        kills: Distinct incarnations of the agent the request (its fingerprint) killed lately.
        quarantined: Whether it is quarantined for the agent (now, or already).
        fresh: Whether this report quarantined it (it was not before).
    """

    kills: int
    quarantined: bool
    fresh: bool = False


@dataclass(frozen=True)
class Quarantined:
    """A fingerprint quarantined for an agent: how many incarnations it killed, and until when
    (on the ledger's clock)."""

    kills: int
    until: float


class KillLedger:
    """Kills of requests, counted per agent and fingerprint by distinct epochs (and cleared
    by an answer from a later incarnation), and the quarantines they lead to (see the module's
    docstring).

    Args:
        poison_after: Kills that quarantine a fingerprint.
        remember_s: How long a kill counts.
        quarantine_s: How long a quarantine lasts.
        max_suspects: Suspects kept at most (the least recently reported dropped first).
        max_quarantined: Quarantined fingerprints kept at most (the oldest dropped first).

    Raises:
        ConfigError: ``poison_after`` is below 1.
    """

    def __init__(self, poison_after: int = POISON_AFTER, *, remember_s: float = REMEMBER_S,
                 quarantine_s: float = QUARANTINE_S, max_suspects: int = MAX_SUSPECTS,
                 max_quarantined: int = MAX_QUARANTINED) -> None:
        self.poison_after = check_poison_after(poison_after)
        self.remember_s = remember_s
        self.quarantine_s = quarantine_s
        self.max_suspects = max_suspects
        self.max_quarantined = max_quarantined
        # (agent, fingerprint) -> {epoch: when its death was reported}, least recently reported
        # first.
        self._suspects: OrderedDict[tuple[str, str], dict[int, float]] = OrderedDict()
        # agent -> fingerprint -> its quarantine; agents (and fingerprints) oldest first.
        self._quarantined: dict[str, dict[str, Quarantined]] = {}
        # Invariant: _held == sum(len(q) for q in _quarantined.values()).
        self._held = 0

    def note(self, agent_id: str, print_: str, epoch: int, now: float) -> Verdict:
        """Records that the incarnation ``epoch`` of ``agent_id`` died with the request of
        fingerprint ``print_`` in its hands; returns what that makes of the request."""
        key = (agent_id, print_)
        kills = self._suspects.pop(key, None) or {}
        kills = {e: at for e, at in kills.items() if at > now - self.remember_s}
        kills[epoch] = now
        if len(kills) > MAX_EPOCHS:
            kills.pop(min(kills, key=kills.__getitem__))
        self._suspects[key] = kills
        while len(self._suspects) > self.max_suspects:
            self._suspects.popitem(last=False)
        held = self._held_now(agent_id, print_, now)
        count = max(len(kills), held.kills if held is not None else 0)
        if held is None and count < self.poison_after:
            return Verdict(count, quarantined=False)
        self._hold(agent_id, print_, Quarantined(count, now + self.quarantine_s))
        return Verdict(count, quarantined=True, fresh=held is None)

    def answered(self, agent_id: str, print_: str, epoch: int, now: float) -> bool:
        """Records that the incarnation ``epoch`` of ``agent_id`` answered a request of
        fingerprint ``print_``: the kills of that fingerprint in earlier incarnations are
        forgotten (those of ``epoch`` and later ones are not; a quarantine stays). Returns
        whether any kill was forgotten."""
        key = (agent_id, print_)
        kills = self._suspects.get(key)
        if kills is None:
            return False
        kept = {e: at for e, at in kills.items() if e >= epoch and at > now - self.remember_s}
        forgot = any(e < epoch for e in kills)
        if kept:
            self._suspects[key] = kept
        else:
            del self._suspects[key]
        return forgot

    def _held_now(self, agent_id: str, print_: str, now: float) -> Quarantined | None:
        held = self._quarantined.get(agent_id, {}).get(print_)
        if held is not None and held.until <= now:
            self._release(agent_id, print_)
            return None
        return held

    def _hold(self, agent_id: str, print_: str, held: Quarantined) -> None:
        prints = self._quarantined.setdefault(agent_id, {})
        if print_ not in prints:
            self._held += 1
        prints[print_] = held
        while self._held > self.max_quarantined:
            oldest_agent = next(iter(self._quarantined))
            self._release(oldest_agent, next(iter(self._quarantined[oldest_agent])))

    def _release(self, agent_id: str, print_: str) -> None:
        prints = self._quarantined[agent_id]
        del prints[print_]
        self._held -= 1
        if not prints:
            del self._quarantined[agent_id]

    def quarantined(self, agent_id: str, now: float) -> dict[str, Quarantined]:
        """The fingerprints quarantined for ``agent_id`` now (expired ones are dropped)."""
        prints = self._quarantined.get(agent_id)
        if not prints:
            return {}
        for print_ in [p for p, q in prints.items() if q.until <= now]:
            self._release(agent_id, print_)
        return dict(self._quarantined.get(agent_id, {}))

    def holds(self, agent_id: str) -> bool:
        """Whether anything is quarantined for ``agent_id`` (expired entries included): the
        cheap test before :meth:`quarantined`."""
        return agent_id in self._quarantined

    def __len__(self) -> int:
        """How many fingerprints are quarantined, all agents together."""
        return self._held


__all__ = [
    "MAX_QUARANTINED",
    "MAX_SUSPECTS",
    "POISON_AFTER",
    "QUARANTINE_S",
    "REMEMBER_S",
    "KillLedger",
    "Quarantined",
    "Verdict",
    "check_poison_after",
    "fingerprint",
]
