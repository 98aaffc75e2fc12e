"""Every error pickles intact, crosses the wire typed, and appears in the tree of the docstring."""

from __future__ import annotations

import pickle
import re

import pytest

import reach
from reach import Envelope, ErrorInfo, ReachError, Severity
from reach.codec import Codec
from reach.errors import error_from_info


def _all_subclasses(cls: type[ReachError]) -> set[type[ReachError]]:
    found: set[type[ReachError]] = set()
    for sub in cls.__subclasses__():
        found |= {sub} | _all_subclasses(sub)
    return found


#: ReachError and every subclass the project defines (test-local subclasses are left out).
ERROR_TYPES = sorted(
    {ReachError}
    | {c for c in _all_subclasses(ReachError)
       if c.__module__.split(".")[0] in {"reach", "actors", "policies"}},
    key=lambda c: c.__name__,
)
OTHER = {
    Severity.FATAL: Severity.RETRYABLE,
    Severity.RETRYABLE: Severity.DEGRADABLE,
    Severity.DEGRADABLE: Severity.FATAL,
}


def _sample(cls: type[ReachError], severity: Severity | None = None) -> ReachError:
    return cls(
        "订单 A-1024 failed at C:\\Users\\张伟\\订单.txt 📦",
        severity=severity,
        suggestion="try 'order-agent-2' instead",
        details={"rule": "x", "size": 4096, "ratio": 0.5, "partial": True, "missing": None},
    )


def _through_an_error_envelope(error: ReachError) -> ReachError:
    codec = Codec()
    request = Envelope.request("router", "order-agent", {"order_id": "A-1"}, "order.query@1.0")
    return codec.decode(codec.encode(request.fail(error))).to_error()


def _fields(error: ReachError) -> tuple[object, ...]:
    return (type(error), error.message, error.severity, error.suggestion, error.details, str(error))


def test_the_discovered_error_types_include_the_whole_known_tree() -> None:
    names = {c.__name__ for c in ERROR_TYPES}
    assert {"ReachError", "ProtocolError", "CodecError", "SchemaIncompatible", "LoopDetected",
            "AgentNotFound", "RequestTimeout", "HandlerError"} <= names
    assert len(ERROR_TYPES) >= 17


ids = [c.__name__ for c in ERROR_TYPES]


@pytest.mark.parametrize("cls", ERROR_TYPES, ids=ids)
@pytest.mark.parametrize("protocol", range(2, pickle.HIGHEST_PROTOCOL + 1))
def test_every_error_pickles_and_unpickles_intact(cls: type[ReachError], protocol: int) -> None:
    error = _sample(cls)
    back = pickle.loads(pickle.dumps(error, protocol=protocol))
    assert _fields(back) == _fields(error)
    assert back == error
    assert back.args == error.args
    assert back.details is not error.details


@pytest.mark.parametrize("cls", ERROR_TYPES, ids=ids)
def test_every_error_crosses_an_error_envelope_with_its_type_and_severity(
    cls: type[ReachError],
) -> None:
    error = _sample(cls)
    back = _through_an_error_envelope(error)
    assert _fields(back) == _fields(error)
    assert back == error
    assert back.severity is cls.default_severity


@pytest.mark.parametrize("cls", ERROR_TYPES, ids=ids)
def test_an_overridden_severity_survives_pickle_and_the_wire(cls: type[ReachError]) -> None:
    severity = OTHER[cls.default_severity]
    error = _sample(cls, severity=severity)
    assert error.severity is severity
    assert pickle.loads(pickle.dumps(error)).severity is severity
    assert _through_an_error_envelope(error).severity is severity
    assert _through_an_error_envelope(error) == error


def test_a_severity_given_as_a_string_becomes_a_severity() -> None:
    error = ReachError("x", severity="degradable")  # type: ignore[arg-type]
    assert error.severity is Severity.DEGRADABLE


def test_an_unknown_code_becomes_a_plain_reach_error_that_keeps_the_code() -> None:
    info = ErrorInfo(
        code="quantum_decoherence", reason="the qubits wandered off",
        severity=Severity.DEGRADABLE, suggestion="retry later", details={"qubits": 7},
    )
    for error in (error_from_info(info), _through_an_error_envelope_info(info)):
        assert type(error) is ReachError
        assert error.message == "the qubits wandered off"
        assert error.severity is Severity.DEGRADABLE
        assert error.suggestion == "retry later"
        assert error.details == {"qubits": 7, "code": "quantum_decoherence"}


def _through_an_error_envelope_info(info: ErrorInfo) -> ReachError:
    codec = Codec()
    request = Envelope.request("router", "order-agent", {}, "order.query@1.0")
    return codec.decode(codec.encode(request.fail(info))).to_error()


@pytest.mark.parametrize("cls", ERROR_TYPES, ids=ids)
def test_to_info_and_error_from_info_are_inverse(cls: type[ReachError]) -> None:
    error = _sample(cls)
    info = error.to_info()
    assert info.code == cls.code
    assert info.reason == error.message
    assert error_from_info(info) == error


def test_every_error_type_defines_its_own_distinct_code() -> None:
    own_codes = {cls: cls.__dict__.get("code") for cls in ERROR_TYPES}
    assert None not in own_codes.values(), [c.__name__ for c, v in own_codes.items() if v is None]
    codes = list(own_codes.values())
    assert len(set(codes)) == len(codes)
    assert all(re.fullmatch(r"[a-z]+(?:_[a-z]+)*", str(code)) for code in codes)


def test_errors_that_differ_in_any_field_are_not_equal() -> None:
    base = reach.AgentNotFound("x", suggestion="s", details={"a": 1})
    assert base == reach.AgentNotFound("x", suggestion="s", details={"a": 1})
    assert base != reach.AgentUnavailable("x", suggestion="s", details={"a": 1})
    assert base != reach.AgentNotFound("y", suggestion="s", details={"a": 1})
    assert base != reach.AgentNotFound("x", suggestion="t", details={"a": 1})
    assert base != reach.AgentNotFound("x", suggestion="s", details={"a": 2})
    assert base != reach.AgentNotFound("x", severity=Severity.RETRYABLE, suggestion="s",
                                       details={"a": 1})


# -- the tree in the docstring -----------------------------------------------------------------


def _docstring_tree() -> list[tuple[int, str, str]]:
    """(depth, class name, rest of line) for each line of the tree in reach.errors' docstring."""
    doc = reach.errors.__doc__ or ""
    lines = doc.split("::", 1)[1].strip("\n").split("\n\n", 1)[0].splitlines()
    root_column = lines[0].index("ReachError")
    tree = []
    for line in lines:
        match = re.search(r"[A-Z]\w+", line)
        assert match is not None, f"no class name in tree line {line!r}"
        depth, rem = divmod(match.start() - root_column, 4)
        assert rem == 0, f"misaligned tree line {line!r}"
        tree.append((depth, match.group(), line[match.end():]))
    return tree


def test_the_docstring_tree_names_every_error_type_exactly_once() -> None:
    names = [name for _, name, _ in _docstring_tree()]
    assert len(names) == len(set(names))
    assert set(names) == {c.__name__ for c in ERROR_TYPES}


def test_the_docstring_tree_draws_each_error_under_its_base_class() -> None:
    by_name = {c.__name__: c for c in ERROR_TYPES}
    parents: list[str] = []
    for depth, name, _ in _docstring_tree():
        del parents[depth:]
        if parents:
            assert by_name[name].__bases__ == (by_name[parents[-1]],), name
        parents.append(name)


def test_severities_noted_in_the_docstring_tree_are_the_defaults() -> None:
    noted = {
        name: Severity(match.group(1))
        for _, name, rest in _docstring_tree()
        if (match := re.search(r"\((retryable|degradable|fatal)\)", rest))
    }
    assert len(noted) >= 4
    by_name = {c.__name__: c for c in ERROR_TYPES}
    assert {name: by_name[name].default_severity for name in noted} == noted
