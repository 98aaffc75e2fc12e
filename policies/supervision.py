"""Supervision decisions, after Erlang/OTP: who restarts, whether it may, and after how long.

- :class:`RestartType`, :func:`should_restart`: whether a child that ended is restarted.
- :class:`Strategy`, :func:`to_restart`: which children restart along with a failed one.
- :class:`Intensity`, :func:`record_restart`: how many restarts a supervisor allows before it
  gives up.
- :class:`Backoff`, :func:`backoff_delay`: the delay before a restart (defined in
  :mod:`policies.backoff`, re-exported here).
- :class:`ChildExit`, :class:`RestartPlan`, :func:`plan_restart`: the whole decision for a batch
  of exits, which the supervisor actor only carries out (:data:`SIBLING_RESTARTED` is the reason
  it gives for a child swept along by a sibling's failure).

Everything here is pure: the clock's reading and the random generator are passed in.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from policies.backoff import Backoff, backoff_delay

__all__ = [
    "SIBLING_RESTARTED",
    "Backoff",
    "ChildExit",
    "Intensity",
    "RestartPlan",
    "RestartType",
    "Strategy",
    "backoff_delay",
    "plan_restart",
    "record_restart",
    "should_restart",
    "to_restart",
]

#: The reason given for a child restarted only because a sibling failed.
SIBLING_RESTARTED = "sibling restarted"


class RestartType(StrEnum):
    """When a child is restarted after it ends."""

    PERMANENT = "permanent"
    """Always restarted."""
    TRANSIENT = "transient"
    """Restarted only after an abnormal exit (a crash, a kill)."""
    TEMPORARY = "temporary"
    """Never restarted."""


class Strategy(StrEnum):
    """Which children restart when one of them fails."""

    ONE_FOR_ONE = "one_for_one"
    """Only the failed child."""
    ONE_FOR_ALL = "one_for_all"
    """Every child."""
    REST_FOR_ONE = "rest_for_one"
    """The failed child and every child started after it."""


@dataclass(frozen=True)
class Intensity:
    """At most ``max_restarts`` restarts within ``period_s`` seconds (OTP's default: 1 in 5 s)."""

    max_restarts: int = 1
    period_s: float = 5.0


def should_restart(restart: RestartType, abnormal: bool) -> bool:
    """Whether a child of this restart type is restarted after an exit (abnormal or normal).

    ``restart`` may also be the type's string value (as read from a config file).
    """
    kind = RestartType(restart)
    if kind is RestartType.PERMANENT:
        return True
    return kind is RestartType.TRANSIENT and abnormal


def to_restart(strategy: Strategy, started: Sequence[str], failed: str) -> list[str]:
    """The children to restart, in start order, when ``failed`` fails.

    Args:
        strategy: The supervisor's strategy.
        started: Child IDs in the order they were started.
        failed: The child that failed; a child not in ``started`` (already gone) restarts nothing.
    """
    if failed not in started:
        return []
    kind = Strategy(strategy)
    if kind is Strategy.ONE_FOR_ONE:
        return [failed]
    if kind is Strategy.ONE_FOR_ALL:
        return list(started)
    return list(started[started.index(failed):])


def record_restart(history: Sequence[float], now: float, intensity: Intensity
                   ) -> tuple[tuple[float, ...], bool]:
    """Adds a restart at ``now`` to the history and tells whether the intensity is exceeded.

    Returns:
        The restarts still inside the period (``now`` included), and True when there are more of
        them than ``intensity.max_restarts``: the supervisor must give up and escalate.
    """
    kept = (*(t for t in history if now - t < intensity.period_s), now)
    return kept, len(kept) > intensity.max_restarts


@dataclass(frozen=True)
class ChildExit:
    """One child's exit, as its supervisor detected it."""

    child_id: str
    normal: bool
    """True when the child ended on its own (returned or was stopped), False for a crash or kill."""
    reason: str
    at: float
    """Monotonic seconds when the exit was detected."""


@dataclass(frozen=True)
class RestartPlan:
    """What a supervisor does about a batch of exits; it carries the plan out in field order.

    Invariants: ``ended`` and ``restart`` are disjoint; ``stop`` is a subset of ``restart`` and
    holds no child that exited in the batch; ``reasons`` has exactly the keys of ``restart``;
    when ``give_up`` is True, ``stop`` and ``restart`` are empty.
    """

    ended: tuple[str, ...]
    """Exited children whose restart type says they end: dropped, not restarted (input order)."""
    stop: tuple[str, ...]
    """Live siblings to stop before the restarts, in reverse start order."""
    restart: tuple[str, ...]
    """Children to start again after ``delay_s``, in start order, the failed ones included."""
    delay_s: float
    """The backoff before the restarts (0 when nothing restarts)."""
    history: tuple[float, ...]
    """The restart history to keep: :func:`record_restart`'s result, or the one given."""
    give_up: bool
    """The intensity is exceeded: stop every child in reverse start order and escalate."""
    reasons: Mapping[str, str]
    """Why each child in ``restart`` restarts: its exit's reason, or :data:`SIBLING_RESTARTED`."""


def plan_restart(
    exits: Sequence[ChildExit],
    *,
    started: Sequence[str],
    restart_types: Mapping[str, RestartType],
    strategy: Strategy,
    intensity: Intensity,
    backoff: Backoff,
    history: Sequence[float],
    now: float,
    rng: random.Random,
    external: Collection[str] = (),
) -> RestartPlan:
    """Decides what a supervisor does about a batch of exits detected together.

    A batch is one failure event (a host's agents die together): however many children it
    restarts, it counts as one restart against the intensity.

    Args:
        exits: The exits of the batch, in the order they were detected.
        started: The live children (those in ``exits`` included) in start order.
        restart_types: Each child's restart type.
        strategy: The supervisor's strategy.
        intensity: How many restarts the supervisor allows within its period.
        backoff: The backoff before a restart; the attempt is the number of restarts still in
            the history before this one.
        history: The times of the earlier restarts still inside the period.
        now: The monotonic clock's reading.
        rng: The source of the backoff's jitter (drawn from only when children restart).
        external: Children the supervisor did not start and cannot (agents that dial in): a
            sibling's failure neither stops nor restarts them; their own exit restarts them
            (the supervisor awaits them) as their restart type says.

    Returns:
        The plan. An exit of a child not in ``started`` restarts nothing (it is in ``ended`` when
        its restart type says it ends, else nowhere).

    Raises:
        KeyError: An exit names a child that has no entry in ``restart_types``.
    """
    ended, live, to_start = _sweep(exits, started, restart_types, strategy)
    exited: dict[str, str] = {}
    for e in exits:
        exited.setdefault(e.child_id, e.reason)  # a child that exited twice: its first reason
    # Only live children restart: a later exit of the batch may have ended one the sweep
    # meant to restart, and a batch that restarts nothing is no restart at all.
    restart = tuple(c for c in live if c in to_start and (c in exited or c not in external))
    if not restart:
        return RestartPlan(ended=ended, stop=(), restart=(), delay_s=0.0,
                           history=tuple(history), give_up=False, reasons={})
    new_history, exceeded = record_restart(history, now, intensity)
    if exceeded:
        return RestartPlan(ended=ended, stop=(), restart=(), delay_s=0.0,
                           history=new_history, give_up=True, reasons={})
    return RestartPlan(
        ended=ended,
        stop=tuple(c for c in reversed(restart) if c not in exited),
        restart=restart,
        # The first restart in the window is immediate, as in OTP; repeated ones back off.
        delay_s=0.0 if len(new_history) == 1 else backoff_delay(len(new_history) - 2, backoff,
                                                                 rng),
        history=new_history,
        give_up=False,
        reasons={c: exited.get(c, SIBLING_RESTARTED) for c in restart},
    )


def _sweep(exits: Sequence[ChildExit], started: Sequence[str],
           restart_types: Mapping[str, RestartType], strategy: Strategy
           ) -> tuple[tuple[str, ...], list[str], set[str]]:
    """The children that end, the live ones left in start order, and those the exits restart.

    The set may name a child that a later exit of the batch ended; the caller keeps only the
    live ones.
    """
    ended: list[str] = []
    live = list(started)
    to_start: set[str] = set()
    for e in exits:
        if not should_restart(restart_types[e.child_id], abnormal=not e.normal):
            if e.child_id not in ended:
                ended.append(e.child_id)
            if e.child_id in live:
                live.remove(e.child_id)
            continue
        to_start.update(to_restart(strategy, live, e.child_id))
    return tuple(ended), live, to_start
