"""How A2A message parts become a reach request, and a reach reply becomes parts. Pure.

A message to an agent becomes one request to one of its handlers:

- a **data part** (one per message; a JSON object) is the payload. Its schema is the one named
  by the part's metadata or the message's (``{"schema": "order.query@1.0"}``), else the schema of
  the agent's one handler that does not read text. It is validated against that handler's JSON
  schema before it enters reach (the agent validates again, with its model). Text parts beside a
  data part are kept in the task's history only.
- **text parts** alone (joined by newlines) go to the agent's handler of :class:`reach.Text`
  (``reach.text@1.x``), as ``{"text": ...}``.
- file parts (raw bytes or URLs), or text for an agent that reads no text, are refused with
  ContentTypeNotSupported (-32005); an ambiguous or invalid payload with InvalidParams (-32602).

A reply (or each chunk of a streamed one) becomes a data part holding its payload, with its
schema in the part's metadata, preceded by a text part when it is :class:`reach.Text`. A reply
that is not JSON (a NaN, an Infinity) becomes no part: it is a CodecError, which fails the task.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from a2a.types.a2a_pb2 import Message, Part
from a2a.utils.errors import ContentTypeNotSupportedError, InvalidParamsError

from reach.a2a.server._proto import to_python, to_value
from reach.a2a.server.cards import JSON_MODE, SCHEMA_KEY, TEXT_MODE
from reach.a2a.server.catalog import HandlerInfo
from reach.a2a.server.errors import error_data
from reach.agent import reads_text
from reach.errors import ReachError, SchemaError, SchemaIncompatible


@dataclass(frozen=True, slots=True)
class Call:
    """What one A2A message asks of an agent.

    Attributes:
        handler: The handler that reads it.
        payload: The request's payload.
        schema: The payload's declared schema (the one the client named, else the handler's).
    """

    handler: HandlerInfo
    payload: dict[str, Any]
    schema: str


def _json(value: Any) -> Any:
    """A protobuf Value's Python form, with whole numbers as ints again (protobuf keeps every
    number as a double)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if isinstance(value, dict):
        return {k: _json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json(v) for v in value]
    return value


def _metadata(part_or_message: Part | Message) -> dict[str, Any]:
    if not part_or_message.HasField("metadata"):
        return {}
    return dict(to_python(part_or_message.metadata))


def named_schema(message: Message) -> str | None:
    """The schema a message names, in a data part's metadata or its own, if any."""
    for part in message.parts:
        if part.HasField("data"):
            named = _metadata(part).get(SCHEMA_KEY)
            if isinstance(named, str):
                return named
    named = _metadata(message).get(SCHEMA_KEY)
    return named if isinstance(named, str) else None


def read_message(message: Message, handlers: Sequence[HandlerInfo], agent: str) -> Call:
    """The request a message makes of an agent with these handlers (see the module docstring).

    Args:
        message: The A2A message.
        handlers: The agent's handlers.
        agent: The agent's ID, or the capability it was picked by (for error messages).

    Raises:
        ContentTypeNotSupportedError: file parts, or text for an agent that reads no text.
        InvalidParamsError: no parts, several data parts, a data part that is not an object,
            a schema the agent does not read or cannot tell, or a payload that does not
            validate (reach's error code, severity and suggestion in its data).
    """
    if any(p.HasField("raw") or p.HasField("url") for p in message.parts):
        raise ContentTypeNotSupportedError(
            f"{agent} reads data parts ({JSON_MODE}) and text parts ({TEXT_MODE}), not files")
    data = [p for p in message.parts if p.HasField("data")]
    texts = [p.text for p in message.parts if p.HasField("text")]
    if len(data) > 1:
        raise InvalidParamsError("send one data part per message: it is the request's payload")
    try:
        named = named_schema(message)
        if data:
            return _data_call(_json(to_python(data[0].data)), named, handlers, agent)
        if texts:
            return _text_call("\n".join(texts), named, handlers, agent)
    except ReachError as exc:
        raise InvalidParamsError(exc.message, data=error_data(exc)) from exc
    raise InvalidParamsError("the message has no data or text part to send")


def _data_call(payload: Any, named: str | None, handlers: Sequence[HandlerInfo],
               agent: str) -> Call:
    if not isinstance(payload, dict):
        raise InvalidParamsError(f"a data part must hold a JSON object, not {type(payload)!r}")
    if named is not None:
        handler = _reader_of(named, handlers, agent)
    else:
        candidates = [h for h in handlers if not h.reads_text] or [
            h for h in handlers if h.reads_text]
        if len(candidates) != 1:
            reads = ", ".join(h.schema for h in candidates)
            why = (f"{agent} reads several schemas ({reads}): name one in the message "
                   f'metadata, {{"{SCHEMA_KEY}": "<schema>"}}' if candidates else
                   f"{agent} has no handler the gateway knows of (its host did not answer)")
            raise SchemaError(why, suggestion="see the schemas in the agent's card",
                              details={"agent": agent, "reads": reads})
        handler = candidates[0]
    handler.check(payload)
    return Call(handler, payload, named or handler.schema)


def _text_call(text: str, named: str | None, handlers: Sequence[HandlerInfo],
               agent: str) -> Call:
    if named is not None and not reads_text(named):
        return _data_call({"text": text}, named, handlers, agent)
    readers = [h for h in handlers if h.reads_text]
    if not readers:
        reads = ", ".join(h.schema for h in handlers) or "nothing"
        raise ContentTypeNotSupportedError(
            f"{agent} reads no text: send a data part ({JSON_MODE}) of one of: {reads}")
    return Call(readers[0], {"text": text}, named or readers[0].schema)


def _reader_of(named: str, handlers: Sequence[HandlerInfo], agent: str) -> HandlerInfo:
    for handler in handlers:
        if handler.reads(named):
            return handler
    reads = ", ".join(h.schema for h in handlers) or "nothing"
    raise SchemaIncompatible(f"{agent} has no handler for {named}; it reads {reads}",
                             suggestion="name a schema the agent reads (see its card)",
                             details={"declared": named, "reads": reads})


def reply_parts(payload: Mapping[str, Any], schema: str | None) -> list[Part]:
    """The parts of a reply (or of one chunk of a streamed reply).

    Args:
        payload: Its payload.
        schema: Its schema, if known (text replies also become a text part).

    Raises:
        CodecError: the payload is not JSON (a NaN or an Infinity, say: an agent's reply is
            checked by its model, which takes them, but A2A carries JSON only).
    """
    what = f"the agent's reply ({schema})" if schema else "the agent's reply"
    data = Part(data=to_value(dict(payload), what), media_type=JSON_MODE)
    if schema:
        data.metadata.update({SCHEMA_KEY: schema})
    text = payload.get("text")
    if schema and reads_text(schema) and isinstance(text, str):
        return [Part(text=text, media_type=TEXT_MODE), data]
    return [data]


__all__ = ["Call", "named_schema", "read_message", "reply_parts"]
