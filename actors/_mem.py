"""Resident memory of the current process (for stats and benchmarks)."""

from __future__ import annotations

import os
import resource


def rss_bytes() -> int:
    """Current resident set size in bytes (peak RSS where /proc is not available)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
