"""Chaos: tasks over supervised agents while a random agent or packed host is SIGKILLed.

The benchmark is ``reach.bench.chaos``; this entry point runs it with its results in this
folder's results/: ``python bench/chaos.py --help`` lists its options.
"""

import sys
from pathlib import Path

from reach.bench import run_benchmark

RESULTS = Path(__file__).resolve().parent / "results"

if __name__ == "__main__":
    sys.exit(run_benchmark("chaos", sys.argv[1:], out=RESULTS))
