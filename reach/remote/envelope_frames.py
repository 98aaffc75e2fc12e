"""Envelopes as the wire carries them: an envelope's JSON object, the text of ``envelope`` and
``batch`` frames (strict JSON), ``error`` frames, and the envelope's JSON Schema.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from reach import strict_json as strict
from reach.protocol import Envelope
from reach.remote.frames import FrameType


def envelope_json(env: Envelope) -> dict[str, Any]:
    """An envelope as the JSON object the wire carries (every field, absent ones null; the
    trace context, ``span_id`` and ``trace_flags``, only when it has a span ID, so that a peer
    that knows no trace context reads an untraced envelope as before).

    Built field by field (what ``model_dump(mode="json")`` gives, several times faster); a
    payload value with no JSON form fails when the frame is encoded.
    """
    info = env.error_info
    item = {"msg_id": env.msg_id, "msg_type": env.msg_type.value, "sender": env.sender,
            "receiver": env.receiver, "payload": env.payload,
            "payload_schema": env.payload_schema, "request_id": env.request_id,
            "timeout_ms": env.timeout_ms, "deadline": env.deadline, "trace_id": env.trace_id,
            "session_id": env.session_id, "hops": list(env.hops),
            "error_info": None if info is None else info.model_dump(mode="json"),
            "timestamp": env.timestamp}
    if env.span_id is not None:
        item["span_id"] = env.span_id
        item["trace_flags"] = env.trace_flags
    return item


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
