"""reach: an actor-model runtime for multi-agent systems, on Ray.

The public surface is what ``__all__`` lists; every other module-level name is private.
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

from reach.errors import (
    AgentAlreadyExists,
    AgentNotFound,
    AgentUnavailable,
    AuthError,
    CodecError,
    ConfigError,
    ErrorInfo,
    HandlerError,
    InvalidPayload,
    InvalidTransition,
    LoopDetected,
    NoCapableAgent,
    ProtocolError,
    ReachError,
    RequestTimeout,
    RestartLimitExceeded,
    SchemaError,
    SchemaEvolutionError,
    SchemaIncompatible,
    SessionNotFound,
    SessionRefused,
    Severity,
    StorageError,
    TaskCancelled,
    TaskNotFound,
    UnknownSchema,
)
from reach.protocol import Envelope, MsgType
from reach.records import (
    AgentExit,
    AgentRecord,
    AgentStatus,
    Attempt,
    AttemptOutcome,
    ChildKind,
    ChildStatus,
    DeadLetter,
    RestartPlacement,
    RestartRecord,
    SessionContext,
    SessionMessage,
    SessionResume,
    SupervisorState,
    SupervisorStatus,
    TaskResult,
)
from reach.schemas import SchemaRef, SchemaRegistry, schema, schema_registry

if _TYPE_CHECKING:
    from policies.acl import Acl, Rule
    from policies.backoff import Backoff
    from policies.sessions import Limits, PendingAction, Terms
    from policies.supervision import Intensity, RestartType, Strategy
    from policies.tasks import SeverityPolicy, TaskPolicy, TaskState
    from reach.agent import Agent, Dedicated, Packed, Placement, Text, handler
    from reach.client import Client
    from reach.context import Context
    from reach.replies import Reply
    from reach.runtime import Runtime, init
    from reach.security.guard import SecurityConfig
    from reach.sessions import Session
    from reach.specs import ChildSpec, RemoteChild, SupervisorSpec
    from reach.supervision import SupervisorRef, TaskHandle

__version__ = "0.3.1"

# The runtime names load on first use: `policies` imports reach's protocol modules, and the
# runtime imports `policies`, so importing them eagerly here would make that a cycle.
_LAZY = {
    "Agent": "reach.agent", "Dedicated": "reach.agent", "Packed": "reach.agent",
    "Placement": "reach.agent", "Text": "reach.agent", "handler": "reach.agent",
    "Client": "reach.client", "Reply": "reach.replies", "Context": "reach.context",
    "Runtime": "reach.runtime", "init": "reach.runtime",
    "ChildSpec": "reach.specs", "RemoteChild": "reach.specs",
    "SupervisorRef": "reach.supervision",
    "SupervisorSpec": "reach.specs", "TaskHandle": "reach.supervision",
    "Backoff": "policies.backoff", "Intensity": "policies.supervision",
    "RestartType": "policies.supervision", "Strategy": "policies.supervision",
    "SeverityPolicy": "policies.tasks", "TaskPolicy": "policies.tasks",
    "TaskState": "policies.tasks",
    "Session": "reach.sessions", "Limits": "policies.sessions",
    "PendingAction": "policies.sessions", "Terms": "policies.sessions",
    "SecurityConfig": "reach.security.guard", "Acl": "policies.acl", "Rule": "policies.acl",
}


def __getattr__(name: str) -> _Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'reach' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "Acl",
    "Agent",
    "AgentAlreadyExists",
    "AgentExit",
    "AgentNotFound",
    "AgentRecord",
    "AgentStatus",
    "AgentUnavailable",
    "Attempt",
    "AttemptOutcome",
    "AuthError",
    "Backoff",
    "ChildKind",
    "ChildSpec",
    "ChildStatus",
    "Client",
    "CodecError",
    "ConfigError",
    "Context",
    "DeadLetter",
    "Dedicated",
    "Envelope",
    "ErrorInfo",
    "HandlerError",
    "Intensity",
    "InvalidPayload",
    "InvalidTransition",
    "Limits",
    "LoopDetected",
    "MsgType",
    "NoCapableAgent",
    "Packed",
    "PendingAction",
    "Placement",
    "ProtocolError",
    "ReachError",
    "RemoteChild",
    "Reply",
    "RequestTimeout",
    "RestartLimitExceeded",
    "RestartPlacement",
    "RestartRecord",
    "RestartType",
    "Rule",
    "Runtime",
    "SchemaError",
    "SchemaEvolutionError",
    "SchemaIncompatible",
    "SchemaRef",
    "SchemaRegistry",
    "SecurityConfig",
    "Session",
    "SessionContext",
    "SessionMessage",
    "SessionNotFound",
    "SessionRefused",
    "SessionResume",
    "Severity",
    "SeverityPolicy",
    "StorageError",
    "Strategy",
    "SupervisorRef",
    "SupervisorSpec",
    "SupervisorState",
    "SupervisorStatus",
    "TaskCancelled",
    "TaskHandle",
    "TaskNotFound",
    "TaskPolicy",
    "TaskResult",
    "TaskState",
    "Terms",
    "Text",
    "UnknownSchema",
    "__version__",
    "handler",
    "init",
    "schema",
    "schema_registry",
]
