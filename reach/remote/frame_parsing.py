"""Reading a frame an agent sent: within the limits, as strict JSON, of a known type and shape.

An envelope that cannot travel (nested too deep, a NaN, a lone surrogate) is set apart alone;
anything else wrong with a frame is a :class:`~reach.errors.CodecError` whose details name the
rule broken and the close code (:func:`refusal` makes the connection's refusal of it).
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import ValidationError

from reach import strict_json as strict
from reach.errors import CodecError
from reach.remote.frames import (
    DEFAULT_MAX_BATCH,
    DEFAULT_MAX_DEPTH,
    DEFAULT_MAX_FRAME_BYTES,
    WIRE_VERSION,
    CloseCode,
    Envelopes,
    Frame,
    FrameType,
    Goodbye,
    Heartbeat,
    Hello,
    RefusedItem,
    WireRefusal,
    first_problem,
    frame_error,
)

_AGENT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}\Z")
_NONCE = re.compile(r"[0-9a-f]{32}\Z")
_SIG = re.compile(r"[0-9a-f]{64}\Z")


def refusal(error: CodecError) -> WireRefusal:
    """The refusal a frame error (raised by :func:`parse_frame`) closes the connection with."""
    close = error.details.get("close", int(CloseCode.MALFORMED))
    reason = error.details.get("rule", "malformed")
    return WireRefusal(code=CloseCode(int(close or CloseCode.MALFORMED)), reason=str(reason),
                       message=error.message)


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
        raise frame_error(str(kind), f"invalid {kind} frame: {first_problem(exc)}") from exc
    raise frame_error("frame_type", f"unknown frame type {kind!r}: expected hello, envelope, "
                      "batch, heartbeat or goodbye")


def _load(text: str | bytes, max_bytes: int, max_depth: int) -> tuple[dict[str, Any], str]:
    """The frame's JSON object (and its text), within the size limit, as UTF-8 and JSON."""
    if not isinstance(text, str):
        raise frame_error("binary", "binary frames are not accepted: send JSON as text frames",
                          CloseCode.TOO_LARGE)
    if len(text) > max_bytes:  # at least a byte a character: too large, whatever it holds
        raise frame_error("frame_size", f"a frame of {len(text)} characters or more exceeds the "
                          f"limit of {max_bytes} bytes", CloseCode.TOO_LARGE, size=len(text),
                          limit=max_bytes)
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise frame_error("utf8", f"the frame is not UTF-8 text: {exc.reason}") from None
    if size > max_bytes:
        raise frame_error("frame_size", f"a frame of {size} bytes exceeds the limit of "
                          f"{max_bytes}", CloseCode.TOO_LARGE, size=size, limit=max_bytes)
    try:
        raw = strict.loads_marked(text)
    except RecursionError:
        raise frame_error("depth", f"the frame nests deeper than {max_depth} levels of objects "
                          "and arrays", limit=max_depth) from None
    except ValueError as exc:
        raise frame_error("json", f"the frame is not JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise frame_error("frame", f"a frame must be a JSON object, got {type(raw).__name__}")
    return raw, text


def _envelopes(frame: dict[str, Any], kind: str, max_depth: int, strings: bool,
               max_batch: int) -> Envelopes:
    key = "envelope" if kind == FrameType.ENVELOPE else "envelopes"
    rest = {k: v for k, v in frame.items() if k != key}
    _check(strict.flaw(rest, max_depth, strings))
    given = frame.get(key)
    if kind == FrameType.ENVELOPE and not isinstance(given, dict):
        raise frame_error("envelope", "an envelope frame carries an object in 'envelope'")
    many = [given] if kind == FrameType.ENVELOPE else given
    if not isinstance(many, list) or not all(isinstance(e, dict) for e in many):
        raise frame_error("batch", "a batch frame carries a list of objects in 'envelopes'")
    if len(many) > max_batch:
        raise frame_error("batch_size", f"a batch of {len(many)} envelopes exceeds the limit of "
                          f"{max_batch}", CloseCode.TOO_LARGE, size=len(many), limit=max_batch)
    good: list[dict[str, Any]] = []
    refused: list[RefusedItem] = []
    for item in many:
        found = strict.flaw(item, max_depth, strings)
        if found is None:
            good.append(item)
            continue
        msg_id = item.get("msg_id")
        refused.append(RefusedItem(
            msg_id if isinstance(msg_id, str) else None,
            frame_error(found[0], f"the envelope cannot travel: {found[1]}", limit=max_depth)))
    return Envelopes(items=tuple(good), refused=tuple(refused))


def _check(found: tuple[str, str] | None) -> None:
    if found is not None:
        raise frame_error(found[0], f"the frame cannot be read: {found[1]}")


def _check_hello(hello: Hello) -> None:
    if hello.v != WIRE_VERSION:
        raise frame_error("version", f"wire version {hello.v} is not spoken here (this gateway "
                          f"speaks {WIRE_VERSION})", CloseCode.UNSUPPORTED)
    if not _AGENT_ID.match(hello.agent_id):
        raise frame_error("agent_id", "an agent ID is 1-128 letters, digits, '_', '-' or '.', "
                          f"starting with a letter or digit; got {hello.agent_id[:40]!r}")
    if not _NONCE.match(hello.nonce):
        raise frame_error("nonce", "the nonce must be 32 lowercase hex digits (16 random bytes)")
    if not _SIG.match(hello.sig):
        raise frame_error("sig", "the signature must be 64 lowercase hex digits (HMAC-SHA256)")
