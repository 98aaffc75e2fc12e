"""Plain data several ports carry: an error's info and a JSON object, as they cross a process."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NotRequired, TypedDict

#: A JSON object (an envelope, a payload, negotiated terms) as a port carries it: reach's
#: processes exchange it as plain data, without looking inside.
JsonObject = Mapping[str, object]


class ErrorDoc(TypedDict):
    """A :class:`~reach.errors.ErrorInfo` as plain data (``ErrorInfo.model_dump()``): what a
    process answers for an error it reports rather than raises."""

    code: str
    reason: str
    severity: str
    suggestion: NotRequired[str]
    details: NotRequired[dict[str, str | int | float | bool | None]]


__all__ = ["ErrorDoc", "JsonObject"]
