"""The JavaScript reference agent's own test suite (clients/js/test, Node's test runner) runs
with the rest: its wire (frames, the hello's signature against the documented test vector)
must stay what docs/wire.md says."""

from __future__ import annotations

import subprocess
from pathlib import Path

from node_tools import NPM, needs_node

JS = Path(__file__).resolve().parents[2] / "clients" / "js"


@needs_node
def test_the_javascript_reference_agent_passes_its_own_tests() -> None:
    assert NPM is not None
    if not (JS / "node_modules" / "ws" / "package.json").exists():
        installed = subprocess.run([NPM, "ci", "--no-audit", "--no-fund"], cwd=JS, check=False,
                                   capture_output=True, text=True, timeout=600)
        assert installed.returncode == 0, installed.stdout[-2000:] + installed.stderr[-2000:]
    run = subprocess.run([NPM, "test"], cwd=JS, check=False, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "# fail 0" in run.stdout
