"""The ports of reach's processes on Ray: one typed adapter per port over an actor's handle.

A port's method starts the actor's method of the same name at once and returns the call under
way (:class:`~reach._ray.calls.RayCall`: awaiting it gives the result, or the error translated
into reach's). Each adapter subclasses the Protocol it implements, so mypy checks every method
against it; ``tests/unit/test_port_conformance.py`` checks their parameters against the actors'
too. Agent classes given to a host (:meth:`RayHost.add_agents`, :meth:`RayHost.preload`) travel
shipped (:func:`~reach._ray.calls.ship`): pickled once per sending process, rebuilt once per
receiving one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping, Sequence
from typing import Any

from reach._ray.calls import RayCall, RayPort, ship
from reach.agent import Agent
from reach.ports.a2a_tasks import A2ACursor, A2ATaskPort, A2ATaskRow
from reach.ports.audit import AuditEntry, AuditPort, AuditRecord
from reach.ports.data import ErrorDoc, JsonObject
from reach.ports.endpoint import Delivered, Endpoint
from reach.ports.hosts import HandlerDoc, HostInfo, HostPort
from reach.ports.inbox import InboxPort
from reach.ports.processes import Process
from reach.ports.registry import AclDoc, CallSignature, RegistryPort, RegistryStats
from reach.ports.sessions import (
    CommittedReply,
    NewMessage,
    OpenedSession,
    PendingRequest,
    RecordedReply,
    SessionsPort,
    StoreStats,
)
from reach.ports.supervisors import SupervisorPort
from reach.ports.traces import TraceStorePort
from reach.records import (
    AgentExit,
    AgentRecord,
    DeadLetter,
    SessionContext,
    SessionResume,
    SupervisorStatus,
    TaskResult,
)
from reach.spans import SpanRecord, SpanStatus, TraceEdge, TraceStoreStats, TraceSummary
from reach.specs import TaskSpec


class RayEndpoint(RayPort, Endpoint):
    """Any process that takes frames of envelopes (see :class:`~reach.ports.endpoint.Endpoint`)."""

    def deliver(self, frame: bytes, reply_to: str) -> Awaitable[Delivered]:
        """See :meth:`reach.ports.endpoint.Endpoint.deliver`."""
        # Every frame of envelopes takes this path: :meth:`call`'s work, without its packing.
        try:
            remote = self._remotes["deliver"]
        except KeyError:
            remote = self._remotes["deliver"] = self.handle.deliver.remote
        return RayCall(remote(frame, reply_to), self.name)

    def watch(self) -> Awaitable[None]:
        """See :meth:`reach.ports.endpoint.Endpoint.watch`."""
        return self.call("watch")


class RayHost(RayEndpoint, HostPort):
    """A host of agents (``actors/host.py``'s AgentHost as a Ray actor)."""

    def add_agents(  # noqa: PLR0917 - a process call carries its arguments positionally
        self, cls: type[Agent], agent_ids: list[str], args: tuple[object, ...],
        kwargs: dict[str, object], epochs: dict[str, int] | None = None,
        priority: int | Mapping[str, int] | None = None,
    ) -> Awaitable[list[AgentRecord]]:
        """See :meth:`reach.ports.hosts.HostPort.add_agents`."""
        return self.call("add_agents", ship(cls), agent_ids, args, kwargs, epochs,
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
        return self.call("preload", [ship(c) for c in classes])


class RayRegistry(RayPort, RegistryPort):
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


class RaySessions(RayPort, SessionsPort):
    """The session store's sessions (``actors/sessions.py``)."""

    def open_session(self, session_id: str, initiator: str, responder: str, offer: JsonObject,
                     limits: JsonObject) -> Awaitable[OpenedSession]:
        """See :meth:`reach.ports.sessions.SessionsPort.open_session`."""
        return self.call("open_session", session_id, initiator, responder, offer, limits)

    def append_many(self, appends: list[tuple[str, list[NewMessage]]],
                    ) -> Awaitable[list[list[int] | ErrorDoc]]:
        """See :meth:`reach.ports.sessions.SessionsPort.append_many`."""
        return self.call("append_many", appends)

    def context(self, session_id: str, last_n: int = 20) -> Awaitable[SessionContext]:
        """See :meth:`reach.ports.sessions.SessionsPort.context`."""
        return self.call("context", session_id, last_n)

    def since(self, session_id: str, seq: int,
              limit: int | None = None) -> Awaitable[SessionResume]:
        """See :meth:`reach.ports.sessions.SessionsPort.since`."""
        return self.call("since", session_id, seq, limit)

    def add_pending(self, request_id: str, *, agent_id: str, receiver: str, session_id: str,
                    envelope: JsonObject, deadline: float | None) -> Awaitable[None]:
        """See :meth:`reach.ports.sessions.SessionsPort.add_pending`."""
        return self.call("add_pending", request_id, agent_id=agent_id, receiver=receiver,
                         session_id=session_id, envelope=envelope, deadline=deadline)

    def resolve_pending(self, request_id: str, status: str) -> Awaitable[bool]:
        """See :meth:`reach.ports.sessions.SessionsPort.resolve_pending`."""
        return self.call("resolve_pending", request_id, status)

    def pending_for(self, agent_id: str) -> Awaitable[list[PendingRequest]]:
        """See :meth:`reach.ports.sessions.SessionsPort.pending_for`."""
        return self.call("pending_for", agent_id)

    def pending_status(self, request_id: str) -> Awaitable[str | None]:
        """See :meth:`reach.ports.sessions.SessionsPort.pending_status`."""
        return self.call("pending_status", request_id)

    def reply_for(self, request_id: str) -> Awaitable[RecordedReply | None]:
        """See :meth:`reach.ports.sessions.SessionsPort.reply_for`."""
        return self.call("reply_for", request_id)

    def claim(self, request_id: str, agent_id: str) -> Awaitable[int]:
        """See :meth:`reach.ports.sessions.SessionsPort.claim`."""
        return self.call("claim", request_id, agent_id)

    def commit_reply(self, request_id: str, token: int, agent_id: str, payload: JsonObject,
                     schema: str) -> Awaitable[CommittedReply]:
        """See :meth:`reach.ports.sessions.SessionsPort.commit_reply`."""
        return self.call("commit_reply", request_id, token, agent_id, payload, schema)

    def integrity(self) -> Awaitable[str]:
        """See :meth:`reach.ports.sessions.SessionsPort.integrity`."""
        return self.call("integrity")

    def stats(self) -> Awaitable[StoreStats]:
        """See :meth:`reach.ports.sessions.SessionsPort.stats`."""
        return self.call("stats")


class RayAudit(RayPort, AuditPort):
    """The audit log (kept by the session store, ``actors/sessions.py``)."""

    def audit(self, records: list[AuditRecord]) -> Awaitable[list[int]]:
        """See :meth:`reach.ports.audit.AuditPort.audit`."""
        return self.call("audit", records)

    def audit_records(self, trace_id: str | None = None, agent: str | None = None,
                      limit: int = 1000) -> Awaitable[list[AuditEntry]]:
        """See :meth:`reach.ports.audit.AuditPort.audit_records`."""
        return self.call("audit_records", trace_id, agent, limit)


class RayA2ATasks(RayPort, A2ATaskPort):
    """The A2A gateway's tasks (kept by the session store, ``actors/sessions.py``)."""

    def a2a_save(self, task_id: str, owner: str, *, context_id: str, state: int,
                 updated: int | None, doc: bytes) -> Awaitable[None]:
        """See :meth:`reach.ports.a2a_tasks.A2ATaskPort.a2a_save`."""
        return self.call("a2a_save", task_id, owner, context_id=context_id, state=state,
                         updated=updated, doc=doc)

    def a2a_save_many(self, rows: list[A2ATaskRow]) -> Awaitable[list[bool]]:
        """See :meth:`reach.ports.a2a_tasks.A2ATaskPort.a2a_save_many`."""
        return self.call("a2a_save_many", rows)

    def a2a_get(self, task_id: str, owner: str) -> Awaitable[bytes | None]:
        """See :meth:`reach.ports.a2a_tasks.A2ATaskPort.a2a_get`."""
        return self.call("a2a_get", task_id, owner)

    def a2a_list(self, owner: str, *, context_id: str = "", state: int = 0,
                 updated_after: int | None = None, page_size: int,
                 after: A2ACursor | None = None, inclusive: bool = False,
                 ) -> Awaitable[tuple[list[bytes], A2ACursor | None, int]]:
        """See :meth:`reach.ports.a2a_tasks.A2ATaskPort.a2a_list`."""
        return self.call("a2a_list", owner, context_id=context_id, state=state,
                         updated_after=updated_after, page_size=page_size, after=after,
                         inclusive=inclusive)

    def a2a_delete(self, task_id: str, owner: str) -> Awaitable[bool]:
        """See :meth:`reach.ports.a2a_tasks.A2ATaskPort.a2a_delete`."""
        return self.call("a2a_delete", task_id, owner)

    def a2a_recent(self, limit: int) -> Awaitable[list[A2ATaskRow]]:
        """See :meth:`reach.ports.a2a_tasks.A2ATaskPort.a2a_recent`."""
        return self.call("a2a_recent", limit)


class RayTraceStore(RayPort, TraceStorePort):
    """The trace store (``actors/trace_store.py``)."""

    def add_spans(self, spans: Sequence[SpanRecord]) -> Awaitable[None]:
        """See :meth:`reach.ports.traces.TraceStorePort.add_spans`."""
        return self.call("add_spans", spans)

    def trace(self, trace_id: str) -> Awaitable[list[SpanRecord]]:
        """See :meth:`reach.ports.traces.TraceStorePort.trace`."""
        return self.call("trace", trace_id)

    def find_traces(self, *, agent: str | None = None, capability: str | None = None,
                    task_id: str | None = None, status: SpanStatus | None = None,
                    since_ns: int | None = None, until_ns: int | None = None,
                    slowest: bool = False, limit: int = 50) -> Awaitable[list[TraceSummary]]:
        """See :meth:`reach.ports.traces.TraceStorePort.find_traces`."""
        return self.call("find_traces", agent=agent, capability=capability, task_id=task_id,
                         status=status, since_ns=since_ns, until_ns=until_ns, slowest=slowest,
                         limit=limit)

    def edges(self, since_ns: int) -> Awaitable[list[TraceEdge]]:
        """See :meth:`reach.ports.traces.TraceStorePort.edges`."""
        return self.call("edges", since_ns)

    def trace_stats(self) -> Awaitable[TraceStoreStats]:
        """See :meth:`reach.ports.traces.TraceStorePort.trace_stats`."""
        return self.call("trace_stats")


class RayInbox(RayEndpoint, InboxPort):
    """A driver's reply inbox (``actors/inbox.py``)."""

    def take(self) -> Awaitable[list[bytes]]:
        """See :meth:`reach.ports.inbox.InboxPort.take`."""
        return self.call("take")


class RaySupervisor(RayEndpoint, SupervisorPort):
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


class RayProcess(Process):
    """A :class:`~reach.ports.processes.Process` over one actor handle: ``call(m, *a)`` starts
    ``handle.m.remote(*a)`` at once and returns a :class:`~reach._ray.ports.RayCall`."""

    __slots__ = ("handle", "name")

    def __init__(self, handle: Any, name: str) -> None:
        self.handle = handle
        self.name = name

    def call(self, method: str, *args: object) -> Awaitable[object]:
        """See :meth:`reach.ports.processes.Process.call`."""
        return RayCall(getattr(self.handle, method).remote(*args), self.name)


__all__ = [
    "RayProcess",
    "RayA2ATasks",
    "RayAudit",
    "RayEndpoint",
    "RayHost",
    "RayInbox",
    "RayRegistry",
    "RaySessions",
    "RaySupervisor",
    "RayTraceStore",
]
