"""The trace store's index at 100k spans: spans added per second, query latencies, memory per
100k spans.

The benchmark is ``reach.bench.trace_store``; this entry point runs it with its results in this
folder's results/: ``python bench/trace_store.py --help`` lists its options.
"""

import sys
from pathlib import Path

from reach.bench import run_benchmark

RESULTS = Path(__file__).resolve().parent / "results"

if __name__ == "__main__":
    sys.exit(run_benchmark("trace_store", sys.argv[1:], out=RESULTS))
