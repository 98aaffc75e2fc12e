"""The one translation of Ray's errors, the seam's ports and handles, without a running Ray."""

from __future__ import annotations

import ast
import importlib
import pickle
from pathlib import Path
from typing import Any

import pytest
from ray.exceptions import (
    ActorDiedError,
    ActorUnavailableError,
    GetTimeoutError,
    RayActorError,
    RayTaskError,
)

import reach._ray.cluster
from reach._ray import RayCluster
from reach._ray.calls import _RECEIVED, ship, translate
from reach._ray.ports import RayHost, RayRegistry, RaySessions, RayTraceStore
from reach._runtime.names import REGISTRY_NAME, STORE_NAME, TRACES_NAME
from reach.errors import AgentUnavailable, InvalidPayload, ReachError
from reach.security.guard import SecurityConfig
from reach.spans import SpanStatus


def test_a_reach_error_raised_remotely_arrives_as_itself() -> None:
    error = InvalidPayload("bad", details={"declared": "x@1.0"})
    assert translate(error, "reach.host.x") is error
    wrapped = RayTaskError("deliver", "traceback", error)
    assert translate(wrapped, "reach.host.x") is error


def test_a_constructors_own_exception_arrives_as_itself() -> None:
    cause = ValueError("the agent's constructor failed")
    assert translate(RayTaskError("add_agents", "traceback", cause), "h") is cause


def test_a_dead_actor_is_agent_unavailable_naming_it() -> None:
    error = translate(RayActorError(), "reach.pool.default.0")
    assert isinstance(error, AgentUnavailable)
    assert error.details["endpoint"] == "reach.pool.default.0"
    assert error.severity.value == "retryable"


def test_an_actor_not_seen_to_die_only_unreachable_says_so() -> None:
    # As the processes of a lost node are, until Ray's health checks declare it dead: its
    # agents' supervisor counts their deaths as the node's one failure.
    lost = translate(ActorUnavailableError("RPC error: Socket closed", None), "reach.host.x")
    assert isinstance(lost, AgentUnavailable)
    assert lost.details == {"endpoint": "reach.host.x", "unreachable": True}
    died = translate(ActorDiedError(), "reach.host.y")  # seen to die: its node reported it
    assert isinstance(died, AgentUnavailable)
    assert died.details == {"endpoint": "reach.host.y"}


def test_any_other_ray_failure_is_a_reach_error_too() -> None:
    assert isinstance(translate(GetTimeoutError("slow"), "reach.registry"), AgentUnavailable)
    assert isinstance(translate(RuntimeError("odd"), "reach.registry"), ReachError)


class Handle:
    """An actor handle as the seam uses one: ``handle.method.remote(*args)``; it records the
    calls started (and pickles, as a handle does)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.started: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def __getattr__(self, method: str) -> Any:
        if method.startswith("_"):  # pickle's questions, not methods
            raise AttributeError(method)
        handle = self

        class Method:
            @staticmethod
            def remote(*args: Any, **kwargs: Any) -> str:
                handle.started.append((method, args, kwargs))
                return f"ref of {method}"

        return Method()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Handle) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)


@pytest.fixture
def looked_up(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names the seam looks up with Ray (each answered with a recording handle)."""
    names: list[str] = []

    def get_actor(name: str, namespace: str) -> Handle:
        names.append(name)
        return Handle(name)

    monkeypatch.setattr(reach._ray.cluster.ray, "get_actor", get_actor)
    return names


def test_a_port_call_starts_the_actors_method_at_once() -> None:
    handle = Handle("reach.host.x")
    host = RayHost(handle, "reach.host.x")
    call = host.remove_agents(["a"], 2.0)
    frame = host.deliver(b"frame", "reach.driver.d")
    assert handle.started == [("remove_agents", (["a"], 2.0), {}),
                              ("deliver", (b"frame", "reach.driver.d"), {})]
    assert call.ref == "ref of remove_agents"  # type: ignore[attr-defined]
    assert frame.ref == "ref of deliver"  # type: ignore[attr-defined]


def test_a_port_passes_keyword_only_arguments_by_keyword() -> None:
    handle = Handle(STORE_NAME)
    RaySessions(handle, STORE_NAME).add_pending("r1", agent_id="a", receiver="b",
                                                 session_id="s", envelope={}, deadline=None)
    assert handle.started == [("add_pending", ("r1",), {
        "agent_id": "a", "receiver": "b", "session_id": "s", "envelope": {}, "deadline": None})]


def test_the_trace_stores_port_passes_its_filters_by_keyword() -> None:
    handle = Handle(TRACES_NAME)
    RayTraceStore(handle, TRACES_NAME).find_traces(agent="a", status=SpanStatus.ERROR, limit=5)
    assert handle.started == [("find_traces", (), {
        "agent": "a", "capability": None, "task_id": None, "status": SpanStatus.ERROR,
        "since_ns": None, "until_ns": None, "slowest": False, "limit": 5})]


def test_a_port_pickles_as_its_handle_and_name() -> None:
    port = pickle.loads(pickle.dumps(RayRegistry(Handle(REGISTRY_NAME), REGISTRY_NAME)))
    assert isinstance(port, RayRegistry)
    assert (port.handle, port.name) == (Handle(REGISTRY_NAME), REGISTRY_NAME)


def test_a_cluster_handle_pickles_with_its_settings_and_without_what_it_looked_up(
        looked_up: list[str]) -> None:
    cluster = RayCluster(SecurityConfig(sign=False))
    cluster.host("reach.host.x")
    travelled = pickle.loads(pickle.dumps(cluster))
    assert travelled.security == cluster.security
    travelled.host("reach.host.x")
    assert looked_up == ["reach.host.x", "reach.host.x"]  # looked up again where it went


def test_a_cluster_handle_carries_the_registry_and_store_handles_it_has(
        looked_up: list[str]) -> None:
    # A process given the cluster need not look those three up by name (a blocking call).
    cluster = RayCluster(SecurityConfig(sign=False), handles={
        name: Handle(name) for name in (REGISTRY_NAME, STORE_NAME, TRACES_NAME, "reach.host.x")})
    travelled = pickle.loads(pickle.dumps(cluster))
    assert travelled.registry().handle == Handle(REGISTRY_NAME)  # type: ignore[attr-defined]
    for port in (travelled.sessions(), travelled.audit_log(), travelled.a2a_tasks()):
        assert port.handle == Handle(STORE_NAME)
    assert travelled.trace_store().handle == Handle(TRACES_NAME)  # type: ignore[attr-defined]
    assert looked_up == []
    travelled.host("reach.host.x")
    assert looked_up == ["reach.host.x"]


def test_a_cluster_looks_a_name_up_once_for_every_port_of_it(looked_up: list[str]) -> None:
    cluster = RayCluster(SecurityConfig(sign=False))
    host = cluster.host("reach.host.x")
    assert cluster.host("reach.host.x") is host
    assert cluster.endpoint("reach.host.x").name == "reach.host.x"
    assert looked_up == ["reach.host.x"]
    cluster.forget("reach.host.x")
    assert cluster.host("reach.host.x") is not host
    assert looked_up == ["reach.host.x", "reach.host.x"]


def test_an_agent_class_given_to_a_host_travels_as_a_shipped_class() -> None:
    handle = Handle("reach.host.x")
    host = RayHost(handle, "reach.host.x")
    host.add_agents(Shipped, ["a"], (), {})  # type: ignore[arg-type]
    host.preload([Shipped])  # type: ignore[list-item]
    (_, added, _), (_, preloaded, _) = handle.started
    assert added[0] is ship(Shipped)
    assert preloaded == ([ship(Shipped)],)


def test_a_shipped_class_is_pickled_once_and_rebuilt_once_per_process() -> None:
    shipped = ship(Shipped)
    assert ship(Shipped) is shipped  # pickled once in this process
    assert pickle.loads(pickle.dumps(shipped)) is Shipped  # known here: not rebuilt
    _RECEIVED.pop(shipped.key)
    rebuilt = pickle.loads(pickle.dumps(shipped))  # as a fresh process would
    assert rebuilt.__name__ == "Shipped"
    assert rebuilt.value == 7
    assert pickle.loads(pickle.dumps(shipped)) is rebuilt  # rebuilt once only
    _RECEIVED[shipped.key] = Shipped


class Shipped:
    value = 7


# -- Ray's private names: two, in the seam, documented here -------------------------------------

#: The private names of Ray that reach uses, all in the seam (reach/_ray/): resolving an address
#: the way ``ray.init`` does without starting a Ray (``join``: Ray has no public resolver), and
#: telling whether Serve runs without starting it (``RayCluster.http_port``: ``serve.status()``
#: would start it).
RAY_PRIVATE = {("ray._private.services", "canonicalize_bootstrap_address_or_die"),
               ("ray.serve.context", "_get_global_client")}
ROOT = Path(__file__).resolve().parents[2]


def test_rays_private_names_the_seam_uses_are_still_where_it_looks() -> None:
    for module, name in RAY_PRIVATE:
        assert callable(getattr(importlib.import_module(module), name)), (module, name)


def _private_ray_imports(path: Path) -> set[tuple[str, str]]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ray"):
            module = node.module or ""
            for alias in node.names:
                if "._private" in f".{module}" or alias.name.startswith("_"):
                    found.add((module, alias.name))
    return found


def test_no_module_but_the_seam_imports_a_private_name_of_ray() -> None:
    files = [f for d in ("reach", "actors", "policies") for f in (ROOT / d).rglob("*.py")]
    used = {f.relative_to(ROOT).as_posix(): _private_ray_imports(f) for f in files}
    users = {f for f, names in used.items() if names}
    assert users, used
    assert all(f.startswith("reach/_ray/") for f in users), users
    assert set().union(*(used[f] for f in users)) == RAY_PRIVATE
