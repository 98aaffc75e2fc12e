"""Strict JSON, the one module of its rules: each rule of a whole document, of reach's own data,
of what is written, and of parts refused alone; each caller's own depth limit."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest

from reach.a2a.server._proto import MAX_VALUE_DEPTH, to_value
from reach.errors import CodecError
from reach.remote.wire import DEFAULT_MAX_DEPTH
from reach.strict_json import (
    MAX_DIGITS,
    NotJson,
    check,
    depth,
    dumps,
    flaw,
    loads,
    loads_marked,
    may_hold_lone_surrogates,
)

ROOT = Path(__file__).resolve().parents[2]


def nested(levels: int) -> str:
    return "[" * levels + "]" * levels


# -- a whole document ------------------------------------------------------------------------


@pytest.mark.parametrize(("data", "rule", "says"), [
    (b'{"a": "\xff"}', "utf8", "byte 0xff at position 7 is not UTF-8"),
    ('{"a": "\ud800"}', "utf8", "lone surrogate"),
    (b'{"a": ', "syntax", "line 1 column 7"),
    (b"[NaN]", "constant", "NaN is not a JSON value"),
    (b'{"x": Infinity}', "constant", "Infinity is not a JSON value"),
    (b"-Infinity", "constant", "-Infinity is not a JSON value"),
    (b"[1e999]", "number", "the number 1e999 is out of range"),
    (b"[-" + b"9" * 400 + b".5]", "number", "(403 characters)"),
    (b"[" + b"9" * (MAX_DIGITS + 1) + b"]", "number", f"at most {MAX_DIGITS} digits"),
    (b"[" + b"9" * 5000 + b"]", "number", "digits is out of range"),
    (nested(33).encode(), "depth", "deeper than 32 levels"),
    (nested(100_000).encode(), "depth", "deeper than 32 levels"),
    (b'{"x": "\\ud800"}', "surrogate", "unpaired surrogate escape"),
    ('["\\udfff"]', "surrogate", "unpaired surrogate escape"),
])
def test_a_document_that_breaks_a_rule_is_refused_naming_the_rule(
        data: bytes | str, rule: str, says: str) -> None:
    with pytest.raises(CodecError, match=r"^the text is not strict JSON: ") as refused:
        loads(data, max_depth=32)
    assert refused.value.details["rule"] == rule
    assert says in refused.value.message
    assert refused.value.suggestion is not None
    assert "NaN" in refused.value.suggestion


@pytest.mark.parametrize("data", [
    b'{"a": [1, 2.5, -0.0, "\\u00e9\\ud83d\\ude00", true, null]}',
    '{"a": "é😀", "n": ' + "9" * MAX_DIGITS + "}",
    nested(32),
    b"1.7976931348623157e308",
])
def test_strict_json_reads_as_python_reads_it(data: bytes | str) -> None:
    assert loads(data, max_depth=32) == json.loads(data)


def test_the_depth_limit_is_the_callers() -> None:
    assert loads(nested(5), max_depth=5) == json.loads(nested(5))
    with pytest.raises(CodecError, match="deeper than 4 levels"):
        loads(nested(5), max_depth=4)


def test_the_refusal_says_whose_text_it_was() -> None:
    with pytest.raises(CodecError, match=r"^the body is not JSON the gateway reads: NaN "):
        loads(b"NaN", max_depth=32, refusal="the body is not JSON the gateway reads")


# -- reach's own data ------------------------------------------------------------------------


@pytest.mark.parametrize(("data", "rule", "path"), [
    ({"v": float("nan")}, "json_number", "$.v"),
    ({"v": [1, float("-inf")]}, "json_number", "$.v[1]"),
    ({"v": 10 ** 400}, "json_number", "$.v"),
    ({"v": 10 ** 5000}, "json_number", "$.v"),
    ({"v": b"bytes"}, "json_type", "$.v"),
    ({"v": {"s"}}, "json_type", "$.v"),
    (json.loads(nested(11)), "depth", "$"),
])
def test_data_that_is_not_json_is_refused_with_where(data: Any, rule: str, path: str) -> None:
    with pytest.raises(CodecError, match=r"^the reply is not JSON: ") as refused:
        check(data, "the reply", max_depth=10)
    assert (refused.value.details["rule"], refused.value.details["path"]) == (rule, path)


def test_json_data_passes_the_check_up_to_the_callers_depth() -> None:
    check({"a": [1, 2.5, "é", None, True, (3, 4)], "n": 10 ** MAX_DIGITS}, "x", max_depth=3)
    check(json.loads(nested(10)), "x", max_depth=10)
    deep: Any = 1
    for _ in range(5000):  # deeper than Python's writer recurses
        deep = [deep]
    with pytest.raises(CodecError) as refused:
        check(deep, "x", max_depth=10)
    assert refused.value.details["rule"] == "depth"


def test_depth_counts_levels_without_recursion_and_stops_past_the_limit() -> None:
    assert [depth(1), depth([]), depth({"a": [{}]})] == [0, 1, 3]
    assert depth(json.loads(nested(500))) == 500
    assert depth(json.loads(nested(500)), limit=10) == 11


# -- what reach writes -----------------------------------------------------------------------


def test_what_is_written_is_compact_strict_json_in_utf8() -> None:
    assert dumps({"a": [1, 2.5], "s": "é😀"}) == '{"a":[1,2.5],"s":"é😀"}'
    for bad in ({"x": float("nan")}, [float("inf")], {"s": "\ud800"}):
        with pytest.raises(ValueError, match=r"JSON compliant|lone surrogate"):
            dumps(bad)
    deep: Any = 1
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(ValueError, match="nested too deep"):
        dumps(deep)
    with pytest.raises(TypeError):
        dumps({"b": b"bytes"})


# -- parts refused alone ---------------------------------------------------------------------


def test_non_json_numbers_are_kept_as_markers_for_the_part_holding_them() -> None:
    parsed = loads_marked('[{"a": 1.5}, {"b": NaN}, {"c": 1e999}, {"d": -Infinity}]')
    assert parsed[0] == {"a": 1.5}
    assert [p.token for part in parsed[1:] for p in part.values()] == ["NaN", "1e999",
                                                                       "-Infinity"]
    assert all(isinstance(v, NotJson) for part in parsed[1:] for v in part.values())
    assert flaw(parsed[0], 64, strings=False) is None
    assert [flaw(part, 64, strings=False) for part in parsed[1:]] == [
        ("not_json", f"{token} is not JSON (no NaN or Infinity)")
        for token in ("NaN", "1e999", "-Infinity")]
    with pytest.raises(ValueError, match="digits"):
        loads_marked("[" + "9" * 5000 + "]")
    with pytest.raises(RecursionError):
        loads_marked(nested(100_000))


def test_a_flaw_of_depth_counts_the_part_itself_as_the_first_level() -> None:
    assert flaw(json.loads(nested(3)), 3, strings=False) is None
    found = flaw({"a": json.loads(nested(3))}, 3, strings=False)
    assert found == ("depth", "it nests deeper than 3 levels of objects and arrays")
    assert flaw("scalar", 0, strings=True) is None


def test_lone_surrogates_are_looked_for_where_the_text_escapes_one() -> None:
    text = '{"s": ["\\ud800"], "\\udfff": 1}'
    assert may_hold_lone_surrogates(text)
    assert may_hold_lone_surrogates('"\\ud83d\\ude00"')  # a pair may: the escape says "may"
    assert not may_hold_lone_surrogates('{"s": "\\u00e9"}')  # no surrogate escape at all
    parsed = loads_marked(text)
    assert flaw(parsed, 64, strings=False) is None
    assert flaw(parsed["s"], 64, strings=True) == (
        "surrogate", "a string holds a lone surrogate (not UTF-8)")
    assert flaw({"\udfff": 1}, 64, strings=True) == (
        "surrogate", "a key holds a lone surrogate (not UTF-8)")


# -- each caller's limit, and the layering -----------------------------------------------------


def test_each_caller_passes_its_own_depth_limit() -> None:
    assert (DEFAULT_MAX_DEPTH, MAX_VALUE_DEPTH) == (64, 28)
    to_value(json.loads(nested(MAX_VALUE_DEPTH)), "the reply")
    with pytest.raises(CodecError, match="deeper than 28 levels") as refused:
        to_value(json.loads(nested(MAX_VALUE_DEPTH + 1)), "the reply")
    assert refused.value.details["rule"] == "depth"


def _reach_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {m for m in found if m.split(".")[0] == "reach"}


def test_the_rules_sit_beside_the_codec_and_the_features_import_them_from_there() -> None:
    assert _reach_imports(ROOT / "reach" / "strict_json.py") == {"reach.errors"}
    server, remote = ROOT / "reach" / "a2a" / "server", ROOT / "reach" / "remote"
    for path in (remote / "frames.py", remote / "frame_parsing.py", remote / "envelope_frames.py",
                 server / "intake.py", server / "_proto.py"):
        text = path.read_text(encoding="utf-8")
        assert "reach.strict_json" in text or "from reach import strict_json" in text, path
    assert not (ROOT / "reach" / "remote" / "strict.py").exists()
    assert not (ROOT / "reach" / "gateway" / "strict.py").exists()
