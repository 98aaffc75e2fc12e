"""The few protobuf helpers the gateway needs, in one place (protobuf ships no type stubs)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from google.protobuf import json_format, struct_pb2  # type: ignore[import-untyped,unused-ignore]
from google.protobuf.timestamp_pb2 import (  # type: ignore[import-untyped,unused-ignore]
    Timestamp,
)


def to_python(message: Any) -> Any:
    """A protobuf message (a Struct, a Value...) as plain Python data."""
    return json_format.MessageToDict(message)


def to_value(data: Any) -> Any:
    """Plain JSON-able Python data as a ``google.protobuf.Value``."""
    return json_format.ParseDict(data, struct_pb2.Value())


def timestamp(epoch_s: float) -> Any:
    """Seconds since the epoch as a ``google.protobuf.Timestamp``."""
    stamp = Timestamp()
    stamp.FromDatetime(datetime.fromtimestamp(epoch_s, UTC))
    return stamp


__all__ = ["timestamp", "to_python", "to_value"]
