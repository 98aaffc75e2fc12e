"""One real two-node Ray cluster (two raylets on loopback) for the whole integration session, and
an OTLP/HTTP receive for a tracing test."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from otlp_tools import Collector
from ray_helpers import HEARTBEAT_S, MISSES

HERE = Path(__file__).parent
# Ray workers import the test agents by module name: put this folder on their path.
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p
)
sys.path.insert(0, str(HERE))
# A stopped gateway's replica drains for Serve's minimum period (30 s by default) before it
# ends; seven modules stop one, and no test here has requests in flight when it does.
os.environ.setdefault("RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S", "2")


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


@pytest.fixture
def collector() -> Iterator[Collector]:
    """An OTLP/HTTP receive on loopback for one test (see :mod:`otlp_tools`)."""
    server = Collector()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
