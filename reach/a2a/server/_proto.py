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
from reach.strict_json import check

#: Most levels of arrays and objects in a value reach puts in a data part (a reply). A2A's
#: messages are protobuf, whose decoder takes at most 100 levels of nested messages, and each
#: level of a JSON object in a data part is three of them (a Value, a Struct, a map entry) under
#: the four or five of the task and response around it: a task holding a data part nested 33
#: objects deep is made, stored and then can never be decoded again.
MAX_VALUE_DEPTH = 28


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
        CodecError: ``data`` is not JSON a task can keep: :func:`reach.strict_json.check` at
            most :data:`MAX_VALUE_DEPTH` levels deep (``details["path"]`` is where,
            ``details["rule"]`` is ``"json_number"``, ``"json_type"`` or ``"depth"``).
    """
    check(data, what, max_depth=MAX_VALUE_DEPTH)
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
