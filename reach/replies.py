"""What a caller gets back: a :class:`Reply`, the handler's model with its envelope at hand, and
a task's :class:`~reach.records.TaskResult` with its value read the same way.

A reply's payload is read as the model registered for its schema (any minor version of its major
reads any other: unknown fields are ignored, missing optional ones defaulted), or as the model the
caller names with ``returns=``; a plain dict when no model is registered for it. What crosses
processes is the payload and its schema; the reading happens where the reply arrives.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from reach.errors import InvalidPayload, ReachError, SchemaIncompatible, UnknownSchema
from reach.protocol import Envelope
from reach.records import TaskResult
from reach.schemas import SchemaRef, schema_registry

V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class Reply(Generic[V]):
    """A reply: the handler's result, typed, and the envelope that carried it.

    Attributes:
        value: The reply's payload as the model registered for its schema (or the model the
            caller named with ``returns=``); a plain dict when no model is registered for it.
        envelope: The reply envelope (trace ID, sender, schema, timestamps...).
    """

    value: V
    envelope: Envelope


def read_reply(env: Envelope, returns: type[BaseModel] | None = None) -> Reply[Any]:
    """A reply envelope as a :class:`Reply`: its payload read as ``returns``, else as the model
    registered for its schema (any minor of the same major), else as a dict.

    Raises:
        InvalidPayload: the payload does not validate as the model.
        SchemaIncompatible: ``returns`` reads another schema (name or major).
    """
    return Reply(read_value(env.payload, env.payload_schema, returns), env)


def read_task_result(result: TaskResult[Any],
                     returns: type[BaseModel] | None = None) -> TaskResult[Any]:
    """A task's result as its supervisor sent it (its value a payload), with the value read:
    a completed task's as a reply's is (see :func:`read_reply`), a degraded task's partial
    result as ``returns`` when given (a partial result declares no schema of its own: it is
    read as the reply it stands for), else left a dict.

    Raises:
        InvalidPayload: the value does not validate as the model.
        SchemaIncompatible: ``returns`` reads another schema than the reply's (name or major).
    """
    value = result.value
    if not isinstance(value, Mapping):  # no value, or one read already
        return result
    if result.partial:
        if returns is None:
            return result
        return replace(result, value=read_value(value, schema_registry.ref_of(returns), returns))
    return replace(result, value=read_value(value, result.schema, returns))


def read_value(payload: Mapping[str, Any], declared: str | None,
               returns: type[BaseModel] | None = None) -> Any:
    """A payload declared as ``declared``, read as ``returns``, else as the model registered for
    its schema (any minor of the same major), else as a dict.

    Raises:
        InvalidPayload: the payload does not validate as the model.
        SchemaIncompatible: ``returns`` reads another schema (name or major).
    """
    if returns is not None:
        return schema_registry.read(payload, declared or "", schema_registry.ref_of(returns))
    reader_ref = _reader_of(declared)
    if reader_ref is None:
        return dict(payload)
    try:
        return schema_registry.read(payload, declared or "", reader_ref)
    except (InvalidPayload, SchemaIncompatible):
        raise
    except UnknownSchema:  # pragma: no cover - a reader found above is registered
        return dict(payload)


def _reader_of(declared: str | None) -> str | None:
    """The registered ref that reads ``declared``: itself, or the newest minor of its major."""
    if not declared:
        return None
    cached = _READERS.get(declared)
    if cached is not None or declared in _READERS:
        return cached
    try:
        got = SchemaRef.parse(declared)
    except ReachError:
        return None
    same = [SchemaRef.parse(r) for r in schema_registry.refs()]
    fits = sorted((r for r in same if r.name == got.name and r.major == got.major),
                  key=lambda r: r.minor)
    found = str(got) if got in fits else (str(fits[-1]) if fits else None)
    if found is not None:  # an unknown schema may be registered later: not cached
        _READERS[declared] = found
    return found


# Declared ref -> the registered ref that reads it (schemas are registered, never removed).
_READERS: dict[str, str | None] = {}


__all__ = ["Reply", "read_reply", "read_task_result", "read_value"]
