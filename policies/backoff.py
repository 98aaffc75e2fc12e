"""How long to wait before trying again: exponential backoff with equal jitter.

- :class:`Backoff`: the shape of a backoff, ``base_s * 2**attempt`` capped at ``cap_s``.
- :func:`backoff_delay`: the delay before a given retry, half fixed and half drawn from ``rng``.
- :data:`POLL` and :func:`poll_delay`: how often a caller polls for a restarting agent or resends
  to one that moved.

Everything here is pure: the random generator is passed in and no clock is read.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = ["POLL", "Backoff", "backoff_delay", "poll_delay"]

# 2.0 ** 1024 overflows a float; any exponent past 64 is far above every sensible cap.
_MAX_EXPONENT = 64


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with jitter: ``base_s * 2**attempt``, capped, half of it random."""

    base_s: float = 0.05
    cap_s: float = 2.0


POLL = Backoff(base_s=0.02, cap_s=0.25)
"""How often a caller polls for a restarting agent or resends to one that moved: 20 ms doubling
to 250 ms, jittered."""


def backoff_delay(attempt: int, backoff: Backoff, rng: random.Random) -> float:
    """Seconds to wait before retry number ``attempt``.

    Equal jitter: half the exponential delay is fixed, the other half drawn from ``rng``, so
    retries neither synchronise nor collapse to zero.

    Args:
        attempt: The retry's number, 0 for the first; a negative number counts as 0.
        backoff: The base delay and the cap.
        rng: The source of the jitter.

    Returns:
        A delay between half the ceiling and the ceiling, where the ceiling is
        ``min(backoff.cap_s, backoff.base_s * 2**attempt)``.
    """
    # The exponent is bounded first: 2.0 ** 1024 overflows long before any cap is reached.
    exponent = min(max(attempt, 0), _MAX_EXPONENT)
    ceiling = min(backoff.cap_s, backoff.base_s * 2.0**exponent)
    return ceiling / 2 + rng.uniform(0, ceiling / 2)


def poll_delay(attempt: int, rng: random.Random) -> float:
    """Seconds to wait before poll (or resend) number ``attempt``, following :data:`POLL`.

    Args:
        attempt: The poll's number, 0 for the first; a negative number counts as 0.
        rng: The source of the jitter.

    Returns:
        A delay from 10-20 ms for the first poll up to 125-250 ms once the cap is reached.
    """
    return backoff_delay(attempt, POLL, rng)
