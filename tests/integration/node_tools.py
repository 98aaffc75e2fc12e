"""Node and npm for the JavaScript tests: found on the PATH, or installed with apt-get where they
are missing and this runs as root (as the ``ray up`` test installs ssh); Debian's ``nodejs``
comes without ``npm``, so both are asked for.

A test needing them is marked :data:`needs_node`. It is skipped where they cannot be had only
outside CI: in CI (``CI`` set) it runs and fails, since a skip there would hide that the suite
did not test what it claims to.
"""

from __future__ import annotations

import shutil

import pytest
from apt_tools import IN_CI, apt_install

PACKAGES = ("nodejs", "npm")


def _find() -> tuple[str | None, str | None]:
    if shutil.which("node") is None or shutil.which("npm") is None:
        apt_install(PACKAGES)
    return shutil.which("node"), shutil.which("npm")


NODE, NPM = _find()

#: Skips a test where node or npm cannot be had, except in CI, where it runs (and fails).
needs_node = pytest.mark.skipif((NODE is None or NPM is None) and not IN_CI,
                                reason="node and npm are needed (Node 20 or later on the PATH)")
