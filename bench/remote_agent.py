"""Remote agents: 20 agents outside the cluster, each a Python-client process on the WebSocket

The benchmark is ``reach.bench.remote_agent``; this entry point runs it with its results in this
folder's results/: ``python bench/remote_agent.py --help`` lists its options.
"""

import sys
from pathlib import Path

from reach.bench import run_benchmark

RESULTS = Path(__file__).resolve().parent / "results"

if __name__ == "__main__":
    sys.exit(run_benchmark("remote_agent", sys.argv[1:], out=RESULTS))
