"""Codec cost per envelope: reach (encode + decode + validate) beside plain pickle, same run.

Run as ``python -m reach.bench.codec [--quick] [--out DIR]`` (or ``reach bench --only codec``);
it needs no Ray. Each case is timed for about 0.3 s per repeat, best of five (``--quick``: 0.05 s,
best of two); figures are microseconds per envelope, each said as it is timed. Results go to
``codec.json`` in the results folder (see :mod:`reach.bench.results`).
"""

from __future__ import annotations

import argparse
import math
import pickle
import platform
import sys
import time
from collections.abc import Callable, Sequence
from importlib.metadata import version
from typing import Any

from pydantic import BaseModel

from reach.bench.results import add_out, write
from reach.codec import Codec
from reach.protocol import Envelope
from reach.schemas import SchemaRegistry

REPEATS = 5
SECONDS_PER_REPEAT = 0.3
BATCH_SIZES = (1, 10, 100)
SCHEMA = "order.line@1.0"


class OrderLine(BaseModel):
    """The benchmark's payload: a short order line."""

    order_id: str
    description: str
    quantity: int


def _envelope(i: int) -> Envelope:
    payload = {"order_id": f"A-{1024 + i}", "description": "无线蓝牙耳机（黑色）", "quantity": 2}
    return Envelope.request("router", "order-agent", payload, SCHEMA, timeout_ms=5000,
                            session_id="s-42", hops=("driver", "router"))


def _best_us_per_call(fn: Callable[[], object], repeats: int = REPEATS,
                      seconds: float = SECONDS_PER_REPEAT) -> float:
    """Best time of one call to ``fn`` over ``repeats`` timed loops, in microseconds."""
    loops, elapsed = 1, 0.0
    while elapsed < 0.05:
        loops *= 2
        start = time.perf_counter()
        for _ in range(loops):
            fn()
        elapsed = time.perf_counter() - start
    loops = max(1, int(loops * seconds / elapsed))
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(loops):
            fn()
        best = min(best, time.perf_counter() - start)
    return best / loops * 1e6


def _timed(case: str, what: str, fn: Callable[[], object], *, n: int, repeats: int,
           seconds: float) -> float:
    """Times ``fn`` (``n`` envelopes a call); says and returns microseconds per envelope."""
    us = _best_us_per_call(fn, repeats, seconds) / n
    print(f"  {case}: {what} {us:.2f} µs per envelope ({1e6 / us:,.0f} envelopes/s)", flush=True)
    return us


def _case(codec: Codec, schemas: SchemaRegistry, size: int | None, repeats: int = REPEATS,
          seconds: float = SECONDS_PER_REPEAT) -> dict[str, Any]:
    """Times one case: a single frame (``size`` None) or a batch frame of ``size`` envelopes."""
    envelopes = [_envelope(i) for i in range(size or 1)]
    as_dicts = [e.model_dump(mode="json") for e in envelopes]
    if size is None:
        frame = codec.encode(envelopes[0])
        pickled = pickle.dumps(as_dicts[0], protocol=pickle.HIGHEST_PROTOCOL)

        def reach_round() -> list[Envelope]:
            return [codec.decode(codec.encode(envelopes[0]))]

        def pickle_round() -> object:
            return pickle.loads(pickle.dumps(as_dicts[0], protocol=pickle.HIGHEST_PROTOCOL))
    else:
        frame = codec.encode_batch(envelopes)
        pickled = pickle.dumps(as_dicts, protocol=pickle.HIGHEST_PROTOCOL)

        def reach_round() -> list[Envelope]:
            return codec.decode_batch(codec.encode_batch(envelopes))

        def pickle_round() -> object:
            return pickle.loads(pickle.dumps(as_dicts, protocol=pickle.HIGHEST_PROTOCOL))

    def reach_with_schema() -> list[BaseModel]:
        return [schemas.read(e.payload, e.payload_schema, SCHEMA) for e in reach_round()]

    assert reach_round() == envelopes
    assert [m.model_dump() for m in reach_with_schema()] == [e.payload for e in envelopes]
    n = len(envelopes)
    label = "single" if size is None else f"batch {size}"
    reach_us, schema_us, pickle_us = (
        _timed(label, what, fn, n=n, repeats=repeats, seconds=seconds)
        for what, fn in (("reach", reach_round), ("reach + schema", reach_with_schema),
                         ("pickle", pickle_round)))
    return {
        "envelopes": n,
        "reach_us": round(reach_us, 2),
        "reach_schema_us": round(schema_us, 2),
        "pickle_us": round(pickle_us, 2),
        "reach_over_pickle": round(reach_us / pickle_us, 1),
        "frame_bytes_per_envelope": round(len(frame) / n, 1),
        "pickle_bytes_per_envelope": round(len(pickled) / n, 1),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Runs every case, prints a table and writes the JSON results; returns the exit status."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter timing, rougher figures")
    add_out(parser)
    args = parser.parse_args(argv)
    repeats, seconds = (2, 0.05) if args.quick else (REPEATS, SECONDS_PER_REPEAT)
    codec, schemas = Codec(), SchemaRegistry()
    schemas.register(SCHEMA, OrderLine)
    cases: dict[str, dict[str, Any]] = {}
    for name, size in [("single", None)] + [(f"batch {n}", n) for n in BATCH_SIZES]:
        cases[name] = _case(codec, schemas, size, repeats, seconds)

    print("µs per envelope (encode + decode + validate; best of "
          f"{repeats} × ~{seconds} s); +schema also reads the payload's schema\n")
    print(f"{'case':<10} {'reach':>8} {'+schema':>9} {'pickle':>8} {'reach/pickle':>13} "
          f"{'bytes':>7} {'pickle bytes':>13}")
    for name, row in cases.items():
        print(f"{name:<10} {row['reach_us']:>8.2f} {row['reach_schema_us']:>9.2f} "
              f"{row['pickle_us']:>8.2f} {row['reach_over_pickle']:>12.1f}x "
              f"{row['frame_bytes_per_envelope']:>7.1f} {row['pickle_bytes_per_envelope']:>13.1f}")

    report = {
        "unit": "microseconds per envelope",
        "columns": {
            "reach_us": "Codec encode + decode (envelope validation included)",
            "reach_schema_us": "reach_us plus SchemaRegistry.read of each payload",
            "pickle_us": "pickle dumps + loads of the envelope's fields as a plain dict",
        },
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "msgpack": version("msgpack"),
        "pydantic": version("pydantic"),
        "repeats": repeats,
        "cases": cases,
    }
    print()
    write(args, "codec", report, ensure_ascii=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
