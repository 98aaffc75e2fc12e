"""``python -m reach.remote``: the same as ``reach connect`` (see :mod:`reach.remote.cli`)."""

from __future__ import annotations

import sys

from reach.remote.cli import main_connect

if __name__ == "__main__":
    sys.exit(main_connect())
