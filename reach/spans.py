"""Finished trace spans as reach keeps and shows them, and the names of their attributes.

reach traces with OpenTelemetry (the W3C trace context rides on every envelope); the spans a
process finishes go to OTLP where an exporter is configured, and to the cluster's own trace
store, so that the observer shows traces with no tracing backend at all. What reaches that store,
and what its queries give back, is plain frozen data of this module (it pickles between
processes and :func:`dataclasses.asdict` turns it into JSON):

- :class:`SpanRecord` (with its :class:`SpanEvent` and :class:`SpanLink`): one finished span;
- :class:`TraceSummary`: one trace of a listing (its root, duration, agents, errors);
- :class:`TraceEdge`: who called whom, how often, with how many errors, over a period (the
  observer's message graph);
- :class:`TraceStoreStats`: what the store holds and what it dropped.

:class:`Attr` names the attributes reach sets on its spans, and :class:`SpanName` the names of
the spans it starts, so that the runtime that writes them and the store and observer that read
them agree on one spelling.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

#: What an attribute's value may be (OpenTelemetry's scalar attribute types).
AttrValue = str | int | float | bool

__all__ = ["Attr", "AttrValue", "SpanEvent", "SpanKind", "SpanLink", "SpanName", "SpanRecord",
           "SpanStatus", "TraceEdge", "TraceStoreStats", "TraceSummary"]


class SpanKind(StrEnum):
    """OpenTelemetry's span kinds, by their names."""

    INTERNAL = "internal"
    SERVER = "server"
    CLIENT = "client"
    PRODUCER = "producer"
    CONSUMER = "consumer"


class SpanStatus(StrEnum):
    """How a span ended (OpenTelemetry's status codes)."""

    UNSET = "unset"
    OK = "ok"
    ERROR = "error"


class SpanName(StrEnum):
    """The names of the spans reach starts (a span's name is one of these, then a space and its
    subject: ``"send order.query"``, ``"handle order.query@1.2"``)."""

    SEND = "send"
    """A client span per send (request, notification, stream): subject the capability or the
    agent ID sent to."""
    HANDLE = "handle"
    """A server span per handler run: subject the payload schema."""
    RESTART = "restart"
    """A supervisor's restart of a child: subject the child ID."""
    TASK_ATTEMPT = "attempt"
    """One attempt of a supervisor-owned task: subject the task's schema."""
    A2A = "a2a"
    """The A2A gateway's handling of one A2A call (server), or an outbound call to a remote A2A
    agent (client): subject the A2A method."""


class Attr(StrEnum):
    """The attributes reach sets on its spans and events."""

    AGENT_ID = "reach.agent_id"
    """The agent that handles (server span) or the one a send chose (client span)."""
    SENDER = "reach.sender"
    RECEIVER = "reach.receiver"
    """What a send named: an agent ID, or a capability for a routed send."""
    CAPABILITY = "reach.capability"
    PAYLOAD_SCHEMA = "reach.payload_schema"
    MSG_TYPE = "reach.msg_type"
    MSG_ID = "reach.msg_id"
    HOST = "reach.host"
    NODE = "reach.node"
    EPOCH = "reach.epoch"
    ATTEMPT = "reach.attempt"
    TASK_ID = "reach.task_id"
    SESSION_ID = "reach.session_id"
    SUPERVISOR = "reach.supervisor"
    CHILD = "reach.child"
    DECISION = "reach.decision"
    """A supervisor's decision: restart, retry, degrade, abort, escalate..."""
    REASON = "reach.reason"
    ERROR_CODE = "reach.error.code"
    ERROR_SEVERITY = "reach.error.severity"
    QUEUED_MS = "reach.queued_ms"
    """How long a message waited in its host's inbox before its handler ran."""
    PRINCIPAL = "reach.principal"
    """Who called, as the gateway authenticated them."""


@dataclass(frozen=True, slots=True)
class SpanEvent:
    """Something that happened during a span (a retry, a failover, a restart)."""

    name: str
    at_ns: int
    attributes: dict[str, AttrValue] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SpanLink:
    """A link from a span to another (a retry's attempt to its task's first)."""

    trace_id: str
    span_id: str


@dataclass(frozen=True, slots=True)
class SpanRecord:
    """One finished span.

    Attributes:
        trace_id: 32 lowercase hex digits (W3C; reach's envelope ``trace_id``).
        span_id: 16 lowercase hex digits.
        parent_span_id: The parent's span ID; None for a trace's root.
        name: A :class:`SpanName`, a space and its subject (other libraries' spans keep their
            own names).
        kind: Its kind.
        start_ns: When it started, nanoseconds since the epoch.
        end_ns: When it ended, on the same clock.
        status: How it ended.
        status_message: What went wrong, for an error.
        process: The process that recorded it (a host's, supervisor's or driver's name).
        attributes: Its attributes (:class:`Attr` names reach's own).
        events: Its events, in order.
        links: Its links.
    """

    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    kind: SpanKind
    start_ns: int
    end_ns: int
    status: SpanStatus = SpanStatus.UNSET
    status_message: str = ""
    process: str = ""
    attributes: dict[str, AttrValue] = field(default_factory=dict)
    events: tuple[SpanEvent, ...] = ()
    links: tuple[SpanLink, ...] = ()

    @property
    def duration_ms(self) -> float:
        """How long it lasted, in milliseconds."""
        return (self.end_ns - self.start_ns) / 1e6


@dataclass(frozen=True, slots=True)
class TraceSummary:
    """One trace of a listing.

    Attributes:
        trace_id: Its ID.
        root: The name of its root span (of its earliest span when the root is not kept).
        start_ns: When its earliest span started.
        duration_ms: From its earliest span's start to its latest span's end.
        spans: How many of its spans the store holds.
        errors: How many of those ended in error.
        agents: The agents its spans name (``reach.agent_id``), sorted.
    """

    trace_id: str
    root: str
    start_ns: int
    duration_ms: float
    spans: int
    errors: int
    agents: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class TraceEdge:
    """Messages from one agent (or outside caller) to another over a period.

    Attributes:
        source: The sender (an agent ID, a client's name, or a principal of the gateway).
        target: The agent that handled them.
        count: How many.
        errors: How many of those ended in error.
        per_s: ``count`` over the period's length.
    """

    source: str
    target: str
    count: int
    errors: int
    per_s: float


@dataclass(frozen=True, slots=True)
class TraceStoreStats:
    """What a trace store holds, and what it dropped to stay within its bounds.

    Attributes:
        spans: Spans held.
        traces: Traces they belong to.
        bytes: Their estimated size in memory.
        max_bytes: The bound it keeps to (oldest spans are dropped first).
        received: Spans received since it started.
        dropped: Spans dropped since it started (for the bound).
    """

    spans: int
    traces: int
    bytes: int
    max_bytes: int
    received: int
    dropped: int
