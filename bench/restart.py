"""Restart latency: from an agent's death to its new incarnation's first reply, as a caller sees it.

The benchmark is ``reach.bench.restart``; this entry point runs it with its results in this
folder's results/: ``python bench/restart.py --help`` lists its options.
"""

import sys
from pathlib import Path

from reach.bench import run_benchmark

RESULTS = Path(__file__).resolve().parent / "results"

if __name__ == "__main__":
    sys.exit(run_benchmark("restart", sys.argv[1:], out=RESULTS))
