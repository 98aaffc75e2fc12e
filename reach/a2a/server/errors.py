"""How reach's errors reach an A2A client: translated here, in one place.

A request the gateway refuses before any task exists gets a JSON-RPC error (built by the SDK):

==============================================  ==========================================
reach error                                     A2A error
==============================================  ==========================================
InvalidPayload, SchemaError (and subclasses)    InvalidParams (-32602)
CodecError (a value of the request that is      InvalidParams (-32602)
not JSON)
AgentNotFound, NoCapableAgent                   InvalidParams (-32602): no such agent or
                                                capability
TaskNotFound                                    TaskNotFound (-32001)
any other                                       Internal (-32603), see :func:`internal_error`
==============================================  ==========================================

A -32603 is reach's own fault, never the client's, and it says nothing of reach's insides: its
message gives an error ID, which the gateway's log (``reach.a2a.server.errors``) prints beside the
whole story (the traceback, or the reach error's own message), so that an operator finds it.

Its ``data`` (a ``google.rpc.ErrorInfo`` whose ``metadata`` the SDK client hands back as the
error's ``data``) carries reach's ``reach_code``, ``severity``, ``suggestion`` and each detail as
``details.<name>``, all strings. A reach error that ends a task that did start (an agent's
error, a timeout, an ACL refusal) is in the task instead: see :func:`error_message` and
:func:`error_doc`.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from a2a.types.a2a_pb2 import Message, Part, Role
from a2a.utils.errors import A2AError, InternalError, InvalidParamsError, TaskNotFoundError

from reach.a2a.server._proto import to_value
from reach.errors import (
    AgentNotFound,
    CodecError,
    ErrorInfo,
    NoCapableAgent,
    ReachError,
    SchemaError,
    TaskNotFound,
)
from reach.protocol import new_id

log = logging.getLogger("reach.a2a.server.errors")
#: The key of the error ID in a -32603's data.
ERROR_ID_KEY = "error_id"


def error_data(exc: ReachError) -> dict[str, str]:
    """A reach error's facts as the string map of a JSON-RPC error's data."""
    data = {"reach_code": exc.code, "severity": exc.severity.value,
            "suggestion": exc.suggestion}
    data.update({f"details.{k}": "" if v is None else str(v) for k, v in exc.details.items()})
    return data


def to_a2a(exc: ReachError) -> A2AError:
    """The A2A error a client gets for a reach error raised before a task exists."""
    data = error_data(exc)
    if isinstance(exc, SchemaError | CodecError | AgentNotFound | NoCapableAgent):
        return InvalidParamsError(exc.message, data=data)
    if isinstance(exc, TaskNotFound):
        return TaskNotFoundError(exc.message, data=data)
    return internal_error(exc)


def internal_error(cause: BaseException | str) -> InternalError:
    """The -32603 of a fault of reach's: an error ID for the client, and the cause in the log
    under that ID (the traceback of an exception; a reach error's code, severity and suggestion
    go to the client too, being reach's own words for what to do).

    Args:
        cause: What went wrong (an exception, or the words of an SDK error).
    """
    error_id = new_id()
    data = {ERROR_ID_KEY: error_id}
    if isinstance(cause, ReachError):
        data.update({"reach_code": cause.code, "severity": cause.severity.value,
                     "suggestion": cause.suggestion})
    if isinstance(cause, BaseException):
        log.error("error ID %s: %s", error_id, cause, exc_info=cause)
    else:
        log.error("error ID %s: %s", error_id, cause)
    return InternalError(
        f"reach failed to answer this call (error ID {error_id}: the gateway's operator finds "
        "what happened in its log under that ID)", data=data)


def is_screened(data: Any) -> bool:
    """Whether an error's data is that of :func:`internal_error` (an error ID, no internals)."""
    return isinstance(data, dict) and ERROR_ID_KEY in data


def error_doc(info: ErrorInfo) -> dict[str, Any]:
    """A reach error as JSON (``code``, ``reason``, ``severity``, ``suggestion``, ``details``):
    in a task's metadata (``reach.error``) and in the data part of its status message. A detail
    JSON cannot hold (a NaN, an Infinity) is written as its name (``"nan"``, ``"inf"``)."""
    doc = info.model_dump(mode="json")
    doc["details"] = {k: str(v) if isinstance(v, float) and not math.isfinite(v) else v
                      for k, v in doc["details"].items()}
    return doc


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


__all__ = ["ERROR_ID_KEY", "error_data", "error_doc", "error_message", "internal_error",
           "is_screened", "to_a2a"]
