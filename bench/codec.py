"""Codec cost per envelope: reach (encode + decode + validate) beside plain pickle, same run.

The benchmark is ``reach.bench.codec``; this entry point runs it with its results in this
folder's results/: ``python bench/codec.py --help`` lists its options.
"""

import sys
from pathlib import Path

from reach.bench import run_benchmark

RESULTS = Path(__file__).resolve().parent / "results"

if __name__ == "__main__":
    sys.exit(run_benchmark("codec", sys.argv[1:], out=RESULTS))
