"""Where a benchmark's figures go: ``--out`` (``bench/results`` under the current folder by
default), in its ``quick/`` subfolder for a ``--quick`` run, so a quick run never overwrites a
full run's figures. The files' format is what ``reach.tools.benchchart`` and the README read."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

#: The results folder when ``--out`` is not given, relative to the current folder.
DEFAULT_OUT = Path("bench") / "results"


def add_out(parser: argparse.ArgumentParser) -> None:
    """Adds ``--out`` to a benchmark's command line."""
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help=f"results folder (default {DEFAULT_OUT}); a --quick run writes "
                             "into its quick/ subfolder")


def folder(out: Path, quick: bool) -> Path:
    """The folder a run's JSON goes to."""
    return out / "quick" if quick else out


def write(args: argparse.Namespace, name: str, figures: dict[str, Any], *,
          ensure_ascii: bool = True) -> Path:
    """Writes ``figures`` as ``<name>.json`` where ``args`` (``out``, ``quick``) say, prints
    where, and returns the path."""
    path = folder(args.out, args.quick) / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(figures, indent=2, ensure_ascii=ensure_ascii) + "\n",
                    encoding="utf-8")
    print(f"wrote {path}", flush=True)
    return path
