"""The frames of the WebSocket wire, and what they are made of.

The frame types, the close codes, the limits and paths both sides agree on, and the models of
what an agent sends (its hello and declaration, heartbeats, goodbye, envelopes) and of what the
gateway decides about a connection (attached, or refused). :mod:`reach.remote.wire` describes
the wire as a whole.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum, StrEnum
from typing import Annotated, Any, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    ValidationError,
    model_validator,
)

from reach import strict_json as strict
from reach.errors import CodecError, Detail

#: Version of this wire (the hello's ``v``).
WIRE_VERSION = 1
#: Levels of objects and arrays an envelope (itself the first), or any other frame, may nest.
#: Real payloads nest a few levels (an A2A message with parts and metadata: 6); 64 leaves room
#: for any honest document, and keeps what reach does with an envelope afterwards (pickling it
#: for Ray, about 2 stack frames a level against Python's limit of 1,000; validating it; storing
#: it) far from any recursion limit.
DEFAULT_MAX_DEPTH = 64
#: Where the gateway serves the channel.
CONNECT_PATH = "/v1/agents/connect"
#: Largest frame either side accepts by default (bytes of UTF-8 text).
DEFAULT_MAX_FRAME_BYTES = 1 << 20
#: Most envelopes a ``batch`` frame may carry: each refused one costs the gateway an ``error``
#: frame, so a frame of empty envelopes must not cost it hundreds of thousands. An honest 1 MiB
#: frame holds a few thousand envelopes (with a ``msg_id``, the smallest valid one takes about
#: 120 bytes).
DEFAULT_MAX_BATCH = 10_000
#: Capability routing: a receiver ``cap:<tag>`` goes to the least-loaded online holder of ``tag``.
CAPABILITY_PREFIX = "cap:"


class CloseCode(IntEnum):
    """Why the gateway closed a connection (WebSocket close codes; the reason text says more).

    A client reconnects after :attr:`GOING_AWAY` and :attr:`UNAVAILABLE`, and after a broken
    connection; it does not after the others, which a retry would only repeat.
    """

    NORMAL = 1000
    """The agent said goodbye."""
    GOING_AWAY = 1001
    """The gateway replica is shutting down: reconnect (to another replica)."""
    MALFORMED = 4400
    """A frame is not JSON, not an object, of an unknown type, or lacks a field."""
    UNAUTHORIZED = 4401
    """No bearer token, or one this deployment did not issue."""
    BAD_SIGNATURE = 4403
    """The hello's signature does not verify, is outside the window, or is replayed."""
    HELLO_TIMEOUT = 4408
    """No hello came within the time allowed after the connection opened."""
    ALREADY_ONLINE = 4409
    """An agent with this ID is online already (connected, or an agent of the cluster)."""
    AFTER_GOODBYE = 4410
    """A frame came after goodbye."""
    TOO_LARGE = 4413
    """A frame is larger than ``max_frame_bytes`` (or binary)."""
    UNSUPPORTED = 4426
    """The hello asks for a wire version this gateway does not speak."""
    UNAVAILABLE = 4503
    """The gateway cannot reach the cluster: reconnect later."""


#: Close codes after which a client gives up instead of reconnecting.
FINAL_CODES = frozenset({CloseCode.NORMAL, CloseCode.MALFORMED, CloseCode.UNAUTHORIZED,
                         CloseCode.BAD_SIGNATURE, CloseCode.AFTER_GOODBYE, CloseCode.TOO_LARGE,
                         CloseCode.UNSUPPORTED})


class FrameType(StrEnum):
    """The ``type`` of a frame."""

    HELLO = "hello"
    WELCOME = "welcome"
    ENVELOPE = "envelope"
    BATCH = "batch"
    HEARTBEAT = "heartbeat"
    ERROR = "error"
    GOODBYE = "goodbye"


class WireRefusal(BaseModel):
    """Why a connection is closed: the close code, a stable reason, and words for a person.

    Attributes:
        code: The WebSocket close code.
        reason: Machine name (``bad_signature``, ``replay_window``, ``already_online``...).
        message: What went wrong (the close frame's reason is this, cut to 123 bytes).
    """

    model_config = ConfigDict(frozen=True)

    code: CloseCode
    reason: StrictStr
    message: StrictStr

    def close_reason(self) -> str:
        """The close frame's reason text: ``<reason>: <message>`` within 123 UTF-8 bytes."""
        text = f"{self.reason}: {self.message}"
        raw = text.encode("utf-8")[:123]
        return raw.decode("utf-8", errors="ignore")


class Attached(BaseModel):
    """A hello accepted: the agent is registered, and this connection is its current one.

    Attributes:
        agent_id: The agent.
        epoch: Its epoch in the registry (one more than before on each restart).
        conn: The connection's ID (every later call about it names it: a call about a replaced
            connection does nothing).
        restarted: Whether it came back within the grace period (its restart).
        queue_limit: Envelopes the gateway queues for it before refusing senders.
    """

    model_config = ConfigDict(frozen=True)

    agent_id: StrictStr
    epoch: int
    conn: StrictStr
    restarted: bool = False
    queue_limit: int = 0


class HandlerDoc(BaseModel):
    """One handler of a remote agent, as its hello declares it.

    Attributes:
        schema_ref: The payload schema it reads (``name@MAJOR.MINOR``), on the wire ``schema``.
        returns: The schema of its replies, if declared.
        streaming: Whether it replies with a stream (events, then the end marker).
        json_schema: The JSON Schema of the payload it reads (what the A2A gateway shows).
    """

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    schema_ref: StrictStr = Field(alias="schema")
    returns: StrictStr | None = None
    streaming: bool = False
    json_schema: dict[str, Any] | None = None


class Declaration(BaseModel):
    """What a remote agent says of itself in its hello (signed with it).

    Attributes:
        capabilities: Its dotted capability tags.
        description: What it is good at, what it is not, its preconditions.
        handlers: What it reads.
        pending_policy: What the gateway does, when the agent comes back within the grace
            period, with requests it had handed over and not seen answered: ``resend`` them
            (while their deadlines allow) or ``cancel`` them (their callers get a retryable
            error).
        priorities: The priority of capabilities it names (0 the primary, 1, 2... backups;
            one it leaves out is at 0): an int of at least 0 for one of its capabilities.
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    capabilities: tuple[StrictStr, ...] = ()
    description: StrictStr = ""
    handlers: tuple[HandlerDoc, ...] = ()
    pending_policy: Literal["resend", "cancel"] = "resend"
    priorities: dict[StrictStr, Annotated[StrictInt, Field(ge=0)]] = {}

    @model_validator(mode="after")
    def _priorities_of_its_capabilities(self) -> Self:
        unknown = [tag for tag in self.priorities if tag not in self.capabilities]
        if unknown:
            raise ValueError(f"a priority is given for {unknown[0]!r}, which is not one of its "
                             "capabilities")
        return self


class Hello(BaseModel):
    """The first frame of a connection (see :mod:`reach.remote.wire`).

    Attributes:
        agent_id: The agent's ID.
        ts: When it was signed, milliseconds since the epoch.
        nonce: 16 random bytes, as 32 lowercase hex digits; never reused.
        declaration: The :class:`Declaration`, as JSON text (signed as sent).
        sig: HMAC-SHA256 of :func:`hello_mac`'s message, 64 lowercase hex digits.
        v: The wire version the agent speaks.
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    agent_id: StrictStr
    ts: int
    nonce: StrictStr
    declaration: StrictStr
    sig: StrictStr
    v: int = WIRE_VERSION

    def declared(self) -> Declaration:
        """The declaration, parsed.

        Raises:
            CodecError: it is not strict JSON (NaN, Infinity, a lone surrogate), nests more
                than :data:`DEFAULT_MAX_DEPTH` levels, or is not an object of the declaration's
                shape.
        """
        try:
            parsed = strict.loads_marked(self.declaration)
        except (ValueError, RecursionError) as exc:
            raise frame_error("declaration", "the hello's declaration is not JSON") from exc
        found = strict.flaw(parsed, DEFAULT_MAX_DEPTH, strings=True)
        if found is not None:
            raise frame_error("declaration", f"the hello's declaration cannot be read: {found[1]}")
        try:
            return Declaration.model_validate(parsed)
        except ValidationError as exc:
            raise frame_error("declaration", "the hello's declaration is invalid: "
                              f"{first_problem(exc)}") from exc


class Heartbeat(BaseModel):
    """A keep-alive; the gateway echoes it. ``ts``: the sender's clock, in milliseconds."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    ts: int = 0


class Goodbye(BaseModel):
    """The agent leaves for good: it is deregistered at once, no grace period, no restart."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    reason: StrictStr = ""


@dataclass(frozen=True)
class RefusedItem:
    """An envelope of a frame refused as it entered, alone (its sender gets an ``error`` frame).

    Attributes:
        msg_id: Its ``msg_id``, when it has a readable one.
        error: Why (a CodecError whose ``details["rule"]`` is ``depth``, ``not_json`` or
            ``surrogate``).
    """

    msg_id: str | None
    error: CodecError


@dataclass(frozen=True)
class Envelopes:
    """An ``envelope`` or ``batch`` frame: envelopes as JSON objects, not validated yet (the
    host validates each; one bad envelope is refused alone, with an ``error`` frame), and those
    refused already because they cannot travel (too deep, not JSON)."""

    items: tuple[dict[str, Any], ...]
    refused: tuple[RefusedItem, ...] = ()


Frame = Hello | Heartbeat | Goodbye | Envelopes


def frame_error(rule: str, message: str, close: CloseCode = CloseCode.MALFORMED,
                **details: Detail) -> CodecError:
    """The error of a frame that cannot be read: ``details["rule"]`` names the problem,
    ``details["close"]`` the code the connection closes with."""
    return CodecError(message, details={"rule": rule, "close": int(close), **details})


def first_problem(exc: ValidationError) -> str:
    """Where a frame's first invalid field is, and what is wrong with it."""
    first = exc.errors(include_url=False)[0]
    where = ".".join(str(p) for p in first["loc"]) or "(frame)"
    return f"{where}: {first['msg']}"
