"""Finished trace spans as reach keeps and shows them, and the names of their attributes.

reach traces with OpenTelemetry (the W3C trace context rides on every envelope); the spans a
process finishes go to OTLP where an exporter is configured, and to the cluster's own trace
store, so that the observer shows traces with no tracing backend at all. What reaches that store,
and what its queries give back, is plain frozen data of this module (it pickles between
processes and :func:`dataclasses.asdict` turns it into JSON):

- :class:`SpanRecord` (with its :class:`SpanEvent` and :class:`SpanLink`): one finished span;
- :class:`SpanBatch`: a process's finished spans packed into one msgpack blob, as they travel
  to the store (a sequence of :class:`SpanRecord`, read when the store reads it);
- :class:`TraceSummary`: one trace of a listing (its root, duration, agents, errors);
- :class:`TraceEdge`: who called whom, how often, with how many errors, over a period (the
  observer's message graph);
- :class:`TraceStoreStats`: what the store holds and what it dropped.

:class:`Attr` names the attributes reach sets on its spans, and :class:`SpanName` the names of
the spans it starts, so that the runtime that writes them and the store and observer that read
them agree on one spelling.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, overload

import msgpack

#: What an attribute's value may be (OpenTelemetry's scalar attribute types).
AttrValue = str | int | float | bool

__all__ = ["Attr", "AttrValue", "SpanBatch", "SpanEvent", "SpanKind", "SpanLink", "SpanName",
           "SpanRecord", "SpanRow", "SpanStatus", "TraceEdge", "TraceStoreStats", "TraceSummary",
           "pack_row"]


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


#: A finished span as a :class:`SpanBatch` packs it: a :class:`SpanRecord`'s fields in order but
#: ``process`` (a batch's, once), its kind and status by their values, its attributes as a map or
#: as one flat sequence of keys and values in turn, each event as ``[name, at_ns, attributes]``
#: and each link as ``[trace_id, span_id]``; then, optionally, the index of the batch's shared
#: attributes it has too (its own attributes win over them). A span of status unset with no
#: events and no links (most spans) may leave out status, message, events and links: its row is
#: its first seven fields and its attributes (then the index).
SpanRow = Sequence[Any]
_SHORT_ROW = 9  # the fields of a row that leaves them out, with an index

_KIND_OF = {k.value: k for k in SpanKind}
_PACKER = msgpack.Packer()  # no hook: packing never runs Python code, so no thread interleaves


def pack_row(row: SpanRow) -> bytes | None:
    """One span's row packed, as :meth:`SpanBatch.join` takes it: a value msgpack has no type
    for (an integer past 64 bits too) is packed as its text; None when even that fails (a
    value whose text cannot be had)."""
    try:
        packed: bytes = _PACKER.pack(row)
    except (TypeError, ValueError, OverflowError):
        try:
            packed = msgpack.packb(row, default=str)
        except Exception:  # (whatever the value's __str__ raised)
            return None
    return packed


_STATUS_OF = {s.value: s for s in SpanStatus}


def _attributes(shared: Mapping[str, AttrValue] | None,
                own: dict[str, AttrValue] | Sequence[Any]) -> dict[str, AttrValue]:
    """A row's attributes: its batch's shared ones, if any, and its own (a map, or keys and
    values in turn) over them."""
    if not isinstance(own, dict):
        own = dict(zip(own[::2], own[1::2], strict=True))
    return own if shared is None else {**shared, **own}


class SpanBatch(Sequence[SpanRecord]):
    """Finished spans of one process, packed: what a process sends the trace store.

    A batch is one msgpack blob (``[process, rows]`` or ``[process, rows, shared]``, each row a
    :data:`SpanRow`): it pickles as one ``bytes`` object, where a list of records would pickle
    field by field. ``shared`` holds attribute sets that many of its spans have in common (those
    of one agent's handler runs: its ID, capability, host, node...), each sent once, and a row
    names the one it has by its index. Its records are made when it is first read (by the
    store), once.

    Args:
        data: The packed batch (:meth:`pack`'s or :meth:`join`'s).
    """

    __slots__ = ("_records", "data")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self._records: list[SpanRecord] | None = None

    @classmethod
    def pack(cls, process: str, rows: Sequence[SpanRow],
             shared: Sequence[Mapping[str, AttrValue]] = ()) -> SpanBatch:
        """A batch of ``rows`` recorded by ``process``, with the attribute sets its rows name by
        index (``shared``); a row :func:`pack_row` cannot pack is left out (its
        :meth:`span_count` says how many are in)."""
        try:
            return cls(_PACKER.pack([process, rows, shared] if shared else [process, rows]))
        except (TypeError, ValueError, OverflowError):
            return cls.join(process, [p for p in map(pack_row, rows) if p is not None], shared)

    @classmethod
    def join(cls, process: str, packed: Sequence[bytes],
             shared: Sequence[Mapping[str, AttrValue]] = ()) -> SpanBatch:
        """A batch of rows packed one by one (:func:`pack_row`), recorded by ``process``, with
        the attribute sets its rows name by index (``shared``)."""
        parts = [_PACKER.pack_array_header(3 if shared else 2), _PACKER.pack(process),
                 _PACKER.pack_array_header(len(packed)), *packed]
        if shared:  # (a set that cannot be packed even as text travels empty)
            parts.append(pack_row(list(shared)) or _PACKER.pack([{} for _ in shared]))
        return cls(b"".join(parts))

    def span_count(self) -> int:
        """How many spans it holds (read from its header: its rows stay packed)."""
        if self._records is not None:
            return len(self._records)
        for head in (self.data[:256], self.data):  # the headers and the process's name
            unpacker = msgpack.Unpacker()
            unpacker.feed(head)
            try:
                unpacker.read_array_header()
                unpacker.skip()
                count: int = unpacker.read_array_header()
            except msgpack.OutOfData:  # a name longer than the first bytes
                continue
            return count
        return len(self.records())  # not a batch's shape: reading it says what is wrong

    def records(self) -> list[SpanRecord]:
        """Its spans, as records."""
        if self._records is None:
            process, rows, *rest = msgpack.unpackb(self.data)
            shared = rest[0] if rest else ()
            records = self._records = []
            for row in rows:
                if len(row) <= _SHORT_ROW:  # status unset, no events, no links
                    (trace_id, span_id, parent, name, kind, start_ns, end_ns, attributes,
                     *common) = row
                    status, message, events, links = "unset", "", None, None
                else:
                    (trace_id, span_id, parent, name, kind, start_ns, end_ns, status, message,
                     attributes, events, links, *common) = row
                records.append(SpanRecord(
                    trace_id, span_id, parent, name, _KIND_OF[kind], start_ns, end_ns,
                    _STATUS_OF[status], message, process,
                    _attributes(shared[common[0]] if common else None, attributes),
                    tuple(SpanEvent(*e) for e in events) if events else (),
                    tuple(SpanLink(*link) for link in links) if links else ()))
        return self._records

    def __len__(self) -> int:
        return len(self.records())

    @overload
    def __getitem__(self, index: int) -> SpanRecord: ...

    @overload
    def __getitem__(self, index: slice) -> list[SpanRecord]: ...

    def __getitem__(self, index: int | slice) -> SpanRecord | list[SpanRecord]:
        return self.records()[index]

    def __iter__(self) -> Iterator[SpanRecord]:
        return iter(self.records())

    def __reduce__(self) -> tuple[type[SpanBatch], tuple[bytes]]:
        return SpanBatch, (self.data,)

    def __repr__(self) -> str:
        return f"SpanBatch({len(self.data)} bytes)"


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
