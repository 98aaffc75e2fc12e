"""reach: an actor-model runtime for multi-agent systems, on Ray.

The public surface is what ``__all__`` lists; every other module-level name is private.
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

from reach.codec import Codec, Refused, decode, decode_batch, encode, encode_batch
from reach.errors import (
    AgentAlreadyExists,
    AgentNotFound,
    AgentUnavailable,
    AuthError,
    CodecError,
    ErrorInfo,
    HandlerError,
    InvalidPayload,
    LoopDetected,
    NoCapableAgent,
    ProtocolError,
    ReachError,
    RequestTimeout,
    RestartLimitExceeded,
    SchemaError,
    SchemaEvolutionError,
    SchemaIncompatible,
    Severity,
    UnknownSchema,
    error_from_info,
)
from reach.protocol import Envelope, MsgType, new_id
from reach.schemas import SchemaRef, SchemaRegistry, registry, schema

if _TYPE_CHECKING:
    from reach.agent import Agent, Dedicated, Packed, Placement, handler
    from reach.client import AgentInfo, Client, Context
    from reach.runtime import Runtime, init

__version__ = "0.1.0"

# The runtime names load on first use: `policies` imports reach's protocol modules, and the
# runtime imports `policies`, so importing them eagerly here would make that a cycle.
_LAZY = {
    "Agent": "reach.agent", "Dedicated": "reach.agent", "Packed": "reach.agent",
    "Placement": "reach.agent", "handler": "reach.agent",
    "AgentInfo": "reach.client", "Client": "reach.client", "Context": "reach.client",
    "Runtime": "reach.runtime", "init": "reach.runtime",
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
    "Agent",
    "AgentAlreadyExists",
    "AgentInfo",
    "AgentNotFound",
    "AgentUnavailable",
    "AuthError",
    "Client",
    "Codec",
    "CodecError",
    "Context",
    "Dedicated",
    "Envelope",
    "ErrorInfo",
    "HandlerError",
    "InvalidPayload",
    "LoopDetected",
    "MsgType",
    "NoCapableAgent",
    "Packed",
    "Placement",
    "ProtocolError",
    "ReachError",
    "Refused",
    "RequestTimeout",
    "RestartLimitExceeded",
    "Runtime",
    "SchemaError",
    "SchemaEvolutionError",
    "SchemaIncompatible",
    "SchemaRef",
    "SchemaRegistry",
    "Severity",
    "UnknownSchema",
    "__version__",
    "decode",
    "decode_batch",
    "encode",
    "encode_batch",
    "error_from_info",
    "handler",
    "init",
    "new_id",
    "registry",
    "schema",
]
