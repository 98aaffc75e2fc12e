"""reach: an actor-model runtime for multi-agent systems, on Ray.

The public surface is what ``__all__`` lists; every other module-level name is private.
"""

from reach.codec import Codec, Refused, decode, decode_batch, encode, encode_batch
from reach.errors import (
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

__version__ = "0.1.0"

__all__ = [
    "AgentNotFound",
    "AgentUnavailable",
    "AuthError",
    "Codec",
    "CodecError",
    "Envelope",
    "ErrorInfo",
    "HandlerError",
    "InvalidPayload",
    "LoopDetected",
    "MsgType",
    "NoCapableAgent",
    "ProtocolError",
    "ReachError",
    "Refused",
    "RequestTimeout",
    "RestartLimitExceeded",
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
    "new_id",
    "registry",
    "schema",
]
