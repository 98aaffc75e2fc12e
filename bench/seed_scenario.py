"""Seed scenario: 20 agents, 100 requests in flight, a small payload with Chinese text.

The benchmark is ``reach.bench.seed_scenario``; this entry point runs it with its results in this
folder's results/: ``python bench/seed_scenario.py --help`` lists its options.
"""

import sys
from pathlib import Path

from reach.bench import run_benchmark

RESULTS = Path(__file__).resolve().parent / "results"

if __name__ == "__main__":
    sys.exit(run_benchmark("seed_scenario", sys.argv[1:], out=RESULTS))
