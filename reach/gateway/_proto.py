"""The few protobuf helpers the gateway needs, in one place (protobuf ships no type stubs).

A ``google.protobuf.Value`` holds any double, NaN and Infinity included, but JSON has no form
for those: a Value that held one could be stored and never shown again. So Values are made only
of JSON (:func:`to_value` refuses anything else), and one that holds a NaN anyway cannot be read
back as if it were JSON (:func:`to_python` refuses it).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from google.protobuf import json_format, struct_pb2  # type: ignore[import-untyped,unused-ignore]
from google.protobuf.timestamp_pb2 import (  # type: ignore[import-untyped,unused-ignore]
    Timestamp,
)

from reach.errors import CodecError
from reach.gateway.strict import check_json


def to_python(message: Any) -> Any:
    """A protobuf message (a Struct, a Value...) as plain Python data.

    Raises:
        CodecError: it holds a NaN or an Infinity (JSON has no form for them).
    """
    try:
        return json_format.MessageToDict(message)
    except (ValueError, json_format.Error) as exc:  # how json_format refuses a NaN
        raise CodecError("a value is not JSON: it holds NaN or Infinity",
                         details={"rule": "json_number"}) from exc


def to_value(data: Any, what: str = "a value") -> Any:
    """Plain JSON data as a ``google.protobuf.Value``.

    Args:
        data: The data.
        what: What it is, for the error's message.

    Raises:
        CodecError: ``data`` is not JSON (see :func:`reach.gateway.strict.check_json`).
    """
    check_json(data, what)
    try:
        return json_format.ParseDict(data, struct_pb2.Value())
    except (json_format.ParseError, OverflowError, ValueError, TypeError) as exc:
        raise CodecError(f"{what} cannot be carried as a JSON value (a number out of range, "
                         "or a type JSON has not)", details={"rule": "json_type"}) from exc


def timestamp(epoch_s: float) -> Any:
    """Seconds since the epoch as a ``google.protobuf.Timestamp``."""
    stamp = Timestamp()
    stamp.FromDatetime(datetime.fromtimestamp(epoch_s, UTC))
    return stamp


__all__ = ["timestamp", "to_python", "to_value"]
