"""The clock the runtime reads: the system's, or one a test controls.

Every deadline, TTL, heartbeat and backoff of the runtime reads the time here, never from
:mod:`time` directly, so that :class:`reach.testing.FakeCluster` can run the runtime on virtual
time (as trio's ``autojump_clock`` does): a 30-second timeout then takes no time at all. The clock
in force is a context variable, so it follows the tasks a test starts and nothing else.
"""

from __future__ import annotations

import time
from contextvars import ContextVar
from typing import Protocol


class Clock(Protocol):
    """A source of time."""

    def time(self) -> float:
        """Seconds since the epoch (for deadlines that cross processes)."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (for TTLs and intervals)."""
        ...


class SystemClock:
    """The machine's clock."""

    def time(self) -> float:
        """``time.time()``."""
        return time.time()

    def monotonic(self) -> float:
        """``time.monotonic()``."""
        return time.monotonic()


SYSTEM = SystemClock()
_current: ContextVar[Clock] = ContextVar("reach_clock", default=SYSTEM)


def now() -> float:
    """Seconds since the epoch, on the clock in force."""
    return _current.get().time()


def monotonic() -> float:
    """Monotonic seconds, on the clock in force."""
    return _current.get().monotonic()


def use(clock: Clock) -> object:
    """Puts ``clock`` in force for this context (and the tasks it starts); returns a token
    for :func:`restore`."""
    return _current.set(clock)


def restore(token: object) -> None:
    """Puts back the clock in force before :func:`use`."""
    _current.reset(token)  # type: ignore[arg-type]


__all__ = ["SYSTEM", "Clock", "SystemClock", "monotonic", "now", "restore", "use"]
