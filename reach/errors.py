"""The one exception tree of reach, and how an error travels between processes.

Every error reach raises is a :class:`ReachError`. Names say the cause::

    ReachError
    ├── ProtocolError            an envelope breaks a rule of the protocol
    │   ├── CodecError           bytes that are not a valid frame (malformed, oversize, bad UTF-8)
    │   ├── SchemaError          a payload schema problem
    │   │   ├── UnknownSchema        no registered model for `name@MAJOR.MINOR`
    │   │   ├── SchemaIncompatible   reader and payload differ in major version (fatal)
    │   │   ├── SchemaEvolutionError a minor version that removes or retypes a field
    │   │   └── InvalidPayload       the payload does not validate against its schema
    │   └── LoopDetected         a cycle in the hop chain, or a chain that is too long (fatal)
    ├── AgentNotFound            no agent has that ID
    ├── AgentAlreadyExists       an agent with that ID is already live
    ├── NoCapableAgent           no online agent holds the capability
    ├── AgentUnavailable         the agent's host is dead or unreachable (retryable)
    │   └── ConnectionEnded      a remote agent's own socket to the gateway closed
    ├── RequestTimeout           the deadline passed before a reply came (retryable)
    ├── PoisonMessage            a request killed its agent's process twice: quarantined (fatal)
    ├── RestartLimitExceeded     a supervisor gave up: restart intensity exceeded
    ├── InvalidTransition        a task state change the state machine does not allow
    ├── TaskCancelled            the task was cancelled before it finished
    ├── TaskNotFound             no task has that ID (never submitted, or long forgotten)
    ├── StorageError             the session store's database refused or failed
    ├── SessionRefused           a session's terms are not acceptable to the other side
    ├── SessionNotFound          no session has that ID
    ├── AuthError                a signature, replay window or ACL check failed
    ├── ConfigError              a setting of reach is invalid
    └── HandlerError             a handler raised something that is not a ReachError

Each class carries a stable ``code`` (``"schema_incompatible"``) and a default ``severity``
(``retryable`` | ``degradable`` | ``fatal``); an instance may override the severity and add a
``suggestion`` and ``details``. :meth:`ReachError.to_info` turns an error into the
:class:`ErrorInfo` an error envelope carries, and :func:`error_from_info` turns it back into the
same typed error in another process. Errors also pickle intact, since Ray pickles exceptions.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, StrictStr

#: The value types an error's ``details`` may hold (they must survive msgpack and pickle).
Detail = str | int | float | bool | None


class Severity(StrEnum):
    """How bad an error is, which decides what the task owner does with it."""

    RETRYABLE = "retryable"
    """Trying again, here or on another holder of the capability, may succeed."""
    DEGRADABLE = "degradable"
    """The work can finish with a partial result, marked as partial."""
    FATAL = "fatal"
    """Retrying cannot help: abort the task."""


class ErrorInfo(BaseModel):
    """What an error envelope says about the error: the wire form of a :class:`ReachError`.

    Attributes:
        code: Stable machine name of the error kind, e.g. ``"agent_not_found"``.
        reason: Human-readable account of what went wrong.
        severity: Retryable, degradable or fatal.
        suggestion: What the caller could do about it; may be empty.
        details: Extra typed facts (sizes, limits, rule names), primitives only.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    code: StrictStr
    reason: StrictStr
    severity: Severity
    suggestion: StrictStr = ""
    details: dict[StrictStr, Detail] = {}


class ReachError(Exception):
    """Root of every error reach raises.

    Args:
        message: What went wrong, in words a user can act on.
        severity: Overrides the class's default severity.
        suggestion: What the caller could do about it.
        details: Extra facts as primitives (kept through pickle and the wire).
        partial: For a degradable error, the partial result (a payload mapping); it travels in
            the error envelope's payload.
    """

    code: ClassVar[str] = "reach_error"
    default_severity: ClassVar[Severity] = Severity.FATAL

    def __init__(
        self,
        message: str,
        *,
        severity: Severity | None = None,
        suggestion: str = "",
        details: dict[str, Detail] | None = None,
        partial: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.severity = Severity(severity) if severity is not None else self.default_severity
        self.suggestion = suggestion
        self.details: dict[str, Detail] = dict(details or {})
        self.partial = partial

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "code" in cls.__dict__:
            _BY_CODE[cls.code] = cls

    def __reduce__(self) -> tuple[Any, ...]:
        # Keyword-only fields are not in self.args, so rebuild through the constructor explicitly.
        return (_rebuild, (type(self), self.message, self.severity, self.suggestion, self.details,
                           self.partial))

    def __eq__(self, other: object) -> bool:
        return (
            type(other) is type(self)
            and isinstance(other, ReachError)
            and (other.message, other.severity, other.suggestion, other.details)
            == (self.message, self.severity, self.suggestion, self.details)
        )

    def __hash__(self) -> int:
        return hash((type(self), self.message, self.severity))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, severity={self.severity.value!r})"

    def to_info(self) -> ErrorInfo:
        """Returns the :class:`ErrorInfo` an error envelope carries for this error."""
        return ErrorInfo(
            code=self.code,
            reason=self.message,
            severity=self.severity,
            suggestion=self.suggestion,
            details=self.details,
        )


_BY_CODE: dict[str, type[ReachError]] = {"reach_error": ReachError}


def _rebuild(  # noqa: PLR0917 - pickle calls it positionally
    cls: type[ReachError],
    message: str,
    severity: Severity,
    suggestion: str,
    details: dict[str, Detail],
    partial: dict[str, Any] | None = None,
) -> ReachError:
    err = ReachError.__new__(cls)
    ReachError.__init__(err, message, severity=severity, suggestion=suggestion, details=details,
                        partial=partial)
    return err


def error_from_info(info: ErrorInfo, partial: dict[str, Any] | None = None) -> ReachError:
    """Rebuilds the typed error that :meth:`ReachError.to_info` described.

    An unknown ``code`` (an error kind this process does not know) becomes a plain
    :class:`ReachError` whose ``details["code"]`` keeps the code, so nothing is lost.
    """
    cls = _BY_CODE.get(info.code)
    details = dict(info.details)
    if cls is None:
        cls = ReachError
        details.setdefault("code", info.code)
    return _rebuild(cls, info.reason, info.severity, info.suggestion, details, partial)


class ProtocolError(ReachError):
    """An envelope breaks a protocol rule; ``details["rule"]`` names the rule."""

    code = "protocol_error"


class CodecError(ProtocolError):
    """Bytes that are not a valid frame: malformed msgpack, oversize, or invalid UTF-8."""

    code = "codec_error"


class SchemaError(ProtocolError):
    """A payload schema problem."""

    code = "schema_error"


class UnknownSchema(SchemaError):
    """No model is registered for the named schema."""

    code = "unknown_schema"


class SchemaIncompatible(SchemaError):
    """The payload's schema and the reader's differ in major version."""

    code = "schema_incompatible"


class SchemaEvolutionError(SchemaError):
    """A new minor version removes or retypes a field, or adds a required one."""

    code = "schema_evolution"


class InvalidPayload(SchemaError):
    """The payload does not validate against its declared schema."""

    code = "invalid_payload"


class LoopDetected(ProtocolError):
    """The hop chain has a cycle or is longer than the configured maximum."""

    code = "loop_detected"


class AgentNotFound(ReachError):
    """No agent has the given ID."""

    code = "agent_not_found"


class AgentAlreadyExists(ReachError):
    """An agent with the given ID is already live; IDs are unique while an agent lives."""

    code = "agent_exists"


class NoCapableAgent(ReachError):
    """No online agent holds the capability; ``details`` name the closest matches."""

    code = "no_capable_agent"
    default_severity = Severity.RETRYABLE


class AgentUnavailable(ReachError):
    """The agent's host is dead, restarting or unreachable."""

    code = "agent_unavailable"
    default_severity = Severity.RETRYABLE


class ConnectionEnded(AgentUnavailable):
    """A remote agent's socket to the gateway closed (seen by the agent's own process):
    ``details["close"]`` is the close code, ``details["reason"]`` why."""

    code = "connection_ended"


class RequestTimeout(ReachError):
    """The request's deadline passed before a reply came."""

    code = "request_timeout"
    default_severity = Severity.RETRYABLE


class PoisonMessage(ReachError):
    """A request killed its agent's process (the agent died while the request was in its hands)
    in as many incarnations as the deployment's ``poison_after`` allows, with no request of its
    content answered by the agent in between: it is quarantined for that agent and never
    delivered to it again, nor is any request of the same content (the same receiver, payload
    schema and payload).

    ``details`` name the ``agent_id``, the ``request_id``, the ``kills`` (incarnations it
    killed) and the content's ``fingerprint``.
    """

    code = "poison"

    @property
    def kills(self) -> int:
        """How many incarnations of its agent the request killed."""
        kills = self.details.get("kills", 0)
        return kills if isinstance(kills, int) else 0


class RestartLimitExceeded(ReachError):
    """A supervisor exceeded its restart intensity and gave up."""

    code = "restart_limit_exceeded"


class InvalidTransition(ReachError):
    """A task state change that the task state machine does not allow."""

    code = "invalid_transition"


class TaskCancelled(ReachError):
    """The task (or the request it made) was cancelled before it finished."""

    code = "task_cancelled"


class TaskNotFound(ReachError):
    """No task has the given ID: never submitted here, or ended long ago and forgotten."""

    code = "task_not_found"


class StorageError(ReachError):
    """The session store's database refused an operation or is not usable."""

    code = "storage_error"
    default_severity = Severity.RETRYABLE


class SessionRefused(ReachError):
    """A session could not be opened; ``details["setting"]`` names the setting refused."""

    code = "session_refused"


class SessionNotFound(ReachError):
    """No session has the given ID."""

    code = "session_not_found"


class AuthError(ReachError):
    """A signature, replay-window or access-control check failed."""

    code = "auth_error"


class ConfigError(ReachError):
    """A setting of reach is invalid; ``details["setting"]`` names it."""

    code = "config_error"


class HandlerError(ReachError):
    """A handler raised an exception that is not a ReachError; ``details["type"]`` names it."""

    code = "handler_error"
    default_severity = Severity.RETRYABLE


__all__ = [
    "AgentAlreadyExists",
    "AgentNotFound",
    "AgentUnavailable",
    "AuthError",
    "CodecError",
    "ConnectionEnded",
    "Detail",
    "ErrorInfo",
    "HandlerError",
    "InvalidPayload",
    "InvalidTransition",
    "LoopDetected",
    "NoCapableAgent",
    "PoisonMessage",
    "ProtocolError",
    "ReachError",
    "RequestTimeout",
    "RestartLimitExceeded",
    "SchemaError",
    "SchemaEvolutionError",
    "SchemaIncompatible",
    "SessionNotFound",
    "SessionRefused",
    "Severity",
    "StorageError",
    "TaskCancelled",
    "TaskNotFound",
    "UnknownSchema",
    "error_from_info",
]
