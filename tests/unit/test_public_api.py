"""The public surface: reach.__all__ is sorted, complete, resolvable and documented."""

from __future__ import annotations

import inspect
from types import ModuleType

import reach


def _public_names() -> set[str]:
    """Names bound in reach's namespace that are neither private nor submodules.

    Names in ``__all__`` are resolved first, so that lazily loaded ones are bound too.
    """
    for name in reach.__all__:
        getattr(reach, name, None)
    return {
        name for name, value in vars(reach).items()
        if not name.startswith("_") and not isinstance(value, ModuleType)
    }


def test_all_is_sorted_as_python_sorts_it() -> None:
    assert reach.__all__ == sorted(reach.__all__)


def test_all_has_no_duplicates() -> None:
    assert len(reach.__all__) == len(set(reach.__all__))


def test_all_equals_the_public_names_plus_the_version() -> None:
    public = _public_names()
    assert sorted(public - set(reach.__all__)) == [], "public but not exported"
    assert sorted(set(reach.__all__) - public) == ["__version__"], "exported but not bound"


def test_every_exported_name_resolves() -> None:
    missing = [name for name in reach.__all__ if not hasattr(reach, name)]
    assert missing == []
    assert isinstance(reach.__version__, str)


def test_a_star_import_gives_exactly_all() -> None:
    namespace: dict[str, object] = {}
    exec("from reach import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(reach.__all__)


def _exported_callables() -> list[tuple[str, object]]:
    return [
        (name, obj) for name in reach.__all__
        if inspect.isclass(obj := getattr(reach, name)) or inspect.isfunction(obj)
    ]


def test_every_exported_class_and_function_has_its_own_docstring() -> None:
    exported = _exported_callables()
    assert len(exported) >= 25
    undocumented = [name for name, obj in exported if not (obj.__doc__ or "").strip()]
    assert undocumented == []


def test_every_public_method_of_an_exported_class_has_a_docstring() -> None:
    undocumented = []
    for name, cls in _exported_callables():
        if not inspect.isclass(cls):
            continue
        for attr, value in vars(cls).items():
            function = value.__func__ if isinstance(value, classmethod | staticmethod) else value
            if attr.startswith("_") or not inspect.isfunction(function):
                continue
            if not (function.__doc__ or "").strip():
                undocumented.append(f"{name}.{attr}")
    assert undocumented == []
