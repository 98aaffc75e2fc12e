"""Waiting for a quiet machine before a measurement, and how busy it was during one.

Shared by the benchmarks (``reach.bench``) that compare contestants side by side: Ray's start,
actors starting and the processes of the previous contestant exiting would otherwise run beside
the next one.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator

#: Below this share of busy CPU time the machine counts as quiet.
QUIET = 0.3


def cpu_times() -> tuple[int, int] | None:
    """This machine's (total, idle) CPU time in ticks, or None where /proc/stat is not."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            ticks = [int(t) for t in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    return sum(ticks), ticks[3] + ticks[4]  # idle + iowait


def process_stats() -> Iterator[tuple[int, list[str]]]:
    """Every process of this machine still there as it is read: its PID and the fields of its
    ``/proc/PID/stat`` after its command (state, parent's PID, ..., utime the 12th, stime the
    13th); none where there is no ``/proc``."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as stat:
                yield int(entry), stat.read().rpartition(")")[2].split()
        except OSError:  # ended meanwhile, or not ours to read
            continue


def busy_since(before: tuple[int, int] | None) -> float | None:
    """The share of the machine's CPU time that was busy since ``before``."""
    after = cpu_times()
    if before is None or after is None or after[0] == before[0]:
        return None
    return round(1 - (after[1] - before[1]) / (after[0] - before[0]), 2)


async def settle(deadline_s: float = 15.0) -> None:
    """Waits (up to ``deadline_s``) until this machine's CPUs are quiet (below :data:`QUIET`)."""
    before = cpu_times()
    end = time.monotonic() + deadline_s
    while before is not None:
        await asyncio.sleep(0.5)
        busy = busy_since(before)
        if busy is not None and busy < QUIET:
            return
        if time.monotonic() > end:
            print(f"  (the machine is still {busy:.0%} busy after {deadline_s:.0f} s: "
                  "figures may be noisy)", flush=True)
            return
        before = cpu_times()
