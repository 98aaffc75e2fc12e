"""Closed-loop callers for the benchmarks: K callers, each with one request outstanding, and the
figures of a run (msg/s, p50/p95/p99, errors by kind); and a free port on loopback.

Shared by :mod:`reach.bench.gateway` and :mod:`reach.bench.remote_agent`.
"""

from __future__ import annotations

import asyncio
import math
import socket
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from reach.bench.progress import Meter


def free_port() -> int:
    """A TCP port free on loopback now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def drive(send: Callable[[int], Awaitable[int]], total: int, clients: int,
                progress: str | None = None) -> dict[str, Any]:
    """``clients`` callers, each with one request outstanding, until ``total`` have ended
    (with ``progress``, a line so labelled says the rate every few seconds)."""
    meter = Meter(progress, total=total) if progress else None
    latencies: list[float] = []
    errors: dict[str, int] = {}
    next_i = 0

    async def caller() -> None:
        nonlocal next_i
        while next_i < total:
            i = next_i
            next_i += 1
            t0 = time.perf_counter()
            try:
                got: int | None = await send(i)
            except Exception as exc:  # a failure is a figure here, not the end of the run
                errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
                got = None
            if got == i:
                latencies.append(time.perf_counter() - t0)
            elif got is not None:
                errors["wrong_answer"] = errors.get("wrong_answer", 0) + 1
            if meter is not None:
                meter.add()

    started = time.perf_counter()
    if meter is None:
        await asyncio.gather(*(caller() for _ in range(clients)))
    else:
        async with meter.watching():
            await asyncio.gather(*(caller() for _ in range(clients)))
    wall = time.perf_counter() - started
    q = (statistics.quantiles(latencies, n=100, method="inclusive") if len(latencies) > 1
         else [math.nan] * 99)
    return {"messages": total, "errors": sum(errors.values()), "error_kinds": errors,
            "seconds": round(wall, 3), "msgs_per_s": round(len(latencies) / wall, 1),
            "p50_ms": round(q[49] * 1000, 1), "p95_ms": round(q[94] * 1000, 1),
            "p99_ms": round(q[98] * 1000, 1)}
