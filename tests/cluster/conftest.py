"""The cluster tests import the helpers in the checkout's cluster/ folder (not a package)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "cluster"))
