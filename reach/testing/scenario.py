"""Running a scenario on a fresh fake cluster, on virtual time (see :mod:`reach.testing`)."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, TypeVar

from actors.trace_index import DEFAULT_MAX_BYTES
from policies.poison import POISON_AFTER
from reach import clock
from reach._runtime.virtual_time import VirtualClock, VirtualLoop
from reach.security.guard import SecurityConfig
from reach.testing.cluster import FakeCluster

T = TypeVar("T")


def run(scenario: Callable[[FakeCluster], Coroutine[Any, Any, T]], *,
        security: SecurityConfig | None = None, nodes: Sequence[str] = ("node-a", "node-b"),
        heartbeat_interval_s: float = 1.0, heartbeat_misses: int = 3,
        poison_after: int = POISON_AFTER, host_start_s: float = 0.0,
        trace_store_bytes: int = DEFAULT_MAX_BYTES) -> T:
    """Runs ``scenario`` on a fresh :class:`FakeCluster`, on virtual time; returns its result
    (``host_start_s``: how long each new host takes to start, ``trace_store_bytes``: the trace
    store's bound; see :class:`FakeCluster`).

    Every task still running when the scenario returns (heartbeats, watches) is cancelled, and
    the session store's database is closed.
    """
    loop = VirtualLoop()
    token = clock.use(VirtualClock(loop))
    try:
        asyncio.set_event_loop(loop)
        with tempfile.TemporaryDirectory() as tmp:
            fake = FakeCluster(security, nodes=nodes, heartbeat_interval_s=heartbeat_interval_s,
                               heartbeat_misses=heartbeat_misses, folder=Path(tmp),
                               poison_after=poison_after, host_start_s=host_start_s,
                               trace_store_bytes=trace_store_bytes)

            async def main() -> T:
                fake.install(asyncio.get_running_loop())
                try:
                    return await scenario(fake)
                finally:
                    await fake.close()

            return loop.run_until_complete(main())
    finally:
        _cancel_all(loop)
        asyncio.set_event_loop(None)
        loop.close()
        clock.restore(token)


async def eventually(check: Callable[[], Awaitable[T]], within_s: float = 30.0,
                     every_s: float = 0.05) -> T:
    """Polls ``check`` until it returns something truthy, on the clock in force (virtual time
    in :func:`run`: the wait costs no wall time); returns that value.

    Raises:
        AssertionError: nothing truthy within ``within_s``.
    """
    deadline = clock.monotonic() + within_s
    last: T | None = None
    while clock.monotonic() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(every_s)
    raise AssertionError(f"not within {within_s} s (last value {last!r})")


def _cancel_all(loop: asyncio.AbstractEventLoop) -> None:
    tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for task in tasks:
        task.cancel()
    if tasks:
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))


__all__ = ["eventually", "run"]
