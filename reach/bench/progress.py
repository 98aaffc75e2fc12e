"""Live progress of a benchmark: a line with its current rate every few seconds while it runs.

``reach bench`` streams these lines as they come, and so does a benchmark run by hand: a long
run shows how fast it goes now (beside the Ray dashboard's view of the same load), not only its
figures at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable

#: A running benchmark says its rate at least this often (seconds).
PROGRESS_S = 2.0


def say(line: str) -> None:
    """Prints one progress line at once (a pipe would otherwise hold it back)."""
    print(line, flush=True)


class Meter:
    """Counts what a benchmark has done and says its rate every ``every_s`` seconds.

    :meth:`add` reports when a report is due, so a busy loop still reports; :meth:`watching`
    also reports while nothing ends, so a stall shows as a rate of 0 instead of silence.

    Args:
        label: What is counted, as the line names it (``"packed: requests"``).
        unit: The rate's unit.
        total: How many there will be, if known (the line then says ``done/total``).
        every_s: Seconds between two reports.
        clock: Monotonic seconds (injected in tests).
        out: Where a line goes.
    """

    def __init__(self, label: str, *, unit: str = "msg/s", total: int | None = None,
                 every_s: float = PROGRESS_S, clock: Callable[[], float] = time.monotonic,
                 out: Callable[[str], None] = say) -> None:
        self.label, self.unit, self.total, self.every_s = label, unit, total, every_s
        self._clock, self._out = clock, out
        self.done = 0
        self._started = self._last_at = clock()
        self._last_done = 0

    def add(self, n: int = 1) -> None:
        """Counts ``n`` more done, and reports if a report is due."""
        self.done += n
        if self._clock() - self._last_at >= self.every_s:
            self.report()

    def report(self) -> str:
        """Says (and returns) the line: done so far, the rate since the last line and overall."""
        now = self._clock()
        window, total_s = now - self._last_at, now - self._started
        rate = (self.done - self._last_done) / window if window > 0 else 0.0
        overall = self.done / total_s if total_s > 0 else 0.0
        of = f"/{self.total:,}" if self.total is not None else ""
        line = (f"  {self.label}: {self.done:,}{of} done, {rate:,.0f} {self.unit} now, "
                f"{overall:,.0f} {self.unit} overall")
        self._last_at, self._last_done = now, self.done
        self._out(line)
        return line

    @contextlib.asynccontextmanager
    async def watching(self) -> AsyncIterator[Meter]:
        """Reports on time inside the block even when nothing is added."""
        watcher = asyncio.ensure_future(self._watch())
        try:
            yield self
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(max(self._last_at + self.every_s - self._clock(), 0.05))
            if self._clock() - self._last_at >= self.every_s:
                self.report()
