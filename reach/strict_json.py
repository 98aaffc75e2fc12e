"""Strict JSON: what reach reads from outside and what it writes is RFC 8259 JSON, nothing more.

Python's :mod:`json` is lenient both ways: it reads and writes ``NaN``, ``Infinity`` and
``-Infinity`` (not JSON: a strict parser in another language refuses them, and a task stored with
one can no longer be read), reads ``1e999`` as infinity and integers of thousands of digits,
reads escaped lone surrogates (``"\\ud800"``: a string no UTF-8 encoder can write, so the socket
or the store it is sent to breaks), and recurses once per level of nesting (a payload nested some
hundreds deep parses, then fails to pickle on its way into the cluster). Here a value that cannot
travel is found where it enters. Pure: no I/O, and no limit of its own: each caller passes its
depth limit (the remote wire's, the gateway's), with the reason for it where it is defined.

:func:`loads` reads a whole document, refusing with a :class:`~reach.errors.CodecError`
(``details["rule"]`` says which rule) what Python's reader would let through or crash on:

==================  ===========================================================================
rule                refused
==================  ===========================================================================
``utf8``            bytes that are not UTF-8 (JSON's one encoding), text no UTF-8 can hold
``syntax``          text that is not JSON
``constant``        ``NaN``, ``Infinity`` and ``-Infinity`` (not JSON)
``number``          a number no 64-bit float holds (``1e999``, an integer of more than
                    :data:`MAX_DIGITS` digits)
``depth``           arrays and objects nested deeper than the caller's limit
``surrogate``       a string with an unpaired UTF-16 surrogate escape (``"\\ud800"``)
==================  ===========================================================================

:func:`check` is the same promise for data reach made itself (an agent's reply): JSON (finite
numbers, string keys, no other types; rules ``json_number``, ``json_type``) nested at most the
caller's limit (``depth``). :func:`dumps` writes strict JSON text.

A reader that refuses the parts of a document alone (the remote wire: one bad envelope of a
batch is refused, the others go on) parses with :func:`loads_marked`, which keeps non-JSON
numbers as :class:`NotJson` markers, and asks :func:`flaw` of each part (rules ``depth``,
``not_json``, ``surrogate``).
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
_MAX_FLOAT = 1.7976931348623157e308
_LONG_INTEGER = re.compile(rf"\d{{{MAX_DIGITS + 1}}}")
# A JSON escape of a surrogate (\uD800-\uDFFF): only where one is can a parsed string hold a
# lone one.
_ESCAPED_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")
_SUGGESTION = "send RFC 8259 JSON in UTF-8 (finite numbers, no NaN or Infinity)"


class _Broken(Exception):
    """A rule :func:`loads` found broken: ``why`` (words) and ``rule`` (its name)."""

    def __init__(self, why: str, rule: str) -> None:
        super().__init__(why, rule)
        self.why = why
        self.rule = rule


def _constant(name: str) -> NoReturn:
    raise _Broken(f"{name} is not a JSON value (JSON numbers are finite)", "constant")


def _float(token: str) -> float:
    value = float(token)
    if not math.isfinite(value):
        shown = token if len(token) <= 32 else f"{token[:16]}... ({len(token)} characters)"
        raise _Broken(f"the number {shown} is out of range of a 64-bit float", "number")
    return value


def loads(data: bytes | str, *, max_depth: int,
          refusal: str = "the text is not strict JSON") -> Any:
    """The JSON document of ``data`` (see the module's docstring for the rules).

    Args:
        data: UTF-8 bytes, or text.
        max_depth: Most levels of arrays and objects nested in one another.
        refusal: What the error's message starts with (``"the body is not JSON the gateway
            reads"``); the broken rule's words follow it.

    Raises:
        CodecError: it is not such JSON (``details["rule"]`` names the rule).
    """
    # No helper is called on the way of a good small document: every body the gateway reads
    # comes here.
    try:
        if type(data) is bytes:
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise _Broken(_not_utf8(exc), "utf8") from None
        else:
            text = _text(data)
        try:
            doc = json.loads(text, parse_constant=_constant, parse_float=_float)
        except json.JSONDecodeError as exc:
            raise _Broken(f"{exc.msg} at line {exc.lineno} column {exc.colno}", "syntax") \
                from None
        except RecursionError:
            raise _Broken(_too_deep(max_depth), "depth") from None
        except ValueError:  # Python's own limit on the digits of an integer (4300)
            raise _Broken(f"an integer of more than {sys.get_int_max_str_digits()} digits is "
                          f"out of range (at most {MAX_DIGITS}: a number must fit a 64-bit "
                          "float)", "number") from None
        if _LONG_INTEGER.search(text):
            _check_integers(doc)
        # Cheap tests first: the walks below run only where the text could break the rule.
        if text.count("[") + text.count("{") > max_depth:
            _check_depth(doc, max_depth)
        if _ESCAPED_SURROGATE.search(text):
            _check_surrogates(doc)
    except _Broken as broken:
        raise CodecError(f"{refusal}: {broken.why}", suggestion=_SUGGESTION,
                         details={"rule": broken.rule}) from None
    return doc


def _not_utf8(exc: UnicodeDecodeError) -> str:
    return f"byte {exc.object[exc.start]:#04x} at position {exc.start} is not UTF-8"


def _text(data: bytes | str) -> str:
    if not isinstance(data, str):  # a subclass of bytes
        try:
            return bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _Broken(_not_utf8(exc), "utf8") from None
    if not data.isascii() and _SURROGATE.search(data):
        raise _Broken("the text holds a lone surrogate, which no UTF-8 can hold", "utf8")
    return data


def _too_deep(max_depth: int) -> str:
    return f"arrays and objects are nested deeper than {max_depth} levels"


def _check_depth(doc: Any, max_depth: int) -> None:
    if depth(doc, max_depth) > max_depth:
        raise _Broken(_too_deep(max_depth), "depth")


def _check_integers(doc: Any) -> None:
    found = _non_json(doc)
    if found is not None:
        raise _Broken(f"{found[1]} (at most {MAX_DIGITS} digits: a number must fit a 64-bit "
                      "float)", "number")


def _check_surrogates(doc: Any) -> None:
    try:
        json.dumps(doc, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise _Broken("a string holds an unpaired surrogate escape (\\ud800-\\udfff)",
                      "surrogate") from None


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


def check(data: Any, what: str, *, max_depth: int) -> None:
    """Checks that reach's own data is JSON: finite numbers, string keys, and only dicts,
    lists, strings, numbers, booleans and None, at most ``max_depth`` levels deep.

    Args:
        data: The data.
        what: What it is, for the error's message (``"the agent's reply"``).
        max_depth: Most levels of arrays and objects nested in one another.

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
        if found is None and (text.count("[") + text.count("{") <= max_depth
                              or depth(data, max_depth) <= max_depth):
            return
    path, why, rule = found or (
        "$", f"arrays and objects nested deeper than {max_depth} levels", "depth")
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


# -- parts refused alone -------------------------------------------------------------------------


class NotJson:
    """What :func:`loads_marked` gives for a token that is not JSON (``NaN``, ``Infinity``,
    ``1e999``): found by :func:`flaw`, so that the part holding it is refused alone."""

    __slots__ = ("token",)

    def __init__(self, token: str) -> None:
        self.token = token


def loads_marked(text: str) -> Any:
    """Parses JSON text, non-JSON numbers kept as :class:`NotJson` markers (for :func:`flaw`).

    Raises:
        RecursionError: the text nests deeper than the parser's recursion allows.
        ValueError: it is not JSON (a ``json.JSONDecodeError``, or an integer too long).
    """
    return json.loads(text, parse_constant=NotJson, parse_float=_marked_float)


def _marked_float(token: str) -> float | NotJson:
    value = float(token)
    return value if math.isfinite(value) else NotJson(token)


def may_hold_lone_surrogates(text: str) -> bool:
    """Whether the parsed form of ``text`` can hold a lone surrogate (it escapes one)."""
    return _ESCAPED_SURROGATE.search(text) is not None


def flaw(value: Any, max_depth: int, strings: bool) -> tuple[str, str] | None:
    """The first reason a value parsed by :func:`loads_marked` cannot travel, as
    ``(rule, words)``, or None.

    Rules: ``depth`` (objects and arrays nested more than ``max_depth`` levels, ``value`` the
    first), ``not_json`` (NaN, Infinity or an overflowing number), ``surrogate`` (a string with
    a lone surrogate; looked for only when ``strings``). Iterative: any depth costs no stack.
    """
    if not isinstance(value, dict | list):
        return None
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, level = stack.pop()
        if level > max_depth:
            return "depth", f"it nests deeper than {max_depth} levels of objects and arrays"
        children = node.values() if isinstance(node, dict) else node
        if strings and isinstance(node, dict) and any(_SURROGATE.search(k) for k in node):
            return "surrogate", "a key holds a lone surrogate (not UTF-8)"
        for child in children:
            if isinstance(child, dict | list):
                stack.append((child, level + 1))
            elif isinstance(child, NotJson):
                return "not_json", f"{child.token} is not JSON (no NaN or Infinity)"
            elif strings and isinstance(child, str) and _SURROGATE.search(child):
                return "surrogate", "a string holds a lone surrogate (not UTF-8)"
    return None


__all__ = ["MAX_DIGITS", "NotJson", "check", "depth", "dumps", "flaw", "loads", "loads_marked",
           "may_hold_lone_surrogates"]
