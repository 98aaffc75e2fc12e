"""I/O-bound handlers: 20 agents whose handler awaits 0.5 s (as a model call would), 2,000

The benchmark is ``reach.bench.io_bound``; this entry point runs it with its results in this
folder's results/: ``python bench/io_bound.py --help`` lists its options.
"""

import sys
from pathlib import Path

from reach.bench import run_benchmark

RESULTS = Path(__file__).resolve().parent / "results"

if __name__ == "__main__":
    sys.exit(run_benchmark("io_bound", sys.argv[1:], out=RESULTS))
