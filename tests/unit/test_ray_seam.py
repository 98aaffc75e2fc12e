"""The one translation of Ray's errors, and the seam's handles, without a running Ray."""

from __future__ import annotations

import ast
import importlib
import pickle
from pathlib import Path

from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from reach._ray import _RECEIVED, RayCluster, _Port, _ship, translate
from reach._runtime.names import REGISTRY_NAME, STORE_NAME
from reach.errors import AgentUnavailable, InvalidPayload, ReachError
from reach.security.guard import SecurityConfig


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


def test_any_other_ray_failure_is_a_reach_error_too() -> None:
    assert isinstance(translate(GetTimeoutError("slow"), "reach.registry"), AgentUnavailable)
    assert isinstance(translate(RuntimeError("odd"), "reach.registry"), ReachError)


def test_a_cluster_handle_pickles_with_its_settings_and_without_its_cache() -> None:
    cluster = RayCluster(SecurityConfig(sign=False))
    cluster._ports["x"] = _Port(object(), "x")
    travelled = pickle.loads(pickle.dumps(cluster))
    assert travelled.security == cluster.security
    assert travelled._ports == {}


def test_a_cluster_handle_carries_the_registry_and_store_handles_it_has() -> None:
    # A process given the cluster need not look those two up by name (a blocking call).
    cluster = RayCluster(SecurityConfig(sign=False))
    for name in (REGISTRY_NAME, STORE_NAME, "reach.host.x"):
        cluster._ports[name] = _Port(name.upper(), name)
    travelled = pickle.loads(pickle.dumps(cluster))
    assert sorted(travelled._ports) == [REGISTRY_NAME, STORE_NAME]
    assert travelled._ports[REGISTRY_NAME].handle == REGISTRY_NAME.upper()


def test_a_shipped_class_is_pickled_once_and_rebuilt_once_per_process() -> None:
    shipped = _ship(Shipped)
    assert _ship(Shipped) is shipped  # pickled once in this process
    assert _ship([Shipped]) == [shipped]
    assert _ship("x") == "x"
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
