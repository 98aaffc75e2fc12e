"""The envelope every reach message travels in, and the rules it must keep.

An :class:`Envelope` is frozen and always valid: building one that breaks a rule raises
:class:`~reach.errors.ProtocolError` whose ``details["rule"]`` names the rule:

========================  =====================================================================
rule                      meaning
========================  =====================================================================
``empty_sender``          the sender ID is empty
``empty_receiver``        the receiver (agent ID or capability) is empty
``schema_missing``        the payload declares no schema
``schema_ref_format``     the schema is not ``name@MAJOR.MINOR``
``needs_request_id``      a response or error does not name the request it answers
``request_timeout``       a request has no positive ``timeout_ms``
``error_needs_info``      an error carries no ``error_info``
``unknown_severity``      ``error_info.severity`` is not retryable, degradable or fatal
``trace_context``         ``span_id`` is not 16 lowercase hex digits, or is given with a
                          ``trace_id`` that is not 32 (W3C trace context; neither all zeros)
``field_type``            a field has the wrong type (the field is named)
========================  =====================================================================
"""

from __future__ import annotations

import os
import reprlib
import time
from collections.abc import Mapping
from enum import StrEnum
from typing import Annotated, Any, Self

from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError, model_validator

from reach.errors import ErrorInfo, ProtocolError, ReachError, error_from_info
from reach.schemas import is_schema_ref, payload_body

#: Schema of the (empty) payload of error envelopes.
ERROR_SCHEMA = "reach.error@1.0"

#: W3C trace context: a trace ID is 32 lowercase hex digits, a span (parent) ID 16, neither
#: all zeros.
TRACE_ID_PATTERN = "^[0-9a-f]{32}$"
SPAN_ID_PATTERN = "^[0-9a-f]{16}$"
#: The bytes of a W3C trace ID and of a W3C span ID.
TRACE_ID_BYTES, SPAN_ID_BYTES = 16, 8
_ZEROS = {TRACE_ID_BYTES: bytes(TRACE_ID_BYTES), SPAN_ID_BYTES: bytes(SPAN_ID_BYTES)}
_TRACE_HEX, _SPAN_HEX = 2 * TRACE_ID_BYTES, 2 * SPAN_ID_BYTES
_ZERO_TRACE, _ZERO_SPAN = "0" * _TRACE_HEX, "0" * _SPAN_HEX


def w3c_id_bytes(text: str, size: int) -> bytes | None:
    """A W3C ID's bytes (``size`` of them: :data:`TRACE_ID_BYTES`, :data:`SPAN_ID_BYTES`); None
    for text that is not twice as many lowercase hex digits, or is all zeros. Read as the hex it
    must be rather than matched against a pattern, at some 60% of the time: every traced
    envelope parsed asks, and every trace ID a sampler decides on."""
    try:
        raw = bytes.fromhex(text)
    except (ValueError, TypeError):
        return None
    return raw if len(raw) == size and raw != _ZEROS[size] and raw.hex() == text else None


def w3c_context(trace_id: str, span_id: str) -> bool:
    """Whether ``trace_id`` and ``span_id`` are a W3C trace ID and span ID (as
    :func:`match_trace_id` and :func:`match_span_id` say, both at once: every traced envelope
    parsed asks, in a third less time)."""
    try:
        return (len(trace_id) == _TRACE_HEX and len(span_id) == _SPAN_HEX
                and bytes.fromhex(trace_id).hex() == trace_id  # (hex, and lowercase)
                and bytes.fromhex(span_id).hex() == span_id
                and trace_id != _ZERO_TRACE and span_id != _ZERO_SPAN)
    except (ValueError, TypeError):
        return False


def match_trace_id(trace_id: str) -> bool:
    """Whether ``trace_id`` is a W3C trace ID: 32 lowercase hex digits, not all zeros."""
    return w3c_id_bytes(trace_id, TRACE_ID_BYTES) is not None


def match_span_id(span_id: str) -> bool:
    """Whether ``span_id`` is a W3C span ID: 16 lowercase hex digits, not all zeros."""
    return w3c_id_bytes(span_id, SPAN_ID_BYTES) is not None


_TRACE_CONTEXT = frozenset({"trace_id", "span_id", "trace_flags"})


class MsgType(StrEnum):
    """The five kinds of message."""

    REQUEST = "request"
    RESPONSE = "response"
    NOTIFICATION = "notification"
    EVENT = "event"
    ERROR = "error"


def new_id() -> str:
    """A fresh identifier for a message, request, task, trace or session: 32 hex digits, the
    128 bits of which come from the operating system's CSPRNG (as a UUID4's do).

    IDs must be unique *and* unpredictable: a request's ID is what a cancel names, and a task's
    is what an A2A caller gets and follows, so a caller who could guess the next one could act
    on another's. A Mersenne Twister's output can be predicted from 624 of its words; the
    system's generator cannot. It is also fork-safe and thread-safe, with no state of ours.
    """
    return os.urandom(16).hex()


Payload = dict[StrictStr, Any]


class Envelope(BaseModel):
    """One message: who sends it to whom, what it carries and under which rules.

    Attributes:
        msg_id: Unique ID of this message.
        msg_type: request, response, notification, event or error.
        sender: ID of the sending agent (or of a driver).
        receiver: ID of the receiving agent, or a capability for routed sends.
        payload: The message body, a mapping valid under ``payload_schema``.
        payload_schema: ``name@MAJOR.MINOR`` of the payload.
        request_id: For responses and errors, the ``msg_id`` of the request answered.
        timeout_ms: For requests, the time budget in milliseconds (positive).
        deadline: For requests, the absolute deadline (seconds since the epoch).
        trace_id: Shared by every message of one call chain: with a ``span_id``, the W3C
            trace ID of the chain's trace (32 lowercase hex digits, as reach makes them).
        span_id: The W3C parent ID: the span that sent this message (16 lowercase hex
            digits), of which the span that handles it is a child; None when the sender does
            not trace.
        trace_flags: The W3C trace flags of that span (bit 0: sampled).
        session_id: The session the message belongs to, if any.
        hops: Agent IDs the call chain has passed through, oldest first.
        error_info: For errors, what went wrong and how bad it is.
        timestamp: When the message was made (seconds since the epoch).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    msg_id: StrictStr = Field(default_factory=new_id)
    msg_type: MsgType
    sender: StrictStr
    receiver: StrictStr
    payload: Payload = {}
    payload_schema: StrictStr = ""
    request_id: StrictStr | None = None
    timeout_ms: Annotated[int, Field(strict=True)] | None = None
    deadline: float | None = None
    trace_id: StrictStr = Field(default_factory=new_id)
    span_id: StrictStr | None = Field(default=None,
                                      json_schema_extra={"pattern": SPAN_ID_PATTERN})
    trace_flags: Annotated[int, Field(strict=True, ge=0, le=255)] = 0
    session_id: StrictStr | None = None
    hops: tuple[StrictStr, ...] = ()
    error_info: ErrorInfo | None = None
    timestamp: float = Field(default_factory=time.time)

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise _protocol_error(exc) from exc

    # Marked as pydantic marks its own: a model's own __init__ is otherwise called by
    # model_validate too, and every envelope parsed was validated twice (``parse`` turns the
    # errors into a ProtocolError itself).
    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]

    @classmethod
    def parse(cls, data: Mapping[str, Any]) -> Envelope:
        """Validates a mapping of fields (as decoded from the wire) into an envelope.

        Raises:
            ProtocolError: a field is missing or mistyped, or a rule is broken.
        """
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise _protocol_error(exc) from exc

    @model_validator(mode="after")
    def _check_rules(self) -> Self:
        # ProtocolError is not a ValueError, so pydantic lets it through unchanged.
        if not self.sender:
            raise _rule("empty_sender", "envelope has an empty sender")
        if not self.receiver:
            raise _rule("empty_receiver", "envelope has an empty receiver")
        if not self.payload_schema:
            raise _rule(
                "schema_missing",
                f"{self.msg_type.value} envelope declares no payload schema",
                "set payload_schema to 'name@MAJOR.MINOR'",
            )
        if not is_schema_ref(self.payload_schema):
            raise _rule(
                "schema_ref_format",
                f"payload schema {self.payload_schema!r} is not of the form name@MAJOR.MINOR",
                "declare the schema as e.g. 'order.query@1.0'",
            )
        kind = self.msg_type
        if kind in (MsgType.RESPONSE, MsgType.ERROR) and not self.request_id:
            raise _rule(
                "needs_request_id",
                f"{kind.value} envelope has no request_id: it must answer a request",
            )
        if kind is MsgType.REQUEST and (self.timeout_ms is None or self.timeout_ms <= 0):
            raise _rule(
                "request_timeout",
                f"request envelope needs a positive timeout_ms, got {self.timeout_ms!r}",
            )
        if kind is MsgType.ERROR and self.error_info is None:
            raise _rule("error_needs_info", "error envelope carries no error_info")
        span_id = self.span_id
        if span_id is not None and not w3c_context(self.trace_id, span_id):
            _check_trace_context(self.trace_id, span_id)
        return self

    # -- builders ------------------------------------------------------------------------------

    @classmethod
    def request(
        cls,
        sender: str,
        receiver: str,
        payload: BaseModel | Mapping[str, Any],
        schema: str | None = None,
        *,
        timeout_ms: int = 30_000,
        **fields: Any,
    ) -> Envelope:
        """Builds a request; the deadline is ``timeout_ms`` from now unless given.

        Raises:
            ProtocolError: a rule is broken (see the module docstring).
            UnknownSchema: ``payload`` is a model that is not registered and no ``schema`` is given.
        """
        body, ref = payload_body(payload, schema)
        now = fields.pop("timestamp", None) or time.time()
        fields.setdefault("deadline", now + timeout_ms / 1000 if timeout_ms > 0 else None)
        return cls(
            msg_type=MsgType.REQUEST, sender=sender, receiver=receiver, payload=body,
            payload_schema=ref, timeout_ms=timeout_ms, timestamp=now, **fields,
        )

    @classmethod
    def notification(
        cls,
        sender: str,
        receiver: str,
        payload: BaseModel | Mapping[str, Any],
        schema: str | None = None,
        **fields: Any,
    ) -> Envelope:
        """Builds a notification (no reply expected)."""
        body, ref = payload_body(payload, schema)
        return cls(
            msg_type=MsgType.NOTIFICATION, sender=sender, receiver=receiver, payload=body,
            payload_schema=ref, **fields,
        )

    @classmethod
    def event(
        cls,
        sender: str,
        receiver: str,
        payload: BaseModel | Mapping[str, Any],
        schema: str | None = None,
        **fields: Any,
    ) -> Envelope:
        """Builds an event (a fact published to whoever listens on ``receiver``)."""
        body, ref = payload_body(payload, schema)
        return cls(
            msg_type=MsgType.EVENT, sender=sender, receiver=receiver, payload=body,
            payload_schema=ref, **fields,
        )

    def reply(
        self, payload: BaseModel | Mapping[str, Any], schema: str | None = None, *, sender: str = ""
    ) -> Envelope:
        """Builds the response to this request, keeping its trace and session."""
        body, ref = payload_body(payload, schema)
        return Envelope(
            msg_type=MsgType.RESPONSE, sender=sender or self.receiver, receiver=self.sender,
            payload=body, payload_schema=ref, request_id=self.msg_id, trace_id=self.trace_id,
            session_id=self.session_id, hops=self.hops,
        )

    def fail(self, error: ReachError | ErrorInfo, *, sender: str = "") -> Envelope:
        """Builds the error envelope answering this request."""
        info = error.to_info() if isinstance(error, ReachError) else error
        partial = error.partial if isinstance(error, ReachError) else None
        return Envelope(
            msg_type=MsgType.ERROR, sender=sender or self.receiver, receiver=self.sender,
            payload={} if partial is None else {"partial": partial}, payload_schema=ERROR_SCHEMA,
            request_id=self.msg_id, trace_id=self.trace_id,
            session_id=self.session_id, hops=self.hops, error_info=info,
        )

    def with_trace_context(self, trace_id: str, span_id: str, trace_flags: int) -> Envelope:
        """This envelope carrying another W3C trace context (the span that sends it).

        Not validated again: the values are a tracer's own (32 and 16 lowercase hex digits,
        flags of one byte), and a copy made on every traced send must cost next to nothing
        (a third of ``model_copy``'s time: pydantic's own copy, without its generality).
        """
        fields = self.__dict__.copy()
        fields["trace_id"], fields["span_id"], fields["trace_flags"] = (trace_id, span_id,
                                                                        trace_flags)
        made = _new(Envelope)
        _set(made, "__dict__", fields)
        _set(made, "__pydantic_fields_set__", self.__pydantic_fields_set__ | _TRACE_CONTEXT)
        _set(made, "__pydantic_extra__", None)
        _set(made, "__pydantic_private__", None)
        return made

    def take_trace_context(self, trace_id: str, span_id: str, trace_flags: int) -> None:
        """Gives this envelope another W3C trace context in place: only for an envelope that
        nothing else holds yet (one a send just built, about to leave), where a copy
        (:meth:`with_trace_context`) would be made and this one thrown away. Not validated
        again, as there."""
        fields = self.__dict__
        fields["trace_id"], fields["span_id"], fields["trace_flags"] = (trace_id, span_id,
                                                                        trace_flags)
        self.__pydantic_fields_set__.update(_TRACE_CONTEXT)

    def to_error(self) -> ReachError:
        """Returns the typed error an error envelope describes.

        Raises:
            ProtocolError: this envelope is not an error envelope.
        """
        if self.error_info is None:
            raise _rule("error_needs_info", f"{self.msg_type.value} envelope carries no error")
        partial = self.payload.get("partial")
        return error_from_info(self.error_info, partial if isinstance(partial, dict) else None)

    def remaining_ms(self, now: float) -> float | None:
        """Milliseconds left before the deadline at time ``now`` (None when there is none)."""
        return None if self.deadline is None else (self.deadline - now) * 1000


_new, _set = Envelope.__new__, object.__setattr__  # (for with_trace_context)


def _check_trace_context(trace_id: str, span_id: str) -> None:
    """Raises the ProtocolError that says which of an envelope's W3C IDs is not one."""
    if not match_span_id(span_id):
        raise _rule("trace_context",
                    f"span_id must be 16 lowercase hex digits, not all zeros (a W3C parent "
                    f"ID), got {reprlib.repr(span_id)}",
                    "send the sending span's ID, or no span_id at all")
    if not match_trace_id(trace_id):
        raise _rule("trace_context",
                    f"an envelope with a span_id needs a W3C trace_id: 32 lowercase hex "
                    f"digits, not all zeros, got {reprlib.repr(trace_id)}",
                    "send the span's trace ID as trace_id")


def _rule(rule: str, message: str, suggestion: str = "") -> ProtocolError:
    return ProtocolError(message, suggestion=suggestion, details={"rule": rule})


def _protocol_error(exc: ValidationError) -> ProtocolError:
    first = exc.errors(include_url=False)[0]
    loc = tuple(str(p) for p in first["loc"])
    field = ".".join(loc) or "(envelope)"
    if loc[:2] == ("error_info", "severity"):
        return _rule(
            "unknown_severity",
            "error_info.severity must be retryable, degradable or fatal, got "
            + reprlib.repr(first["input"]),
        )
    problems = "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or '(envelope)'}: {e['msg']}"
        for e in exc.errors(include_url=False)[:5]
    )
    err = _rule("field_type", f"invalid envelope field {field}: {problems}")
    err.details["field"] = field
    return err


__all__ = ["ERROR_SCHEMA", "SPAN_ID_PATTERN", "TRACE_ID_PATTERN", "Envelope", "MsgType", "Payload",
           "SPAN_ID_BYTES", "TRACE_ID_BYTES", "match_span_id", "match_trace_id", "new_id",
           "w3c_context", "w3c_id_bytes"]
