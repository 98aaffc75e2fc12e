"""The ports of the fake cluster's simulated processes: one typed adapter per port.

A port's method starts the call at once, as a task of the test's event loop, and returns it:
the process's method of the same name runs on copies of the arguments, as it would behind a
process boundary (see :class:`reach.testing.FakeCluster`). Each adapter subclasses the Protocol
it implements, so mypy checks every method against it; ``tests/unit/test_port_conformance.py``
checks their parameters against the actors' too. The ports of the session store and the trace
store are :mod:`reach.testing.store_ports`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any

from reach.agent import Agent
from reach.ports.data import ErrorDoc
from reach.ports.endpoint import Delivered, Endpoint
from reach.ports.hosts import HandlerDoc, HostInfo, HostPort
from reach.ports.inbox import InboxPort
from reach.ports.processes import Process
from reach.ports.registry import AclDoc, CallSignature, RegistryPort, RegistryStats
from reach.ports.supervisors import SupervisorPort
from reach.records import (
    AgentExit,
    AgentRecord,
    DeadLetter,
    SupervisorStatus,
    TaskResult,
)
from reach.specs import TaskSpec

#: How a call reaches a simulated process: ``invoke(name, method, args, kwargs)``.
Invoke = Callable[[str, str, tuple[object, ...], dict[str, object]], Coroutine[Any, Any, Any]]


class FakePort:
    """One simulated process's name, and how a call on it starts.

    Args:
        invoke: Runs a method of a process (the fake cluster's).
        name: The process's name.
    """

    def __init__(self, invoke: Invoke, name: str) -> None:
        self._invoke = invoke
        self.name = name

    def call(self, method: str, *args: object, **kwargs: object) -> asyncio.Task[Any]:
        """Starts the process's ``method`` now (also one outside the port: what a test
        inspects, or a feature's own port over this process)."""
        task = asyncio.get_running_loop().create_task(self._invoke(self.name, method, args,
                                                                   kwargs))
        task.add_done_callback(_retrieve)
        return task


def _retrieve(task: asyncio.Task[Any]) -> None:
    """Reads a call's outcome, so that a call nobody awaits logs no 'never retrieved' error."""
    if not task.cancelled():
        task.exception()


class FakeEndpoint(FakePort, Endpoint):
    """Any process that takes frames of envelopes (see :class:`~reach.ports.endpoint.Endpoint`)."""

    def deliver(self, frame: bytes, reply_to: str) -> Awaitable[Delivered]:
        """See :meth:`reach.ports.endpoint.Endpoint.deliver`."""
        return self.call("deliver", frame, reply_to)

    def watch(self) -> Awaitable[None]:
        """See :meth:`reach.ports.endpoint.Endpoint.watch`."""
        return self.call("watch")


class FakeHost(FakeEndpoint, HostPort):
    """A host of agents (``actors/host.py``)."""

    def add_agents(  # noqa: PLR0917 - a process call carries its arguments positionally
        self, cls: type[Agent], agent_ids: list[str], args: tuple[object, ...],
        kwargs: dict[str, object], epochs: dict[str, int] | None = None,
        priority: int | Mapping[str, int] | None = None,
    ) -> Awaitable[list[AgentRecord]]:
        """See :meth:`reach.ports.hosts.HostPort.add_agents`."""
        return self.call("add_agents", cls, agent_ids, args, kwargs, epochs,
                         priority=priority)

    def remove_agents(self, agent_ids: list[str], timeout_s: float = 5.0) -> Awaitable[int]:
        """See :meth:`reach.ports.hosts.HostPort.remove_agents`."""
        return self.call("remove_agents", agent_ids, timeout_s)

    def watch_agent(self, agent_id: str) -> Awaitable[AgentExit]:
        """See :meth:`reach.ports.hosts.HostPort.watch_agent`."""
        return self.call("watch_agent", agent_id)

    def cancel_trace(self, trace_id: str, reason: str) -> Awaitable[int]:
        """See :meth:`reach.ports.hosts.HostPort.cancel_trace`."""
        return self.call("cancel_trace", trace_id, reason)

    def count(self) -> Awaitable[int]:
        """See :meth:`reach.ports.hosts.HostPort.count`."""
        return self.call("count")

    def quarantine(self, agent_id: str, prints: dict[str, tuple[int, float]]) -> Awaitable[int]:
        """See :meth:`reach.ports.hosts.HostPort.quarantine`."""
        return self.call("quarantine", agent_id, prints)

    def stop(self, timeout_s: float = 5.0) -> Awaitable[None]:
        """See :meth:`reach.ports.hosts.HostPort.stop`."""
        return self.call("stop", timeout_s)

    def flush_audit(self) -> Awaitable[int]:
        """See :meth:`reach.ports.hosts.HostPort.flush_audit`."""
        return self.call("flush_audit")

    def info(self) -> Awaitable[HostInfo]:
        """See :meth:`reach.ports.hosts.HostPort.info`."""
        return self.call("info")

    def describe(self, agent_ids: list[str]) -> Awaitable[dict[str, list[HandlerDoc]]]:
        """See :meth:`reach.ports.hosts.HostPort.describe`."""
        return self.call("describe", agent_ids)

    def offer_as_spare(self, shape: str) -> Awaitable[None]:
        """See :meth:`reach.ports.hosts.HostPort.offer_as_spare`."""
        return self.call("offer_as_spare", shape)

    def preload(self, classes: list[type[Agent]]) -> Awaitable[int]:
        """See :meth:`reach.ports.hosts.HostPort.preload`."""
        return self.call("preload", classes)


class FakeRegistry(FakePort, RegistryPort):
    """The registry (``actors/registry.py``)."""

    def lookup(self, agent_id: str, newer_than: int = -1,
               wait_s: float = 0.0) -> Awaitable[AgentRecord | None]:
        """See :meth:`reach.ports.registry.RegistryPort.lookup`."""
        return self.call("lookup", agent_id, newer_than, wait_s)

    def discover(self, capability: str, text: str | None = None, limit: int | None = None,
                 ) -> Awaitable[tuple[list[AgentRecord], list[str]]]:
        """See :meth:`reach.ports.registry.RegistryPort.discover`."""
        return self.call("discover", capability, text, limit)

    def agents(self) -> Awaitable[list[AgentRecord]]:
        """See :meth:`reach.ports.registry.RegistryPort.agents`."""
        return self.call("agents")

    def hosts(self) -> Awaitable[list[str]]:
        """See :meth:`reach.ports.registry.RegistryPort.hosts`."""
        return self.call("hosts")

    def register_many(self, host: str, data: bytes, sig: CallSignature,
                      ) -> Awaitable[list[int]]:
        """See :meth:`reach.ports.registry.RegistryPort.register_many`."""
        return self.call("register_many", host, data, sig)

    def deregister(self, principal: str, data: bytes, sig: CallSignature) -> Awaitable[int]:
        """See :meth:`reach.ports.registry.RegistryPort.deregister`."""
        return self.call("deregister", principal, data, sig)

    def heartbeat(self, host: str, data: bytes, sig: CallSignature,
                  ) -> Awaitable[tuple[list[str], float, int]]:
        """See :meth:`reach.ports.registry.RegistryPort.heartbeat`."""
        return self.call("heartbeat", host, data, sig)

    def mark(self, principal: str, data: bytes, sig: CallSignature) -> Awaitable[None]:
        """See :meth:`reach.ports.registry.RegistryPort.mark`."""
        return self.call("mark", principal, data, sig)

    def set_acl(self, principal: str, data: bytes, sig: CallSignature) -> Awaitable[int]:
        """See :meth:`reach.ports.registry.RegistryPort.set_acl`."""
        return self.call("set_acl", principal, data, sig)

    def acl(self) -> Awaitable[tuple[int, AclDoc | None]]:
        """See :meth:`reach.ports.registry.RegistryPort.acl`."""
        return self.call("acl")

    def check_key(self, principal: str, data: bytes, sig: CallSignature) -> Awaitable[None]:
        """See :meth:`reach.ports.registry.RegistryPort.check_key`."""
        return self.call("check_key", principal, data, sig)

    def configure(self, interval_s: float, misses: int) -> Awaitable[None]:
        """See :meth:`reach.ports.registry.RegistryPort.configure`."""
        return self.call("configure", interval_s, misses)

    def report_kills(self, principal: str, data: bytes, sig: CallSignature,
                     ) -> Awaitable[list[tuple[int, bool]]]:
        """See :meth:`reach.ports.registry.RegistryPort.report_kills`."""
        return self.call("report_kills", principal, data, sig)

    def forget_kills(self, principal: str, data: bytes, sig: CallSignature) -> Awaitable[int]:
        """See :meth:`reach.ports.registry.RegistryPort.forget_kills`."""
        return self.call("forget_kills", principal, data, sig)

    def dead_letter(self, letters: list[DeadLetter]) -> Awaitable[None]:
        """See :meth:`reach.ports.registry.RegistryPort.dead_letter`."""
        return self.call("dead_letter", letters)

    def dead_letters(self, limit: int = 1000) -> Awaitable[list[DeadLetter]]:
        """See :meth:`reach.ports.registry.RegistryPort.dead_letters`."""
        return self.call("dead_letters", limit)

    def stats(self) -> Awaitable[RegistryStats]:
        """See :meth:`reach.ports.registry.RegistryPort.stats`."""
        return self.call("stats")

    def offer_spare(self, principal: str, data: bytes, sig: CallSignature) -> Awaitable[bool]:
        """See :meth:`reach.ports.registry.RegistryPort.offer_spare`."""
        return self.call("offer_spare", principal, data, sig)

    def claim_spare(self, shape: str, node: str | None) -> Awaitable[str | None]:
        """See :meth:`reach.ports.registry.RegistryPort.claim_spare`."""
        return self.call("claim_spare", shape, node)

    def top_up_spares(self, shape: str, node: str, spares: int,
                      max_spares: int) -> Awaitable[int]:
        """See :meth:`reach.ports.registry.RegistryPort.top_up_spares`."""
        return self.call("top_up_spares", shape, node, spares, max_spares)

    def claim_nonce(self, principal: str, data: bytes, sig: CallSignature) -> Awaitable[bool]:
        """See :meth:`reach.ports.registry.RegistryPort.claim_nonce`."""
        return self.call("claim_nonce", principal, data, sig)

    def spares(self) -> Awaitable[dict[str, list[str]]]:
        """See :meth:`reach.ports.registry.RegistryPort.spares`."""
        return self.call("spares")


class FakeInbox(FakeEndpoint, InboxPort):
    """A driver's reply inbox (``actors/inbox.py``)."""

    def take(self) -> Awaitable[list[bytes]]:
        """See :meth:`reach.ports.inbox.InboxPort.take`."""
        return self.call("take")


class FakeSupervisor(FakeEndpoint, SupervisorPort):
    """A running supervisor (``actors/supervisor.py``)."""

    def start(self) -> Awaitable[list[str]]:
        """See :meth:`reach.ports.supervisors.SupervisorPort.start`."""
        return self.call("start")

    def stop(self) -> Awaitable[list[str]]:
        """See :meth:`reach.ports.supervisors.SupervisorPort.stop`."""
        return self.call("stop")

    def wait_gave_up(self) -> Awaitable[ErrorDoc | None]:
        """See :meth:`reach.ports.supervisors.SupervisorPort.wait_gave_up`."""
        return self.call("wait_gave_up")

    def submit(self, spec: TaskSpec) -> Awaitable[str]:
        """See :meth:`reach.ports.supervisors.SupervisorPort.submit`."""
        return self.call("submit", spec)

    def wait_task(self, task_id: str) -> Awaitable[TaskResult]:
        """See :meth:`reach.ports.supervisors.SupervisorPort.wait_task`."""
        return self.call("wait_task", task_id)

    def cancel_task(self, task_id: str) -> Awaitable[TaskResult]:
        """See :meth:`reach.ports.supervisors.SupervisorPort.cancel_task`."""
        return self.call("cancel_task", task_id)

    def status(self) -> Awaitable[SupervisorStatus]:
        """See :meth:`reach.ports.supervisors.SupervisorPort.status`."""
        return self.call("status")


class FakeProcess(Process):
    """A :class:`~reach.ports.processes.Process` over a simulated process (calls start at once).

    Args:
        invoke: Runs a method of a process (the fake cluster's).
        name: The process's name.
    """

    __slots__ = ("_invoke", "name")

    def __init__(self, invoke: Invoke, name: str) -> None:
        self._invoke = invoke
        self.name = name

    def call(self, method: str, *args: object) -> Awaitable[object]:
        """See :meth:`reach.ports.processes.Process.call`."""
        task = asyncio.get_running_loop().create_task(self._invoke(self.name, method, args, {}))
        task.add_done_callback(_retrieve)
        return task


__all__ = [
    "FakeProcess",
    "FakeEndpoint",
    "FakeHost",
    "FakeInbox",
    "FakePort",
    "FakeRegistry",
    "FakeSupervisor",
]
