"""What the integration tests share, beside the fixtures of ``conftest.py``: the session
cluster's heartbeat settings, waiting on a condition, killing a host, a free port, and starting a
gateway (a module of its own: a test never imports a conftest by name)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

#: The session cluster's heartbeat interval and the beats a host may miss.
HEARTBEAT_S = 0.5
MISSES = 3


async def wait_until(check: Callable[[], Awaitable[Any]], timeout_s: float = 20.0,
                     poll_s: float = 0.1) -> Any:
    """Polls ``check`` until it returns something truthy; fails after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(poll_s)
    pytest.fail(f"condition not met within {timeout_s} s (last value {last!r})")


async def kill_and_wait(host: Any) -> None:
    """Kills a host from outside, as a crash would (``host``: a port, as ``rt.cluster.host``
    gives it, or its Ray actor handle), and returns once calls to it fail (Ray saw it die)."""
    import ray

    handle = getattr(host, "handle", host)
    ray.kill(handle)

    async def dead() -> bool:
        try:
            await handle.count.remote()
        except ray.exceptions.RayActorError:
            return True
        return False

    await wait_until(dead)


def free_port() -> int:
    """A TCP port free on loopback now."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_gateway(rt: Any, **settings: Any) -> str:
    """Starts a gateway application on the session's cluster; returns its URL. Serve's one HTTP
    proxy is started on a free port by the first module that asks; later ones use its port."""
    from reach.errors import ConfigError

    try:
        return str(rt.start_gateway(port=free_port(), **settings))
    except ConfigError as exc:
        if (exc.details or {}).get("setting") != "port":
            raise
        return str(rt.start_gateway(port=None, **settings))


@contextlib.asynccontextmanager
async def traced(rt: Any, process: str, otlp_endpoint: str | None = None) -> AsyncIterator[Any]:
    """A runtime on the session's cluster whose processes (this one included, called
    ``process``, until the end) trace every message to the cluster's trace store and, given an
    ``otlp_endpoint``, to that OTLP/HTTP collector, as ``reach.init(tracing=...)`` would: the
    processes it starts (hosts, supervisors, a gateway's replicas) carry its tracing settings,
    the session's others do not."""
    import reach
    from reach._ray import RayCluster
    from reach._runtime.trace_setup import install
    from reach._runtime.tracer import use

    tracing = reach.Tracing(sample_ratio=1.0, otlp_endpoint=otlp_endpoint)
    cluster = RayCluster(rt.cluster.security, rt.cluster.namespace, None, tracing)
    provider = install(tracing, process, cluster)
    driver = reach.Runtime(cluster, rt.limits)
    try:
        yield driver
    finally:
        await driver.close()
        use(None)
        await asyncio.to_thread(provider.shutdown)
