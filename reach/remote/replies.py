"""What a remote agent's reply must be: the reply its declared handler could give.

A local handler's return cannot stray from its declaration: the runner labels it with the
handler's ``returns=`` schema (or ``reach.ack@1.0`` for None), a model validates by being built,
and a stream is chunks then its end. A remote agent's reply is bytes from outside, so its host
checks the same against what the agent's hello declared for the handler of the request:

- a response of a handler that does not stream carries its declared ``returns`` schema (same
  name and major; any minor) or ``reach.ack@1.0``; one that streams answers with chunks (events)
  of its ``returns`` schema, then ``reach.stream.end@1.0``; a handler that declares no
  ``returns`` may answer with any schema, as a local one returning a model does;
- the payload validates as the model this process has registered for that schema, when it has
  one (the reply's own version, else the declared one): fields are checked as a local model's;
- an error is an error (the envelope's own rules hold it); nothing else answers a request.

A request for which the agent declared no handler can only be answered with an error by a
well-behaved agent; any other answer to it is held only to the payload check.
"""

from __future__ import annotations

from functools import lru_cache

from reach._runtime.runner import ACK_SCHEMA
from reach._runtime.transport import STREAM_END_SCHEMA
from reach.errors import ProtocolError, SchemaIncompatible, UnknownSchema
from reach.protocol import Envelope, MsgType
from reach.remote.wire import Declaration, HandlerDoc
from reach.schemas import SchemaRef, schema_registry


def handler_doc(declaration: Declaration, schema: str) -> HandlerDoc | None:
    """The declared handler that reads payloads of ``schema`` (same name and major), or None
    (also for a declared schema that is not a schema reference: it reads nothing)."""
    want = _ref(schema)
    for doc in declaration.handlers:
        try:
            got = _ref(doc.schema_ref)
        except ProtocolError:
            continue
        if (got.name, got.major) == (want.name, want.major):
            return doc
    return None


def check_reply(declaration: Declaration, request: Envelope, reply: Envelope) -> None:
    """Refuses a remote agent's answer to ``request`` that its handler could not have given
    (see the module's docstring); every refusal is fatal, as a local handler's bad return is.

    Raises:
        ProtocolError: the answer is neither a response, an event nor an error, or an event
            (a chunk) of a handler that does not stream (``details["rule"]``: ``reply_kind``).
        SchemaIncompatible: the reply's schema is not one its handler declares.
        SchemaError: the handler's declared ``returns`` is not a schema reference.
        InvalidPayload: the payload does not validate as its schema's registered model.
    """
    kind = reply.msg_type
    if kind is MsgType.ERROR:
        return
    if kind not in (MsgType.RESPONSE, MsgType.EVENT):
        raise _kind(f"a {kind.value} cannot answer request {request.msg_id}")
    doc = handler_doc(declaration, request.payload_schema or "")
    declared = None if doc is None else doc.returns
    if doc is not None:
        if kind is MsgType.EVENT and not doc.streaming:
            raise _kind(f"the handler of {doc.schema_ref} does not stream, yet sent a chunk")
        allowed = _allowed(doc, kind)
        if allowed and not any(_same(reply.payload_schema or "", a) for a in allowed):
            raise SchemaIncompatible(
                f"the reply to {request.msg_id} is {reply.payload_schema}, but the handler of "
                f"{doc.schema_ref} declares {' or '.join(allowed)}",
                suggestion="answer with the schema the hello declares for the handler",
                details={"declared": reply.payload_schema, "reader": allowed[0],
                         "request_id": request.msg_id})
    _validate(reply, declared)


def _allowed(doc: HandlerDoc, kind: MsgType) -> list[str]:
    """The schemas a handler may answer with in a ``kind`` envelope (empty: any)."""
    if doc.streaming and kind is MsgType.RESPONSE:
        return [STREAM_END_SCHEMA]
    if doc.returns is None:
        return []
    return [doc.returns] if kind is MsgType.EVENT else [doc.returns, ACK_SCHEMA]


def _same(schema: str, allowed: str) -> bool:
    got, want = _ref(schema), _ref(allowed)
    return (got.name, got.major) == (want.name, want.major)


@lru_cache(maxsize=4096)
def _ref(ref: str) -> SchemaRef:
    """A parsed schema reference (every reply is checked: parse each one once)."""
    return SchemaRef.parse(ref)


def _validate(reply: Envelope, declared: str | None) -> None:
    """Validates the payload with the model registered for the reply's schema (or for the
    declared one, of the same name and major); nothing to check when neither is registered."""
    schema = reply.payload_schema or ""
    for reader in (schema, declared):
        if reader is None or not _same(schema, reader):
            continue
        try:
            schema_registry.model(reader)
        except UnknownSchema:
            continue
        schema_registry.read(reply.payload, schema, reader)
        return


def _kind(message: str) -> ProtocolError:
    return ProtocolError(message, suggestion="answer a request with a response (or a stream's "
                         "events and end) or an error", details={"rule": "reply_kind"})


__all__ = ["check_reply", "handler_doc"]
