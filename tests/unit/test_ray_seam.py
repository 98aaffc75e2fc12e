"""The one translation of Ray's errors, and the seam's handles, without a running Ray."""

from __future__ import annotations

import pickle

from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from reach._ray import RayCluster, _Port, translate
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
