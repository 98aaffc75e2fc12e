"""JSON that is JSON: what the gateway reads from outside and what it keeps. Pure.

:func:`read_json` reads an HTTP body as RFC 8259 JSON and nothing more, refusing with a
:class:`~reach.errors.CodecError` (``details["rule"]`` says which limit) what Python's reader
would let through or crash on:

==================  ===========================================================================
rule                refused
==================  ===========================================================================
``utf8``            bytes that are not UTF-8 (JSON's one encoding)
``syntax``          text that is not JSON
``constant``        ``NaN``, ``Infinity`` and ``-Infinity`` (not JSON)
``number``          a number no 64-bit float holds (``1e999``, an integer of more than
                    :data:`MAX_DIGITS` digits)
``depth``           arrays and objects nested deeper than the limit
``surrogate``       a string with an unpaired UTF-16 surrogate escape (``"\\ud800"``), which no
                    UTF-8 text can hold
==================  ===========================================================================

:func:`check_json` is the same promise for data reach made itself (an agent's reply): it is
JSON (finite numbers, string keys, no other types) nested at most :data:`MAX_VALUE_DEPTH`
levels, else a CodecError names where it is not.

Why depth is bounded so low: A2A's messages are protobuf, whose decoder takes at most 100 levels
of nested messages, and each level of a JSON object in a data part is three of them (a Value, a
Struct, a map entry) under the four or five of the task and response around it. A task holding
a data part nested 33 objects deep is made, stored and then can never be decoded again.
"""

from __future__ import annotations

import json
import math
import re
import sys
from typing import Any, NoReturn

from reach.errors import CodecError

#: Most digits of an integer read: a larger one is no finite 64-bit float (1.8e308).
MAX_DIGITS = 308
#: Most levels of arrays and objects in a value reach puts in a data part (a reply): a task
#: holding 33 levels of objects cannot be decoded (see the module's docstring).
MAX_VALUE_DEPTH = 28
_MAX_FLOAT = 1.7976931348623157e308
_LONG_INTEGER = re.compile(rf"\d{{{MAX_DIGITS + 1}}}")
# A \uD800-\uDFFF escape: where one is, a surrogate may be left unpaired.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _refuse(why: str, rule: str) -> NoReturn:
    raise CodecError(f"the body is not JSON the gateway reads: {why}",
                     suggestion="send RFC 8259 JSON in UTF-8 (finite numbers, no NaN or "
                                "Infinity)",
                     details={"rule": rule})


def _constant(name: str) -> Any:
    _refuse(f"{name} is not a JSON value (JSON numbers are finite)", "constant")


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        shown = text if len(text) <= 32 else f"{text[:16]}... ({len(text)} characters)"
        _refuse(f"the number {shown} is out of range of a 64-bit float", "number")
    return value


def read_json(body: bytes, *, max_depth: int) -> Any:
    """The JSON document of a body (see the module's docstring).

    Args:
        body: The bytes.
        max_depth: Most levels of arrays and objects nested in one another.

    Raises:
        CodecError: the body is not such JSON (``details["rule"]`` says why).
    """
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        _refuse(f"byte {exc.object[exc.start]:#04x} at position {exc.start} is not UTF-8", "utf8")
    try:
        doc = json.loads(text, parse_constant=_constant, parse_float=_float)
    except json.JSONDecodeError as exc:
        _refuse(f"{exc.msg} at line {exc.lineno} column {exc.colno}", "syntax")
    except RecursionError:
        _refuse(f"arrays and objects are nested deeper than {max_depth} levels", "depth")
    except ValueError:  # Python's own limit on the digits of an integer (4300)
        _refuse(f"an integer of more than {sys.get_int_max_str_digits()} digits is out of "
                f"range (at most {MAX_DIGITS}: a number must fit a 64-bit float)", "number")
    if _LONG_INTEGER.search(text):
        found = _non_json(doc)
        if found is not None:
            _refuse(f"{found[1]} (at most {MAX_DIGITS} digits: a number must fit a 64-bit "
                    f"float)", "number")
    # Cheap tests first: the walks below run only where the text could break the rule.
    if text.count("[") + text.count("{") > max_depth and depth(doc, max_depth) > max_depth:
        _refuse(f"arrays and objects are nested deeper than {max_depth} levels", "depth")
    if _SURROGATE_ESCAPE.search(text):
        try:
            json.dumps(doc, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            _refuse("a string holds an unpaired surrogate escape (\\ud800-\\udfff)",
                    "surrogate")
    return doc


def depth(data: Any, limit: int | None = None) -> int:
    """How many levels of lists and dicts are nested in ``data`` (0 for a scalar), without
    recursion (so that any depth is measured); once past ``limit`` (if given), ``limit + 1``."""
    if not isinstance(data, dict | list):
        return 0
    deepest = 1
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        item, level = stack.pop()
        if level > deepest:
            deepest = level
            if limit is not None and deepest > limit:
                return deepest
        for child in item.values() if isinstance(item, dict) else item:
            if isinstance(child, dict | list):
                stack.append((child, level + 1))
    return deepest


def check_json(data: Any, what: str) -> None:
    """Checks that reach's own data is JSON: finite numbers, string keys, and only dicts,
    lists, strings, numbers, booleans and None, at most :data:`MAX_VALUE_DEPTH` levels deep.

    Args:
        data: The data.
        what: What it is, for the error's message (``"the agent's reply"``).

    Raises:
        CodecError: it is not (``details["path"]`` is where, ``details["rule"]`` is
            ``"json_number"``, ``"json_type"`` or ``"depth"``).
    """
    found: tuple[str, str, str] | None
    try:
        text = json.dumps(data, allow_nan=False)
    except (ValueError, TypeError, RecursionError):
        found = _non_json(data) or ("$", "a value nested too deeply", "depth")
    else:  # JSON to Python's writer, which takes integers of any size
        found = _non_json(data) if _LONG_INTEGER.search(text) else None
        if found is None and (text.count("[") + text.count("{") <= MAX_VALUE_DEPTH
                              or depth(data, MAX_VALUE_DEPTH) <= MAX_VALUE_DEPTH):
            return
    path, why, rule = found or (
        "$", f"arrays and objects nested deeper than {MAX_VALUE_DEPTH} levels", "depth")
    raise CodecError(f"{what} is not JSON: {why} at {path}",
                     suggestion="reply with JSON data: finite numbers (no NaN or Infinity), "
                                "string keys",
                     details={"rule": rule, "path": path})


def _non_json(data: Any) -> tuple[str, str, str] | None:
    """The first place (path, what, rule) where data is not JSON, or None."""
    stack: list[tuple[Any, str]] = [(data, "$")]
    while stack:
        item, path = stack.pop()
        if isinstance(item, bool | str) or item is None:
            continue
        if isinstance(item, int):
            if abs(item) > _MAX_FLOAT:
                digits = int(math.log10(abs(item))) + 1  # str() refuses past 4300 digits
                return path, f"an integer of {digits} digits is out of range", "json_number"
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                return path, f"{item!r} is not a JSON number", "json_number"
            continue
        if isinstance(item, dict):
            for key, value in item.items():
                if not isinstance(key, str):
                    return path, f"the key {key!r} is not a string", "json_type"
                stack.append((value, f"{path}.{key}"))
            continue
        if isinstance(item, list | tuple):
            stack.extend((value, f"{path}[{i}]") for i, value in enumerate(item))
            continue
        return path, f"a {type(item).__name__} is not a JSON value", "json_type"
    return None


__all__ = ["MAX_DIGITS", "MAX_VALUE_DEPTH", "check_json", "depth", "read_json"]
