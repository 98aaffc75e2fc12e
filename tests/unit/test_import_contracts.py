"""The import contracts (pyproject.toml's ``[tool.importlinter]``, checked by ``lint-imports`` in
``make lint``) hold, and they catch what they are there to catch.

Each test copies reach, actors and policies into a folder of its own, adds one import that
breaks a rule, and runs import-linter on the copy: it must fail, naming that import. What
import-linter cannot see is checked here too: no module of reach imports the package's own
``__init__`` (which imports everything).
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("reach", "actors", "policies")
LINT = Path(sys.executable).with_name("lint-imports")


def _copy(tmp_path: Path) -> Path:
    for pkg in PACKAGES:
        shutil.copytree(ROOT / pkg, tmp_path / pkg,
                        ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def _lint(where: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(where)}
    return subprocess.run([str(LINT), "--no-cache"], cwd=where, env=env, capture_output=True,
                          text=True, timeout=300, check=False)


def _add(where: Path, module: str, line: str) -> None:
    path = where / Path(*module.split(".")).with_suffix(".py")
    if not path.exists():
        path = where / Path(*module.split(".")) / "__init__.py"
    path.write_text(path.read_text(encoding="utf-8") + f"\n{line}\n", encoding="utf-8")


def test_the_contracts_hold_on_the_code_as_it_is(tmp_path: Path) -> None:
    done = _lint(_copy(tmp_path))
    assert done.returncode == 0, done.stdout[-4000:]
    assert "0 broken" in done.stdout


@pytest.mark.parametrize(("module", "line", "named"), [
    # the protocol core names a runtime type (type-only imports count)
    ("reach.records", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
     "    from reach.driver import Driver", "reach.records -> reach.driver"),
    # a policy reaches for a process
    ("policies.routing", "from reach._runtime.transport import Transport",
     "policies.routing -> reach._runtime.transport"),
    # the seam imports a feature
    ("reach._ray", "from reach.a2a.client.models import A2AMessage",
     "reach._ray -> reach.a2a.client.models"),
    # one feature imports another (inside a function counts too)
    ("reach.a2a.client.models", "def f() -> None:\n    import reach.remote.wire",
     "reach.a2a.client.models -> reach.remote.wire"),
    # a port names an upper layer
    ("reach.ports.hosts", "from reach.client import Client", "reach.ports.hosts -> reach.client"),
], ids=["core_to_runtime", "policy_to_process", "seam_to_feature", "feature_to_feature",
        "port_to_client"])
def test_an_upward_import_breaks_the_layers(tmp_path: Path, module: str, line: str,
                                            named: str) -> None:
    where = _copy(tmp_path)
    _add(where, module, line)
    done = _lint(where)
    assert done.returncode == 1, done.stdout[-4000:]
    assert named in done.stdout, done.stdout[-4000:]


def test_ray_outside_the_seam_breaks_a_contract(tmp_path: Path) -> None:
    where = _copy(tmp_path)
    _add(where, "reach.driver", "import ray")
    done = _lint(where)
    assert done.returncode == 1
    assert "reach.driver -> ray" in done.stdout, done.stdout[-4000:]


def _package_init_imports(path: Path) -> list[str]:
    """The imports in ``path`` of reach's package ``__init__`` itself: ``import reach`` and
    ``from reach import <a name that is not a module>``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [f"{node.lineno}: import reach" for a in node.names if a.name == "reach"]
        elif isinstance(node, ast.ImportFrom) and node.module == "reach" and node.level == 0:
            for alias in node.names:
                if not ((ROOT / "reach" / alias.name).is_dir()
                        or (ROOT / "reach" / f"{alias.name}.py").is_file()):
                    found.append(f"{node.lineno}: from reach import {alias.name}")
    return found


def test_no_module_imports_reachs_package_init_but_the_load_order_of_policies_and_actors() -> None:
    # The benchmarks are written as a user writes, against the public names: they sit above
    # the package's __init__, which imports nothing of them.
    init = (ROOT / "reach" / "__init__.py").read_text(encoding="utf-8")
    assert "reach.bench" not in init
    files = [p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))
             if "bench" not in p.relative_to(ROOT).parts]
    found = {str(p.relative_to(ROOT)): _package_init_imports(p) for p in files}
    found = {path: lines for path, lines in found.items() if lines}
    assert found == {"actors/__init__.py": ["7: import reach"],
                     "policies/__init__.py": ["12: import reach"]}


def test_the_checker_sees_an_import_of_the_package_init(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("from reach import clock\nfrom reach import Agent\nimport reach\n")
    assert _package_init_imports(probe) == ["2: from reach import Agent", "3: import reach"]
