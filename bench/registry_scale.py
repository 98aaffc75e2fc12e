"""Registry scale: 10,000 packed agents registered on one machine.

The benchmark is ``reach.bench.registry_scale``; this entry point runs it with its results in this
folder's results/: ``python bench/registry_scale.py --help`` lists its options.
"""

import sys
from pathlib import Path

from reach.bench import run_benchmark

RESULTS = Path(__file__).resolve().parent / "results"

if __name__ == "__main__":
    sys.exit(run_benchmark("registry_scale", sys.argv[1:], out=RESULTS))
