"""Sessions: appended messages/s with group commit and with one commit per message, and

The benchmark is ``reach.bench.sessions``; this entry point runs it with its results in this
folder's results/: ``python bench/sessions.py --help`` lists its options.
"""

import sys
from pathlib import Path

from reach.bench import run_benchmark

RESULTS = Path(__file__).resolve().parent / "results"

if __name__ == "__main__":
    sys.exit(run_benchmark("sessions", sys.argv[1:], out=RESULTS))
