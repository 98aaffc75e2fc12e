"""Virtual time for tests: an event loop whose clock jumps to the next timer whenever nothing is
ready to run (as trio's ``autojump_clock``), and the :mod:`reach.clock` that reads it."""

from __future__ import annotations

import asyncio
from typing import Any

#: Where the virtual epoch clock starts (2026-01-01), so that deadlines look like real ones.
EPOCH = 1_767_225_600.0


class _JumpingSelector:
    """A selector that, instead of blocking for ``timeout``, moves the loop's clock forward."""

    def __init__(self, real: Any, loop: VirtualLoop) -> None:
        self._real = real
        self._loop = loop

    def select(self, timeout: float | None = None) -> Any:
        events = self._real.select(0)
        if events or timeout is None or timeout <= 0:
            return events if events or timeout is not None else self._real.select(timeout)
        self._loop.advance(timeout)
        return events

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


class VirtualLoop(asyncio.SelectorEventLoop):
    """An event loop on virtual time: when nothing is ready, its clock jumps to the next timer.

    Only in-process work may run on it: a thread (or a socket) whose result the loop awaits
    while a timer is pending would see the timer fire first.
    """

    def __init__(self) -> None:
        super().__init__()
        self._virtual = 0.0
        self._selector = _JumpingSelector(self._selector, self)  # type: ignore[has-type]

    def time(self) -> float:
        """The loop's (virtual) monotonic time."""
        return self._virtual

    def advance(self, seconds: float) -> None:
        """Moves the clock forward."""
        self._virtual += seconds


class VirtualClock:
    """:mod:`reach.clock` reading a :class:`VirtualLoop`'s time."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def time(self) -> float:
        """Virtual seconds since the epoch."""
        return EPOCH + self._loop.time()

    def monotonic(self) -> float:
        """Virtual monotonic seconds."""
        return self._loop.time()


__all__ = ["EPOCH", "VirtualClock", "VirtualLoop"]
