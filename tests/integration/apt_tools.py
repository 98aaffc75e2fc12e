"""Debian packages the integration tests need (node, Prometheus, Chromium): installed with apt-get
where they are missing and this runs as root, as the ``ray up`` test installs ssh; elsewhere
nothing is done, and the tests needing them say so. ``IN_CI``: whether this runs in CI (``CI``
set), where a test that cannot have what it needs runs and fails instead of being skipped."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence

IN_CI = bool(os.environ.get("CI"))


def apt_install(packages: Sequence[str]) -> None:
    """Installs ``packages`` with apt-get (updating its lists once if the first try fails);
    nothing where this is not root or has no apt-get."""
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "--no-install-recommends", *packages]
    if subprocess.run(install, env=env, capture_output=True, check=False).returncode != 0:
        subprocess.run(["apt-get", "update"], env=env, capture_output=True, check=False)
        subprocess.run(install, env=env, capture_output=True, check=False)
