"""How reach's errors reach an A2A client: translated here, in one place. Pure.

A request the gateway refuses before any task exists gets a JSON-RPC error (built by the SDK):

==============================================  ==========================================
reach error                                     A2A error
==============================================  ==========================================
InvalidPayload, SchemaError (and subclasses)    InvalidParams (-32602)
AgentNotFound, NoCapableAgent                   InvalidParams (-32602): no such agent or
                                                capability
TaskNotFound                                    TaskNotFound (-32001)
any other                                       Internal (-32603)
==============================================  ==========================================

Its ``data`` (a ``google.rpc.ErrorInfo`` whose ``metadata`` the SDK client hands back as the
error's ``data``) carries reach's ``reach_code``, ``severity``, ``suggestion`` and each detail as
``details.<name>``, all strings. A reach error that ends a task that did start (an agent's
error, a timeout, an ACL refusal) is in the task instead: see :func:`error_message` and
:func:`error_doc`.
"""

from __future__ import annotations

from typing import Any

from a2a.types.a2a_pb2 import Message, Part, Role
from a2a.utils.errors import A2AError, InternalError, InvalidParamsError, TaskNotFoundError

from reach.errors import (
    AgentNotFound,
    ErrorInfo,
    NoCapableAgent,
    ReachError,
    SchemaError,
    TaskNotFound,
)
from reach.gateway._proto import to_value
from reach.protocol import new_id


def error_data(exc: ReachError) -> dict[str, str]:
    """A reach error's facts as the string map of a JSON-RPC error's data."""
    data = {"reach_code": exc.code, "severity": exc.severity.value,
            "suggestion": exc.suggestion}
    data.update({f"details.{k}": "" if v is None else str(v) for k, v in exc.details.items()})
    return data


def to_a2a(exc: ReachError) -> A2AError:
    """The A2A error a client gets for a reach error raised before a task exists."""
    data = error_data(exc)
    if isinstance(exc, SchemaError | AgentNotFound | NoCapableAgent):
        return InvalidParamsError(exc.message, data=data)
    if isinstance(exc, TaskNotFound):
        return TaskNotFoundError(exc.message, data=data)
    return InternalError(exc.message, data=data)


def error_doc(info: ErrorInfo) -> dict[str, Any]:
    """A reach error as JSON (``code``, ``reason``, ``severity``, ``suggestion``, ``details``):
    in a task's metadata (``reach.error``) and in the data part of its status message."""
    return info.model_dump(mode="json")


def error_message(info: ErrorInfo, task_id: str, context_id: str, *,
                  lead: str = "") -> Message:
    """The status message of a task a reach error ended: a text part that says what went wrong
    (and what to do), and a data part with the error as JSON."""
    words = " ".join(w for w in (lead, info.reason, info.suggestion) if w)
    return Message(
        message_id=new_id(), role=Role.ROLE_AGENT, task_id=task_id, context_id=context_id,
        parts=[Part(text=words, media_type="text/plain"),
               Part(data=to_value(error_doc(info)),
                    media_type="application/json")])


__all__ = ["error_data", "error_doc", "error_message", "to_a2a"]
