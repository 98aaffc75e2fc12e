"""reach from outside: A2A ``SendMessage`` through the gateway, beside the direct reach client.

The benchmark is ``reach.bench.gateway``; this entry point runs it with its results in this
folder's results/: ``python bench/gateway.py --help`` lists its options.
"""

import sys
from pathlib import Path

from reach.bench import run_benchmark

RESULTS = Path(__file__).resolve().parent / "results"

if __name__ == "__main__":
    sys.exit(run_benchmark("gateway", sys.argv[1:], out=RESULTS))
