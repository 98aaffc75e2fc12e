"""Imports follow the layering: one seam to Ray, and decisions and the wire free of the runtime.

- ``reach/_ray.py`` is the only module that imports Ray, anywhere in reach, actors or policies;
- ``reach/_ray.py`` and ``reach/testing.py`` (the two implementations of ``reach.ports``)
  are the only modules of reach that import ``actors``;
- ``policies`` imports neither Ray nor actors; reach's protocol modules import none of the three.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROTOCOL_MODULES = ("errors.py", "protocol.py", "schemas.py", "codec.py")


def forbidden_imports(source: str, forbidden: set[str]) -> list[str]:
    """The imports in ``source`` whose top-level package is in ``forbidden``, as ``line: module``.

    Imports anywhere count, including those inside functions and ``if TYPE_CHECKING`` blocks.
    Relative imports stay inside their own package, so they never count.
    """
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module]
        else:
            continue
        found += [f"{node.lineno}: {m}" for m in modules if m.split(".")[0] in forbidden]
    return found


def _violations(files: list[Path], forbidden: set[str]) -> dict[str, list[str]]:
    found = {
        str(path.relative_to(ROOT)): forbidden_imports(path.read_text(encoding="utf-8"), forbidden)
        for path in files
    }
    return {path: bad for path, bad in found.items() if bad}


def test_policies_import_neither_ray_nor_actors() -> None:
    files = sorted((ROOT / "policies").rglob("*.py"))
    assert files, "no .py files found under policies/"
    assert ROOT / "policies" / "__init__.py" in files
    assert _violations(files, {"ray", "actors"}) == {}


SEAMS = tuple(sorted((ROOT / "reach" / "_ray").rglob("*.py")))
SEAM = ROOT / "reach" / "_ray" / "__init__.py"
CLUSTERS = (*SEAMS, *sorted((ROOT / "reach" / "testing").rglob("*.py")))
# The benchmarks' anchors: plain Ray, measured side by side with reach (a tool, not the runtime).
ANCHORS = ROOT / "reach" / "bench" / "anchors.py"
# The sessions benchmark measures the store's storage layer and actor directly.
STORE_BENCH = ROOT / "reach" / "bench" / "sessions.py"


def test_only_the_seam_imports_ray_in_every_module_of_reach_actors_and_policies() -> None:
    files = sorted(p for pkg in ("reach", "actors", "policies") for p in (ROOT / pkg).rglob("*.py"))
    assert SEAM in files
    assert len(files) > 40
    assert _violations([f for f in files if f not in (*SEAMS, ANCHORS)], {"ray"}) == {}
    assert _violations([SEAM], {"ray"}) != {}  # the rule is checked on a module that does


def test_only_the_two_cluster_implementations_import_actors_from_reach() -> None:
    files = sorted((ROOT / "reach").rglob("*.py"))
    assert _violations([f for f in files if f not in (*CLUSTERS, STORE_BENCH)],
                       {"actors"}) == {}


def test_reach_protocol_modules_import_neither_ray_nor_actors_nor_policies() -> None:
    files = [ROOT / "reach" / name for name in PROTOCOL_MODULES]
    assert all(path.is_file() for path in files), files
    assert _violations(files, {"ray", "actors", "policies"}) == {}


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import ray", ["1: ray"]),
        ("import os, ray.util.metrics as m", ["1: ray.util.metrics"]),
        ("from ray import remote", ["1: ray"]),
        ("from ray.util import ActorPool", ["1: ray.util"]),
        ("from actors.host import AgentHost", ["1: actors.host"]),
        ("def start():\n    import actors\n", ["2: actors"]),
        ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import ray\n", ["3: ray"]),
    ],
    ids=["import", "dotted_alias", "from", "from_dotted", "actors", "in_function", "type_checking"],
)
def test_the_checker_flags_forbidden_imports(source: str, expected: list[str]) -> None:
    assert forbidden_imports(source, {"ray", "actors"}) == expected


@pytest.mark.parametrize(
    "source",
    ["import rayon", "from raylib import x", "import reach.actors_api", "from . import actors",
     "from .ray import x", "x = 'import ray'", "# import ray"],
    ids=["rayon", "raylib", "lookalike", "relative", "relative_ray", "string", "comment"],
)
def test_the_checker_lets_lookalikes_and_relative_imports_pass(source: str) -> None:
    assert forbidden_imports(source, {"ray", "actors"}) == []
