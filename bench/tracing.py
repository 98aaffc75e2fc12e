"""What tracing costs: the packed seed scenario with tracing off, at 1% and at 100% sampling.

The benchmark is ``reach.bench.tracing``; this entry point runs it with its results in this
folder's results/: ``python bench/tracing.py --help`` lists its options.
"""

import sys
from pathlib import Path

from reach.bench import run_benchmark

RESULTS = Path(__file__).resolve().parent / "results"

if __name__ == "__main__":
    sys.exit(run_benchmark("tracing", sys.argv[1:], out=RESULTS))
