"""The WebSocket wire of remote agents: JSON frames, the signed hello, close codes.

An agent outside the cluster dials ``ws(s)://<gateway>/v1/agents/connect`` with
``Authorization: Bearer <token>`` and speaks JSON text frames (UTF-8; a binary frame is refused).
Every frame is an object whose ``type`` says what it is (see ``docs/wire.md`` for the page a
developer in another language implements from):

==============  ==========  ====================================================================
``type``        sent by     carries
==============  ==========  ====================================================================
``hello``       agent       ``agent_id``, ``ts`` (ms), ``nonce``, ``declaration`` (JSON *text*:
                            capabilities, description, handlers, pending policy), ``sig``
``welcome``     gateway     ``agent_id``, ``epoch``, ``restarted``, ``max_frame_bytes``,
                            ``heartbeat_s``, ``queue_limit``
``envelope``    both        ``envelope``: one envelope (``docs/envelope.schema.json``)
``batch``       both        ``envelopes``: several
``heartbeat``   both        ``ts`` (the gateway echoes the agent's)
``error``       gateway     ``code``, ``message``, ``msg_id``: an envelope it refused
``goodbye``     agent       ``reason``: the agent leaves for good (no restart)
==============  ==========  ====================================================================

The hello is signed with the agent's secret, which the deployment's keyring derives for its ID
(:func:`agent_secret`): HMAC-SHA256 over ``"reach-hello/1\\n" + agent_id + "\\n" + ts + "\\n" +
nonce + "\\n" + declaration`` (:func:`hello_mac`). The declaration travels as text so that the
bytes signed are the bytes sent: no JSON canonicalisation is needed in any language.

This module is pure (no I/O, no clock read: time is passed in) and imports neither Ray nor the
runtime, so the Python client and the gateway share it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum, StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError

from reach import strict_json as strict
from reach.errors import CodecError, Detail
from reach.protocol import Envelope

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
#: What the MAC of a hello starts with.
HELLO_CONTEXT = "reach-hello/1"
#: What an agent's secret is derived under (the same derivation as every reach principal's).
PRINCIPAL_CONTEXT = b"reach/principal/"
#: Largest frame either side accepts by default (bytes of UTF-8 text).
DEFAULT_MAX_FRAME_BYTES = 1 << 20
#: Most envelopes a ``batch`` frame may carry: each refused one costs the gateway an ``error``
#: frame, so a frame of empty envelopes must not cost it hundreds of thousands. An honest 1 MiB
#: frame holds a few thousand envelopes (with a ``msg_id``, the smallest valid one takes about
#: 120 bytes).
DEFAULT_MAX_BATCH = 10_000
#: How far a hello's ``ts`` may be from the gateway's clock, either way (seconds).
HELLO_WINDOW_S = 300.0
#: Capability routing: a receiver ``cap:<tag>`` goes to the least-loaded online holder of ``tag``.
CAPABILITY_PREFIX = "cap:"

_AGENT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}\Z")
_NONCE = re.compile(r"[0-9a-f]{32}\Z")
_SIG = re.compile(r"[0-9a-f]{64}\Z")


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


def refusal(error: CodecError) -> WireRefusal:
    """The refusal a frame error (raised by :func:`parse_frame`) closes the connection with."""
    close = error.details.get("close", int(CloseCode.MALFORMED))
    reason = error.details.get("rule", "malformed")
    return WireRefusal(code=CloseCode(int(close or CloseCode.MALFORMED)), reason=str(reason),
                       message=error.message)


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
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    capabilities: tuple[StrictStr, ...] = ()
    description: StrictStr = ""
    handlers: tuple[HandlerDoc, ...] = ()
    pending_policy: Literal["resend", "cancel"] = "resend"


class Hello(BaseModel):
    """The first frame of a connection (see the module's docstring).

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
            raise _bad("declaration", "the hello's declaration is not JSON") from exc
        found = strict.flaw(parsed, DEFAULT_MAX_DEPTH, strings=True)
        if found is not None:
            raise _bad("declaration", f"the hello's declaration cannot be read: {found[1]}")
        try:
            return Declaration.model_validate(parsed)
        except ValidationError as exc:
            raise _bad("declaration", f"the hello's declaration is invalid: {_first(exc)}") \
                from exc


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


def parse_frame(text: str | bytes, max_bytes: int = DEFAULT_MAX_FRAME_BYTES,
                max_depth: int = DEFAULT_MAX_DEPTH, max_batch: int = DEFAULT_MAX_BATCH) -> Frame:
    """Reads one frame an agent sent.

    An envelope of an ``envelope`` or ``batch`` frame that nests more than ``max_depth`` levels
    (itself the first) or holds a NaN, an infinity or a lone surrogate is not an error of the
    frame: it is set apart in :attr:`Envelopes.refused`, and the others go on.

    Raises:
        CodecError: the frame is binary, too large or a batch of more than ``max_batch``
            envelopes (``details["close"]`` 4413), not UTF-8, not
            JSON, nested too deep, holds NaN or Infinity outside its envelopes, is not an object,
            of an unknown type or lacks a field (4400), or a hello asks for another wire version
            (4426). ``details["rule"]`` names the problem.
    """
    raw = _load(text, max_bytes, max_depth)
    strings = strict.may_hold_lone_surrogates(raw[1])
    frame, kind = raw[0], raw[0].get("type")
    try:
        if kind in (FrameType.ENVELOPE, FrameType.BATCH):
            return _envelopes(frame, kind, max_depth, strings, max_batch)
        _check(strict.flaw(frame, max_depth, strings))
        if kind == FrameType.HELLO:
            hello = Hello.model_validate(frame)
            _check_hello(hello)
            return hello
        if kind == FrameType.HEARTBEAT:
            return Heartbeat.model_validate(frame)
        if kind == FrameType.GOODBYE:
            return Goodbye.model_validate(frame)
    except ValidationError as exc:
        raise _bad(str(kind), f"invalid {kind} frame: {_first(exc)}") from exc
    raise _bad("frame_type", f"unknown frame type {kind!r}: expected hello, envelope, batch, "
               "heartbeat or goodbye")


def _load(text: str | bytes, max_bytes: int, max_depth: int) -> tuple[dict[str, Any], str]:
    """The frame's JSON object (and its text), within the size limit, as UTF-8 and JSON."""
    if not isinstance(text, str):
        raise _bad("binary", "binary frames are not accepted: send JSON as text frames",
                   CloseCode.TOO_LARGE)
    if len(text) > max_bytes:  # at least a byte a character: too large, whatever it holds
        raise _bad("frame_size", f"a frame of {len(text)} characters or more exceeds the limit "
                   f"of {max_bytes} bytes", CloseCode.TOO_LARGE, size=len(text), limit=max_bytes)
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise _bad("utf8", f"the frame is not UTF-8 text: {exc.reason}") from None
    if size > max_bytes:
        raise _bad("frame_size", f"a frame of {size} bytes exceeds the limit of {max_bytes}",
                   CloseCode.TOO_LARGE, size=size, limit=max_bytes)
    try:
        raw = strict.loads_marked(text)
    except RecursionError:
        raise _bad("depth", f"the frame nests deeper than {max_depth} levels of objects and "
                   "arrays", limit=max_depth) from None
    except ValueError as exc:
        raise _bad("json", f"the frame is not JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise _bad("frame", f"a frame must be a JSON object, got {type(raw).__name__}")
    return raw, text


def _envelopes(frame: dict[str, Any], kind: str, max_depth: int, strings: bool,
               max_batch: int) -> Envelopes:
    key = "envelope" if kind == FrameType.ENVELOPE else "envelopes"
    rest = {k: v for k, v in frame.items() if k != key}
    _check(strict.flaw(rest, max_depth, strings))
    given = frame.get(key)
    if kind == FrameType.ENVELOPE and not isinstance(given, dict):
        raise _bad("envelope", "an envelope frame carries an object in 'envelope'")
    many = [given] if kind == FrameType.ENVELOPE else given
    if not isinstance(many, list) or not all(isinstance(e, dict) for e in many):
        raise _bad("batch", "a batch frame carries a list of objects in 'envelopes'")
    if len(many) > max_batch:
        raise _bad("batch_size", f"a batch of {len(many)} envelopes exceeds the limit of "
                   f"{max_batch}", CloseCode.TOO_LARGE, size=len(many), limit=max_batch)
    good: list[dict[str, Any]] = []
    refused: list[RefusedItem] = []
    for item in many:
        found = strict.flaw(item, max_depth, strings)
        if found is None:
            good.append(item)
            continue
        msg_id = item.get("msg_id")
        refused.append(RefusedItem(msg_id if isinstance(msg_id, str) else None,
                                   _bad(found[0], f"the envelope cannot travel: {found[1]}",
                                        limit=max_depth)))
    return Envelopes(items=tuple(good), refused=tuple(refused))


def _check(found: tuple[str, str] | None) -> None:
    if found is not None:
        raise _bad(found[0], f"the frame cannot be read: {found[1]}")


def _check_hello(hello: Hello) -> None:
    if hello.v != WIRE_VERSION:
        raise _bad("version", f"wire version {hello.v} is not spoken here (this gateway speaks "
                   f"{WIRE_VERSION})", CloseCode.UNSUPPORTED)
    if not _AGENT_ID.match(hello.agent_id):
        raise _bad("agent_id", "an agent ID is 1-128 letters, digits, '_', '-' or '.', starting "
                   f"with a letter or digit; got {hello.agent_id[:40]!r}")
    if not _NONCE.match(hello.nonce):
        raise _bad("nonce", "the nonce must be 32 lowercase hex digits (16 random bytes)")
    if not _SIG.match(hello.sig):
        raise _bad("sig", "the signature must be 64 lowercase hex digits (HMAC-SHA256)")


def _bad(rule: str, message: str, close: CloseCode = CloseCode.MALFORMED,
         **details: Detail) -> CodecError:
    return CodecError(message, details={"rule": rule, "close": int(close), **details})


def _first(exc: ValidationError) -> str:
    first = exc.errors(include_url=False)[0]
    where = ".".join(str(p) for p in first["loc"]) or "(frame)"
    return f"{where}: {first['msg']}"


# -- signing ------------------------------------------------------------------------------------


def agent_secret(master: bytes, agent_id: str) -> bytes:
    """An agent's signing secret: HMAC-SHA256(master key, ``"reach/principal/" + agent_id``),
    the same secret :meth:`reach.security.keys.Keyring.secret` gives every principal."""
    return hmac.new(master, PRINCIPAL_CONTEXT + agent_id.encode("utf-8"), hashlib.sha256).digest()


def hello_mac(secret: bytes, agent_id: str, ts: int, nonce: str, declaration: str) -> str:
    """The hello's signature: lowercase hex of HMAC-SHA256(secret, message), the message being
    ``"reach-hello/1\\n<agent_id>\\n<ts>\\n<nonce>\\n<declaration>"`` in UTF-8."""
    message = "\n".join((HELLO_CONTEXT, agent_id, str(ts), nonce, declaration))
    return hmac.new(secret, message.encode("utf-8"), hashlib.sha256).hexdigest()


def make_hello(agent_id: str, declaration: Declaration, secret: bytes, *, now_ms: int,
               nonce: str) -> dict[str, Any]:
    """A signed hello frame (as a JSON-ready object)."""
    text = declaration.model_dump_json(by_alias=True)
    return {"type": FrameType.HELLO.value, "v": WIRE_VERSION, "agent_id": agent_id,
            "ts": now_ms, "nonce": nonce, "declaration": text,
            "sig": hello_mac(secret, agent_id, now_ms, nonce, text)}


def hello_refusal(hello: Hello, secret: bytes, now_ms: int,
                  window_s: float = HELLO_WINDOW_S) -> WireRefusal | None:
    """Why a hello's signature is refused (``replay_window`` or ``bad_signature``), or None.

    The nonce's freshness is the caller's to check (it keeps the nonces it saw).
    """
    skew = abs(now_ms - hello.ts) / 1000
    if skew > window_s:
        return WireRefusal(code=CloseCode.BAD_SIGNATURE, reason="replay_window",
                           message=f"the hello was signed {skew:.0f} s from the gateway's "
                                   f"clock, outside the {window_s:.0f} s window")
    expected = hello_mac(secret, hello.agent_id, hello.ts, hello.nonce, hello.declaration)
    if not hmac.compare_digest(expected, hello.sig):
        return WireRefusal(code=CloseCode.BAD_SIGNATURE, reason="bad_signature",
                           message=f"the hello of {hello.agent_id!r} is not signed with its "
                                   "secret from this deployment's keyring")
    return None


# -- envelopes and frames -------------------------------------------------------------------------


def envelope_json(env: Envelope) -> dict[str, Any]:
    """An envelope as the JSON object the wire carries (every field, absent ones null).

    Built field by field (what ``model_dump(mode="json")`` gives, several times faster); a
    payload value with no JSON form fails when the frame is encoded.
    """
    info = env.error_info
    return {"msg_id": env.msg_id, "msg_type": env.msg_type.value, "sender": env.sender,
            "receiver": env.receiver, "payload": env.payload,
            "payload_schema": env.payload_schema, "request_id": env.request_id,
            "timeout_ms": env.timeout_ms, "deadline": env.deadline, "trace_id": env.trace_id,
            "session_id": env.session_id, "hops": list(env.hops),
            "error_info": None if info is None else info.model_dump(mode="json"),
            "timestamp": env.timestamp}


def read_envelope(item: Mapping[str, Any]) -> Envelope:
    """An envelope from its JSON object (absent optional fields take their defaults).

    Raises:
        ProtocolError: a field is missing or mistyped, or a rule of the envelope is broken.
    """
    return Envelope.parse(item)


def envelopes_frame(items: list[dict[str, Any]]) -> str:
    """The text of an ``envelope`` frame (one item) or a ``batch`` frame (several): strict JSON.

    Raises:
        ValueError: an item holds a NaN, an infinity or a lone surrogate.
        TypeError: an item holds a value with no JSON form.
    """
    if len(items) == 1:
        return strict.dumps({"type": FrameType.ENVELOPE.value, "envelope": items[0]})
    return strict.dumps({"type": FrameType.BATCH.value, "envelopes": items})


def safe_envelopes_frame(items: list[dict[str, Any]],
                         ) -> tuple[str | None, list[dict[str, Any]]]:
    """:func:`envelopes_frame` of the items that have a strict JSON form (None if none has),
    and the items that have none (a payload holding bytes, a date, a NaN...)."""
    try:
        return envelopes_frame(items), []
    except (TypeError, ValueError):
        good, bad = [], []
        for item in items:
            try:
                strict.dumps(item)
                good.append(item)
            except (TypeError, ValueError):
                bad.append(item)
        return (envelopes_frame(good) if good else None), bad


def frame_text(frame: Mapping[str, Any]) -> str:
    """Any frame object as compact, strict JSON text (UTF-8 characters kept as they are).

    Raises:
        ValueError: it holds a NaN, an infinity or a lone surrogate.
        TypeError: it holds a value with no JSON form.
    """
    return strict.dumps(frame)


def error_frame(msg_id: str | None, code: str, message: str) -> dict[str, Any]:
    """An ``error`` frame: the envelope ``msg_id`` (if it could be read) was refused."""
    frame: dict[str, Any] = {"type": FrameType.ERROR.value, "code": code, "message": message}
    if msg_id is not None:
        frame["msg_id"] = msg_id
    return frame


def envelope_schema() -> dict[str, Any]:
    """The JSON Schema of an envelope on the wire (``docs/envelope.schema.json``), generated
    from :class:`reach.protocol.Envelope`."""
    schema = Envelope.model_json_schema(mode="validation")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return schema


def envelope_schema_text() -> str:
    """``docs/envelope.schema.json`` as committed: :func:`envelope_schema`, indented, keys
    sorted. Regenerate it with ``python -m reach.remote.wire > docs/envelope.schema.json``."""
    return json.dumps(envelope_schema(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


if __name__ == "__main__":  # pragma: no cover - the generator of the committed schema
    import sys

    sys.stdout.write(envelope_schema_text())


__all__ = [
    "Attached", "CAPABILITY_PREFIX", "CONNECT_PATH", "DEFAULT_MAX_BATCH", "DEFAULT_MAX_DEPTH",
    "DEFAULT_MAX_FRAME_BYTES", "FINAL_CODES", "HELLO_CONTEXT", "HELLO_WINDOW_S",
    "PRINCIPAL_CONTEXT", "WIRE_VERSION", "CloseCode", "Declaration", "Envelopes", "Frame",
    "FrameType", "Goodbye", "HandlerDoc", "Heartbeat", "Hello", "RefusedItem", "WireRefusal",
    "agent_secret", "envelope_json", "envelope_schema", "envelope_schema_text",
    "envelopes_frame", "error_frame", "frame_text", "hello_mac", "hello_refusal", "make_hello",
    "parse_frame", "read_envelope", "refusal", "safe_envelopes_frame",
]
