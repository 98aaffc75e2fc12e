"""How many warm spare hosts a node keeps of one shape: enough for the recent failures.

A dedicated agent's restart claims a spare of its shape on its node (the claim finds none when
they are all taken: the restart then waits for a new process, a cold start). A taken spare is
replaced, but a replacement takes a while to be offered (half a second's pause, then a new
process's start: 1-2 s on an idle machine, several on a busy one), so failures that come faster
than that would empty a pool of one. The pool is therefore sized to the claims of a recent
window:

- :func:`wanted`: ``spares``, plus one for each claim (taken or not) in the last ``window_s``,
  never more than ``max_spares`` (and never fewer than ``spares``);
- :func:`to_start`: how many to start now, given how many are offered or starting;
- :func:`to_retire`: how many of those beyond ``wanted`` retire: none while claims keep coming,
  all of them once none came for ``quiet_s`` (a burst does not keep processes for ever).

With ``window_s`` several replacement times long, a pool that has seen a window's claims holds
spares for several replacement times' worth of them: failures a few per replacement time find a
spare each. Everything here is pure: the claims' times and the present are passed in.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["SpareSizing", "to_retire", "to_start", "wanted"]


@dataclass(frozen=True, slots=True)
class SpareSizing:
    """The bounds and periods of a pool of spares of one shape on one node.

    Attributes:
        spares: Kept however quiet it is (0: no spares at all).
        max_spares: Never more, offered and starting together (a bound below ``spares``
            counts as ``spares``).
        window_s: Claims this recent count towards the pool's size.
        quiet_s: Spares beyond ``wanted`` retire once no claim came for this long.
    """

    spares: int = 1
    max_spares: int = 4
    window_s: float = 10.0
    quiet_s: float = 60.0

    @property
    def bound(self) -> int:
        """The most spares the pool holds: ``max_spares``, or ``spares`` if that is more."""
        return max(self.spares, self.max_spares)


def wanted(claims: Iterable[float], now: float, sizing: SpareSizing) -> int:
    """How many spares the pool should hold (offered and starting) at ``now``.

    Args:
        claims: When claims were made (monotonic seconds; older ones are ignored).
        now: The present, on the same clock.
        sizing: The pool's bounds and periods.

    Returns:
        ``sizing.spares`` plus the claims within the last ``sizing.window_s``, at most
        ``sizing.bound``; 0 when ``sizing.spares`` is 0 (spares are off).
    """
    if sizing.spares <= 0:
        return 0
    recent = sum(1 for at in claims if now - sizing.window_s < at <= now)
    return min(sizing.bound, sizing.spares + recent)


def to_start(have: int, claims: Iterable[float], now: float, sizing: SpareSizing) -> int:
    """How many spares to start now, the pool holding ``have`` (offered and starting)."""
    return max(0, wanted(claims, now, sizing) - have)


def to_retire(have: int, claims: Iterable[float], now: float, sizing: SpareSizing, *,
              since: float = -math.inf) -> int:
    """How many of the ``have`` spares (offered and starting) retire now.

    Args:
        have: The spares offered and starting.
        claims: When claims were made (monotonic seconds).
        now: The present.
        sizing: The pool's bounds and periods.
        since: When the pool's bookkeeping began (a registry that has just restarted knows no
            claims: it lets none retire before it has been quiet for ``quiet_s`` itself).

    Returns:
        Those beyond :func:`wanted` once no claim came for ``sizing.quiet_s`` (nor since
        ``since``); before that, only those beyond ``sizing.bound``.
    """
    last = max(claims, default=-math.inf)
    quiet = now - max(last, since) >= sizing.quiet_s
    keep = wanted(claims, now, sizing) if quiet else sizing.bound
    return max(0, have - keep)
