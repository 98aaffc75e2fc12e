"""Pure mappings between a remote A2A agent and its reach proxy: no I/O, no clock.

- A card's name becomes the proxy's agent ID (:func:`agent_id_for`), its skills its capability
  tags (:func:`capabilities_for`): each skill's ID, then each of its tags, put through reach's
  own :func:`~policies.discovery.normalize_tag` (``Refunds Issue`` and ``refunds-issue`` both
  become ``refunds.issue``), without repeats, in card order.
- An :class:`~reach.a2a.client.models.A2AMessage` becomes a ``SendMessageRequest``
  (:func:`build_request`), carrying reach's trace ID and caller in the message's metadata.
- What comes back becomes an :class:`~reach.a2a.client.models.A2AReply` (:func:`reply_from`)
  or a stream's :class:`~reach.a2a.client.models.A2AEvent` (:func:`event_from`). (Failures
  become reach's errors in :mod:`reach.a2a.client.errors`.)
- Whether the remote is available is decided from probe outcomes by :func:`after_probe`.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from a2a.client.card_resolver import parse_agent_card
from a2a.helpers import get_data_parts, new_data_part
from a2a.types.a2a_pb2 import (
    AgentCard,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    Task,
    TaskState,
)

from policies.discovery import normalize_tag
from reach.a2a.client.models import A2AEvent, A2AEventKind, A2AMessage, A2AReply, A2AState
from reach.errors import ConfigError, ProtocolError

#: The metadata key under which reach adds ``{"trace_id", "sender"}`` to every message it sends
#: (the key reach's gateway answers its trace ID under, too).
METADATA_KEY = "reach"
#: Where an A2A 1.0 agent serves its card, under its base URL.
CARD_PATH = "/.well-known/agent-card.json"
#: The protocol bindings the proxy speaks (the a2a-sdk client's HTTP transports).
BINDINGS = ("JSONRPC", "HTTP+JSON")

_STATES = {
    TaskState.TASK_STATE_SUBMITTED: A2AState.SUBMITTED,
    TaskState.TASK_STATE_WORKING: A2AState.WORKING,
    TaskState.TASK_STATE_COMPLETED: A2AState.COMPLETED,
    TaskState.TASK_STATE_FAILED: A2AState.FAILED,
    TaskState.TASK_STATE_CANCELED: A2AState.CANCELED,
    TaskState.TASK_STATE_INPUT_REQUIRED: A2AState.INPUT_REQUIRED,
    TaskState.TASK_STATE_REJECTED: A2AState.REJECTED,
    TaskState.TASK_STATE_AUTH_REQUIRED: A2AState.AUTH_REQUIRED,
}
#: States in which a task is still at work (a reply in one of them is polled until it ends).
RUNNING = frozenset({A2AState.SUBMITTED, A2AState.WORKING})
_NOT_ID = re.compile(r"[^\w]+")

# -- the card ---------------------------------------------------------------------------------


def agent_id_for(card: AgentCard) -> str:
    """The proxy's agent ID: the card's name, lowercased, each run of other characters than
    letters, digits and ``_`` made one ``-`` (``Refund Agent`` -> ``refund-agent``)."""
    return _NOT_ID.sub("-", card.name.strip().lower()).strip("-_") or "a2a-agent"


def capabilities_for(card: AgentCard) -> tuple[str, ...]:
    """The proxy's capability tags: each skill's ID, then its tags, normalised, without repeats.

    Raises:
        ConfigError: the card has no skill that gives a tag (reach agents could not find it).
    """
    tags: dict[str, None] = {}
    for skill in card.skills:
        for raw in (skill.id, *skill.tags):
            tag = normalize_tag(raw)
            if tag and not tag.endswith("*"):
                tags.setdefault(tag)
    if not tags:
        raise ConfigError(f"the card of {card.name!r} lists no skill to make a capability of",
                          suggestion="pass capabilities= to connect",
                          details={"setting": "capabilities", "agent": card.name})
    return tuple(tags)


def parse_card(card: AgentCard | Mapping[str, Any] | bytes) -> AgentCard:
    """A card from its proto, its JSON object (as served) or its serialized proto.

    Raises:
        ProtocolError: it is not an A2A 1.0 card.
    """
    if isinstance(card, AgentCard):
        return card
    try:
        if isinstance(card, bytes):
            parsed = AgentCard()
            parsed.ParseFromString(card)
            return parsed
        return parse_agent_card(dict(card))
    except Exception as exc:  # protobuf's parse errors share no base class but Exception
        raise ProtocolError(f"not an A2A agent card: {exc}",
                            details={"rule": "a2a_card"}) from exc


def check_card(card: AgentCard) -> None:
    """Raises unless the proxy can call the agent of this card.

    Raises:
        ConfigError: no interface speaks a binding the proxy speaks (JSON-RPC, HTTP+JSON).
    """
    if not any(i.protocol_binding in BINDINGS for i in card.supported_interfaces):
        found = ", ".join(sorted({i.protocol_binding for i in card.supported_interfaces}))
        raise ConfigError(
            f"the card of {card.name!r} offers no JSON-RPC or HTTP+JSON interface "
            f"(it offers: {found or 'none'})",
            details={"setting": "url_or_card", "agent": card.name})


def card_location(url: str) -> tuple[str, str]:
    """Where to fetch a card: ``(base, relative path)`` for the a2a-sdk card resolver.

    A URL whose path ends in ``.json`` or holds ``/.well-known/`` is the card's own; any
    other is the agent's base URL, whose card is at :data:`CARD_PATH`.
    """
    path = urlsplit(url).path
    if path.endswith(".json") or "/.well-known/" in path:
        return url, "/"
    return url.rstrip("/"), CARD_PATH


def probe_url_for(card: AgentCard, card_url: str | None) -> str:
    """What the proxy fetches to learn that its remote answers: the card where it was read,
    else the well-known card at the origin of the card's first usable interface."""
    if card_url:
        base, relative = card_location(card_url)
        return base if relative == "/" else base + relative
    interface = next(i for i in card.supported_interfaces if i.protocol_binding in BINDINGS)
    parts = urlsplit(interface.url)
    return f"{parts.scheme}://{parts.netloc}{CARD_PATH}"


# -- messages and replies ---------------------------------------------------------------------


def build_request(message: A2AMessage, *, trace_id: str | None, sender: str,
                  session_id: str | None) -> SendMessageRequest:
    """The ``SendMessageRequest`` for a message, its metadata carrying reach's trace and
    caller (in the message's metadata and the request's)."""
    parts = []
    if message.text:
        parts.append(Part(text=message.text, media_type="text/plain"))
    if message.data is not None:
        parts.append(new_data_part(message.data, media_type="application/json"))
    ours = {"trace_id": trace_id or "", "sender": sender}
    meta = {**message.metadata, METADATA_KEY: ours}
    a2a_message = Message(role=Role.ROLE_USER, message_id=uuid.uuid4().hex, parts=parts,
                          context_id=message.context_id or session_id or "",
                          task_id=message.task_id)
    a2a_message.metadata.update(meta)
    request = SendMessageRequest(message=a2a_message)
    request.metadata.update({METADATA_KEY: ours})
    return request


def _content(parts: Iterable[Part]) -> tuple[list[str], list[dict[str, Any]]]:
    texts: list[str] = []
    datas: list[dict[str, Any]] = []
    for part in parts:
        which = part.WhichOneof("content")
        if which == "text":
            texts.append(part.text)
        elif which == "data":
            value = _ints(get_data_parts([part])[0])
            datas.append(value if isinstance(value, dict) else {"value": value})
        elif which == "url":
            texts.append(part.url)
    return texts, datas


def _ints(value: Any) -> Any:
    """JSON numbers as they were sent: protobuf holds every number as a double, so ``12``
    arrives as ``12.0``; integral values become ints again."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if isinstance(value, dict):
        return {k: _ints(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_ints(v) for v in value]
    return value


def _dict_of(struct: Any) -> dict[str, Any]:
    """A ``google.protobuf.Struct`` (metadata) as a dict, read as the SDK reads data parts."""
    part = Part()
    part.data.struct_value.CopyFrom(struct)
    value = _ints(get_data_parts([part])[0])
    return value if isinstance(value, dict) else {}


def state_of(state: int) -> A2AState:
    """The reach form of an A2A ``TaskState``."""
    return _STATES.get(TaskState.ValueType(state), A2AState.UNKNOWN)


def _task_content(task: Task) -> tuple[list[str], list[dict[str, Any]]]:
    texts: list[str] = []
    datas: list[dict[str, Any]] = []
    for artifact in task.artifacts:
        more_texts, more_datas = _content(artifact.parts)
        texts += more_texts
        datas += more_datas
    if not texts and not datas and task.status.HasField("message"):
        texts, datas = _content(task.status.message.parts)
    return texts, datas


def reply_from(response: StreamResponse | Task | Message) -> A2AReply:
    """The reply that a task or message (alone, or in a ``StreamResponse``) makes.

    Raises:
        ProtocolError: the response holds neither a task nor a message.
    """
    if isinstance(response, StreamResponse):
        which = response.WhichOneof("payload")
        if which not in ("task", "message"):
            raise ProtocolError(f"the remote agent answered a {which or 'nothing'}, not a task "
                                "or a message", details={"rule": "a2a_response"})
        response = response.task if which == "task" else response.message
    if isinstance(response, Message):
        texts, datas = _content(response.parts)
        return A2AReply(text="\n".join(texts), data=datas[0] if datas else None,
                        context_id=response.context_id, metadata=_dict_of(response.metadata))
    texts, datas = _task_content(response)
    return A2AReply(text="\n".join(texts), data=datas[0] if datas else None,
                    state=state_of(response.status.state), task_id=response.id,
                    context_id=response.context_id, metadata=_dict_of(response.metadata))


def event_from(response: StreamResponse, state: A2AState) -> A2AEvent:
    """The chunk a stream event makes; ``state`` is the task's state before it."""
    which = response.WhichOneof("payload")
    if which == "task":
        reply = reply_from(response.task)
        return A2AEvent(kind=A2AEventKind.TASK, text=reply.text, data=reply.data,
                        state=reply.state, task_id=reply.task_id, context_id=reply.context_id)
    if which == "message":
        reply = reply_from(response.message)
        return A2AEvent(kind=A2AEventKind.MESSAGE, text=reply.text, data=reply.data,
                        state=A2AState.COMPLETED, task_id=response.message.task_id,
                        context_id=reply.context_id)
    if which == "status_update":
        update = response.status_update
        texts, datas = _content(update.status.message.parts)
        return A2AEvent(kind=A2AEventKind.STATUS, text="\n".join(texts),
                        data=datas[0] if datas else None, state=state_of(update.status.state),
                        task_id=update.task_id, context_id=update.context_id)
    if which == "artifact_update":
        chunk = response.artifact_update
        texts, datas = _content(chunk.artifact.parts)
        return A2AEvent(kind=A2AEventKind.ARTIFACT, text="\n".join(texts),
                        data=datas[0] if datas else None, state=state,
                        task_id=chunk.task_id, context_id=chunk.context_id,
                        artifact_id=chunk.artifact.artifact_id, append=chunk.append,
                        last_chunk=chunk.last_chunk)
    raise ProtocolError("the remote agent streamed an empty event",
                        details={"rule": "a2a_response"})


# -- availability -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Health:
    """What the proxy believes of its remote.

    Attributes:
        available: Whether it is reported online.
        misses: Probes in a row that the remote did not answer.
    """

    available: bool = True
    misses: int = 0


def answered(status: int | None) -> bool:
    """Whether a probe's outcome shows a live remote: any HTTP answer below 500 (a 404 or 401
    is an answer too); None (no answer at all) and 5xx are misses."""
    return status is not None and status < 500


def after_probe(health: Health, ok: bool, misses_allowed: int) -> Health:
    """The belief after one probe: an answer makes the remote available at once; it becomes
    unavailable after ``misses_allowed`` misses in a row."""
    if ok:
        return Health(True, 0)
    misses = health.misses + 1
    return Health(health.available and misses < misses_allowed, misses)


__all__ = [
    "BINDINGS",
    "CARD_PATH",
    "RUNNING",
    "METADATA_KEY",
    "Health",
    "after_probe",
    "agent_id_for",
    "answered",
    "build_request",
    "capabilities_for",
    "card_location",
    "check_card",
    "event_from",
    "parse_card",
    "probe_url_for",
    "reply_from",
    "state_of",
]
