"""Chromium for the observer's browser tests: Debian's ``chromium`` found on the PATH, or
installed with apt-get where it is missing and this runs as root (as :mod:`node_tools` installs
node and npm). Playwright drives it as its ``executable_path``: Playwright's own browser
download is never used (``playwright install`` is not run anywhere).

A test needing it is marked :data:`needs_chromium`. It is skipped where Chromium or Playwright
cannot be had only outside CI: in CI (``CI`` set) it runs and fails, since a skip there would
hide that the suite did not test what it claims to.
"""

from __future__ import annotations

import importlib.util
import shutil

import pytest
from apt_tools import IN_CI, apt_install

PACKAGES = ("chromium",)
NAMES = ("chromium", "chromium-browser")


def _which() -> str | None:
    return next((path for path in map(shutil.which, NAMES) if path), None)


def _find() -> str | None:
    if _which() is None:
        apt_install(PACKAGES)
    return _which()


CHROMIUM = _find()
PLAYWRIGHT = importlib.util.find_spec("playwright") is not None
#: The flags Chromium runs with here: no sandbox (the tests run as root, where Chromium's
#: sandbox refuses to start) and no GPU.
FLAGS = ("--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage")

#: Skips a test where Chromium or Playwright cannot be had, except in CI, where it runs (and
#: fails).
needs_chromium = pytest.mark.skipif(
    (CHROMIUM is None or not PLAYWRIGHT) and not IN_CI,
    reason="Debian's chromium (apt-get install chromium, as root) and Playwright for Python "
           "(the dev extra) are needed")
