"""The benchmarks, as modules of the package: what ``reach bench`` runs, against a Ray of its own
or an existing cluster (``--address auto``), from a checkout or an installed wheel alike.

Each benchmark is the module ``reach.bench.<name>`` with a ``main(argv)`` entry point (``python -m
reach.bench.<name> --help`` lists its options), prints a progress line with its current rate every
few seconds (:mod:`reach.bench.progress`), and writes ``<name>.json`` into the results folder
(:mod:`reach.bench.results`), which ``reach.tools.benchchart`` draws. The agents they spawn live in
:mod:`reach.bench.agents`, importable by Ray's workers.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import cast

from reach.errors import ConfigError

#: Every benchmark, in the order ``reach bench`` runs them.
BENCHMARKS = ("codec", "trace_store", "seed_scenario", "registry_scale", "chaos", "sessions",
              "io_bound", "restart", "gateway", "remote_agent", "tracing")


def run_benchmark(name: str, argv: Sequence[str], *, out: Path | None = None) -> int:
    """Runs the benchmark ``name`` with the command line ``argv``; its exit status.

    ``out`` is the results folder unless ``argv`` names one (``--out``).

    Raises:
        ConfigError: ``name`` is not one of :data:`BENCHMARKS`.
    """
    if name not in BENCHMARKS:
        raise ConfigError(f"no benchmark {name!r}", suggestion=f"one of {', '.join(BENCHMARKS)}",
                          details={"setting": "benchmark"})
    module = importlib.import_module(f"reach.bench.{name}")
    main = cast(Callable[[list[str]], int], module.main)
    return main([*(["--out", str(out)] if out is not None else []), *argv])
