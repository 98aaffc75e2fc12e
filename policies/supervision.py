"""Supervision decisions, after Erlang/OTP: who restarts, whether it may, and after how long.

Everything here is pure: the clock's reading and the random generator are passed in.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum


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


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with jitter: ``base_s * 2**attempt``, capped, half of it random."""

    base_s: float = 0.05
    cap_s: float = 2.0


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


def backoff_delay(attempt: int, backoff: Backoff, rng: random.Random) -> float:
    """Seconds to wait before retry number ``attempt`` (0 for the first retry).

    Equal jitter: half the exponential delay is fixed, the other half drawn from ``rng``, so
    retries neither synchronise nor collapse to zero.
    """
    # The exponent is bounded first: 2.0 ** 1024 overflows long before any cap is reached.
    ceiling = min(backoff.cap_s, backoff.base_s * 2.0 ** min(max(attempt, 0), 64))
    return ceiling / 2 + rng.uniform(0, ceiling / 2)
