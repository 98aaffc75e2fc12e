"""JSON as the wire takes it from outside and gives it back: strict JSON, nested so deep at most.

Python's :mod:`json` is lenient both ways: it reads and writes ``NaN``, ``Infinity`` and
``-Infinity`` (not JSON: a strict parser in another language refuses them, and a task stored with
one can no longer be read), reads ``1e999`` as infinity, reads escaped lone surrogates
(``"\\ud800"``: a string no UTF-8 encoder can write, so the socket it is sent to breaks), and
recurses once per level of nesting (a payload nested some hundreds deep parses, then fails to
pickle on its way into the cluster). Here a value that cannot travel is found where it enters,
so that it is refused for its own sender alone.

Pure: no I/O; :mod:`reach.remote.wire` wraps what it finds in ``CodecError``.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

#: Levels of objects and arrays an envelope (itself the first), or any other frame, may nest.
#: Real payloads nest a few levels (an A2A message with parts and metadata: 6); 64 leaves room
#: for any honest document, and keeps what reach does with an envelope afterwards (pickling it
#: for Ray, about 2 stack frames a level against Python's limit of 1,000; validating it; storing
#: it) far from any recursion limit.
DEFAULT_MAX_DEPTH = 64

# A JSON escape of a surrogate: only then can the parsed text hold a lone one.
_ESCAPED_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")


class NotJson:
    """What the parser gives for a token that is not JSON (``NaN``, ``Infinity``, ``1e999``):
    found by :func:`flaw`, so that the envelope holding it is refused alone."""

    __slots__ = ("token",)

    def __init__(self, token: str) -> None:
        self.token = token


def loads(text: str) -> Any:
    """Parses JSON text, non-JSON numbers kept as :class:`NotJson` markers.

    Raises:
        RecursionError: the text nests deeper than the parser's recursion allows.
        ValueError: it is not JSON (a ``json.JSONDecodeError``, or an integer too long).
    """
    return json.loads(text, parse_constant=NotJson, parse_float=_float)


def _float(token: str) -> float | NotJson:
    value = float(token)
    return value if math.isfinite(value) else NotJson(token)


def may_hold_lone_surrogates(text: str) -> bool:
    """Whether the parsed form of ``text`` can hold a lone surrogate (it escapes one)."""
    return _ESCAPED_SURROGATE.search(text) is not None


def flaw(value: Any, max_depth: int, strings: bool) -> tuple[str, str] | None:
    """The first reason a parsed value cannot travel, as ``(rule, words)``, or None.

    Rules: ``depth`` (objects and arrays nested more than ``max_depth`` levels, ``value`` the
    first), ``not_json`` (NaN, Infinity or an overflowing number), ``surrogate`` (a string with
    a lone surrogate; looked for only when ``strings``). Iterative: any depth costs no stack.
    """
    if not isinstance(value, dict | list):
        return None
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > max_depth:
            return "depth", f"it nests deeper than {max_depth} levels of objects and arrays"
        children = node.values() if isinstance(node, dict) else node
        if strings and isinstance(node, dict) and any(_SURROGATE.search(k) for k in node):
            return "surrogate", "a key holds a lone surrogate (not UTF-8)"
        for child in children:
            if isinstance(child, dict | list):
                stack.append((child, depth + 1))
            elif isinstance(child, NotJson):
                return "not_json", f"{child.token} is not JSON (no NaN or Infinity)"
            elif strings and isinstance(child, str) and _SURROGATE.search(child):
                return "surrogate", "a string holds a lone surrogate (not UTF-8)"
    return None


def dumps(value: Any) -> str:
    """Compact JSON text of ``value``, UTF-8 characters kept as they are, strict.

    Raises:
        ValueError: a NaN or an infinity, a string with a lone surrogate, or nesting beyond the
            encoder's recursion.
        TypeError: a value with no JSON form (bytes, a date...).
    """
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except RecursionError:
        raise ValueError("nested too deep to encode") from None
    if not text.isascii() and _SURROGATE.search(text):
        raise ValueError("a string holds a lone surrogate (not UTF-8)")
    return text


__all__ = ["DEFAULT_MAX_DEPTH", "NotJson", "dumps", "flaw", "loads",
           "may_hold_lone_surrogates"]
