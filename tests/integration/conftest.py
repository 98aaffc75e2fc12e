"""One real two-node Ray cluster (two raylets on loopback) for the whole integration session."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent
# Ray workers import the test agents by module name: put this folder on their path.
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p
)
sys.path.insert(0, str(HERE))

HEARTBEAT_S = 0.5
MISSES = 3


@pytest.fixture(scope="session")
def cluster() -> Iterator[Any]:
    import ray
    from ray.cluster_utils import Cluster

    from reach import _ray

    _ray.serve_environment()  # Serve's HAProxy ingress, as reach.init's own local Ray has
    c = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 2, "resources": {"node_a": 1000}, "include_dashboard": False})
    c.add_node(num_cpus=2, resources={"node_b": 1000})
    c.wait_for_nodes()
    yield c
    ray.shutdown()
    c.shutdown()


@pytest.fixture(scope="session")
def sessions_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session store's SQLite file for the whole test session."""
    return tmp_path_factory.mktemp("state") / "sessions.db"


@pytest.fixture(scope="session")
def rt(cluster: Any, sessions_db: Path) -> Iterator[Any]:
    import reach

    runtime = reach.init(address=cluster.address, heartbeat_interval_s=HEARTBEAT_S,
                         heartbeat_misses=MISSES, session_path=str(sessions_db),
                         session_options={"compact_after": 30, "keep_last": 10})
    yield runtime
    runtime.shutdown()


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
