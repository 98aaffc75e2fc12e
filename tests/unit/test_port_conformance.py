"""Every port method has the same parameters in its Protocol, its actor and both adapters.

mypy checks each adapter against its Protocol (types, arity, what is missing), but not the
parameters' names, and nothing checks the actors (a call reaches an actor through Ray, untyped).
So this test compares, for every method of every port, the parameters' names, order, kinds and
defaults of the Protocol with those of the actor's method in ``actors/`` and of the Ray and
fake adapters: a parameter renamed on one side only fails here.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from typing import Any

import pytest

import reach.ports
from actors.host import AgentHost
from actors.inbox import Inbox
from actors.registry import Registry
from actors.sessions import SessionStore
from actors.supervisor import Supervisor
from actors.trace_store import TraceStore
from reach._ray import RayCluster
from reach._ray.ports import (
    RayA2ATasks,
    RayAudit,
    RayEndpoint,
    RayHost,
    RayInbox,
    RayProcess,
    RayRegistry,
    RaySessions,
    RaySupervisor,
    RayTraceStore,
)
from reach.gateway.server import GatewayServer
from reach.ports.a2a_tasks import A2ATaskPort
from reach.ports.audit import AuditPort
from reach.ports.cluster import Cluster
from reach.ports.endpoint import Endpoint
from reach.ports.hosts import HostPort
from reach.ports.inbox import InboxPort
from reach.ports.ingress import HttpService
from reach.ports.processes import Process
from reach.ports.registry import RegistryPort
from reach.ports.sessions import SessionsPort
from reach.ports.supervisors import SupervisorPort
from reach.ports.traces import TraceStorePort
from reach.remote.host import RemoteHost
from reach.remote.ports import RemoteHostClient, RemoteHostPort
from reach.testing import FakeCluster
from reach.testing.ports import (
    FakeEndpoint,
    FakeHost,
    FakeInbox,
    FakeProcess,
    FakeRegistry,
    FakeSupervisor,
)
from reach.testing.store_ports import FakeA2ATasks, FakeAudit, FakeSessions, FakeTraceStore

#: Each port and what implements it: the process (its actor, or the feature's class), the Ray
#: adapter and the fake cluster's (one adapter for both where a feature wraps a process handle).
PORTS: list[tuple[type[Any], list[type[Any]]]] = [
    (Endpoint, [RayEndpoint, FakeEndpoint]),
    (HostPort, [AgentHost, RayHost, FakeHost]),
    (RegistryPort, [Registry, RayRegistry, FakeRegistry]),
    (SessionsPort, [SessionStore, RaySessions, FakeSessions]),
    (AuditPort, [SessionStore, RayAudit, FakeAudit]),
    (A2ATaskPort, [SessionStore, RayA2ATasks, FakeA2ATasks]),
    (InboxPort, [Inbox, RayInbox, FakeInbox]),
    (SupervisorPort, [Supervisor, RaySupervisor, FakeSupervisor]),
    (TraceStorePort, [TraceStore, RayTraceStore, FakeTraceStore]),
    (Cluster, [RayCluster, FakeCluster]),
    (Process, [RayProcess, FakeProcess]),
    (HttpService, [GatewayServer]),
    (RemoteHostPort, [RemoteHost, RemoteHostClient]),
]

Shape = list[tuple[str, inspect._ParameterKind, object]]


def _is_protocol(cls: type[Any]) -> bool:
    return bool(getattr(cls, "_is_protocol", False))


def port_methods(protocol: type[Any]) -> dict[str, inspect.Signature]:
    """The methods a Protocol declares, its base Protocols' included, by name."""
    found: dict[str, inspect.Signature] = {}
    for cls in reversed(protocol.__mro__):
        if not _is_protocol(cls) or cls.__module__ == "typing":
            continue
        for name, value in vars(cls).items():
            if inspect.isfunction(value) and not name.startswith("_"):
                found[name] = inspect.signature(value)
    return found


def shape(signature: inspect.Signature) -> Shape:
    """What must agree between two sides: each parameter's name, kind and default, in order."""
    return [(p.name, p.kind, p.default) for p in signature.parameters.values()]


def drift(protocol: type[Any], implementation: type[Any]) -> list[str]:
    """How ``implementation`` differs from ``protocol``, method by method (empty: it does not).

    A method it lacks, or only inherits from a Protocol (whose body does nothing), is missing.
    """
    problems = []
    protocols = [c for c in implementation.__mro__ if _is_protocol(c)]
    for name, expected in port_methods(protocol).items():
        found = inspect.getattr_static(implementation, name, None)
        if found is None or any(vars(p).get(name) is found for p in protocols):
            problems.append(f"{implementation.__name__}.{name}: missing")
            continue
        got = inspect.signature(getattr(implementation, name))
        if shape(got) != shape(expected):
            problems.append(f"{implementation.__name__}.{name}{got} differs from "
                            f"{protocol.__name__}.{name}{expected}")
    return problems


@pytest.mark.parametrize(("protocol", "sides"), PORTS, ids=[p[0].__name__ for p in PORTS])
def test_a_ports_methods_have_the_same_parameters_everywhere(
        protocol: type[Any], sides: list[type[Any]]) -> None:
    assert port_methods(protocol)
    assert [problem for side in sides for problem in drift(protocol, side)] == []


def test_every_port_is_checked() -> None:
    modules = [importlib.import_module(m.name) for m in
               pkgutil.iter_modules(reach.ports.__path__, prefix="reach.ports.")]
    modules.append(importlib.import_module("reach.remote.ports"))
    protocols = {value for module in modules for value in vars(module).values()
                 if isinstance(value, type) and _is_protocol(value)
                 and value.__module__ == module.__name__}
    assert protocols == {p[0] for p in PORTS}


# -- the check itself fails on a drift --------------------------------------------------------


def test_a_parameter_renamed_in_an_adapter_only_is_a_drift() -> None:
    class DriftedHost(RayHost):
        def remove_agents(self, agent_ids: list[str], timeout: float = 5.0) -> Any:
            return None

    assert drift(HostPort, RayHost) == []
    assert [p.split("(")[0] for p in drift(HostPort, DriftedHost)] == ["DriftedHost.remove_agents"]


def test_a_parameter_renamed_in_an_actor_only_is_a_drift() -> None:
    class DriftedRegistry(Registry):
        async def register_many(self, principal: str, data: bytes, sig: Any) -> list[int]:
            return []

    assert drift(RegistryPort, Registry) == []
    problems = drift(RegistryPort, DriftedRegistry)
    assert len(problems) == 1
    assert "register_many(self, principal" in problems[0]


def test_a_changed_default_order_or_kind_is_a_drift() -> None:
    class Drifted(FakeRegistry):
        def dead_letters(self, limit: int = 10) -> Any:  # another default
            return None

        def claim_spare(self, node: str | None, shape: str) -> Any:  # another order
            return None

        def configure(self, interval_s: float, *, misses: int) -> Any:  # keyword-only
            return None

    assert sorted(p.split("(")[0] for p in drift(RegistryPort, Drifted)) == [
        "Drifted.claim_spare", "Drifted.configure", "Drifted.dead_letters"]


def test_a_method_missing_on_one_side_is_a_drift() -> None:
    class Drifted(FakeInbox, InboxPort):
        take = InboxPort.take  # the Protocol's own (it does nothing): not an implementation

    assert drift(InboxPort, Drifted) == ["Drifted.take: missing"]

    class Bare:
        pass

    assert sorted(drift(Endpoint, Bare)) == ["Bare.deliver: missing", "Bare.watch: missing"]
