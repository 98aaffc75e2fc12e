"""The one translation of Ray's errors, and the seam's handles, without a running Ray."""

from __future__ import annotations

import pickle

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
