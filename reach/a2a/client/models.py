"""The payloads reach agents send to, and get back from, a remote A2A agent's proxy.

A proxy (:mod:`reach.a2a.client.proxy`) reads :class:`A2AMessage` (``a2a.message@1.0``) and
answers :class:`A2AReply` (``a2a.reply@1.0``); when the remote card says it streams, it also reads
:class:`A2AStreamRequest` (``a2a.stream@1.0``) and streams :class:`A2AEvent` chunks
(``a2a.event@1.0``), one per A2A stream event. Importing this module registers the four schemas.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict

from reach.schemas import schema


class A2AState(StrEnum):
    """An A2A task's state (``TASK_STATE_*`` of the A2A 1.0 proto), as a reply carries it."""

    SUBMITTED = "submitted"
    WORKING = "working"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELED = "canceled"
    INPUT_REQUIRED = "input_required"
    REJECTED = "rejected"
    AUTH_REQUIRED = "auth_required"
    UNKNOWN = "unknown"
    """``TASK_STATE_UNSPECIFIED``, or a state this version of reach does not know."""


class A2AEventKind(StrEnum):
    """Which of the four A2A stream events an :class:`A2AEvent` carries."""

    TASK = "task"
    MESSAGE = "message"
    STATUS = "status"
    ARTIFACT = "artifact"


@schema("a2a.message@1.0")
class A2AMessage(BaseModel):
    """A message for a remote A2A agent: a text part, a data part, or both.

    Attributes:
        text: Sent as a text part (none when empty).
        data: Sent as a data part (none when None).
        metadata: The A2A message's metadata; reach adds ``{"reach": {"trace_id": ...,
            "sender": ...}}`` to it (the caller's trace ID and agent ID).
        context_id: The A2A conversation to continue (default: the reach session's ID, if any).
        task_id: The A2A task to continue (one that asked for input).
    """

    model_config = ConfigDict(frozen=True)

    text: str = ""
    data: dict[str, Any] | None = None
    metadata: dict[str, Any] = {}
    context_id: str = ""
    task_id: str = ""


@schema("a2a.stream@1.0")
class A2AStreamRequest(A2AMessage):
    """The same message, asking for a streamed reply (``SendStreamingMessage``)."""


@schema("a2a.reply@1.0")
class A2AReply(BaseModel):
    """What a remote A2A agent answered.

    Attributes:
        text: The text parts of the answer (the task's artifacts, else its status message, or
            the message the agent answered with), joined by newlines.
        data: The first data part that is a JSON object (a data part holding another JSON value
            comes as ``{"value": ...}``).
        state: The task's state: ``completed`` for a plain message answer, or
            ``input_required`` / ``auth_required`` when the agent waits for the caller (send
            again with ``task_id``); failures arrive as errors, not replies.
        task_id: The A2A task's ID (empty for a plain message answer).
        context_id: The A2A conversation's ID.
        metadata: The answer's metadata.
    """

    model_config = ConfigDict(frozen=True)

    text: str = ""
    data: dict[str, Any] | None = None
    state: A2AState = A2AState.COMPLETED
    task_id: str = ""
    context_id: str = ""
    metadata: dict[str, Any] = {}


@schema("a2a.event@1.0")
class A2AEvent(BaseModel):
    """One event of a remote agent's stream.

    Attributes:
        kind: Task, message, status update or artifact update.
        text: Its text parts, joined by newlines.
        data: Its first data part that is a JSON object.
        state: The task's state as of this event.
        task_id: The A2A task's ID.
        context_id: The A2A conversation's ID.
        artifact_id: For an artifact update, the artifact's ID.
        append: For an artifact update, whether it extends the artifact's earlier chunks.
        last_chunk: For an artifact update, whether it is the artifact's last chunk.
    """

    model_config = ConfigDict(frozen=True)

    kind: A2AEventKind
    text: str = ""
    data: dict[str, Any] | None = None
    state: A2AState = A2AState.WORKING
    task_id: str = ""
    context_id: str = ""
    artifact_id: str = ""
    append: bool = False
    last_chunk: bool = False


__all__ = ["A2AEvent", "A2AEventKind", "A2AMessage", "A2AReply", "A2AState", "A2AStreamRequest"]
