"""The trace store's index at 100k spans and more: spans added per second, query latencies, and
memory per 100k spans.

Run as ``python -m reach.bench.trace_store [--spans N] [--batch N] [--quick] [--out DIR]`` (or
``reach bench --only trace_store``); it needs no Ray: it measures the index the store's process
runs (:mod:`actors.trace_index`), given what a store receives. The synthetic spans are a
request's four (the driver's send to one of 10 routers, the router's handler run, its send to
one of the 10 holders of one of 20 capabilities, that agent's handler run) with the attributes
reach sets, one trace in ten on a task and one in fifty in error; they arrive in pickled
batches, as Ray's calls carry them, so that no string is shared that a store would not share.

Figures: spans added per second, unbounded and at the default bound (dropping as it adds); the
median and p95 of each query over 100k held spans; the memory the held spans and the index take
(``tracemalloc``'s count, beside the index's own estimate); how many spans the default 64 MiB
holds. Results go to ``trace_store.json`` in the results folder (see
:mod:`reach.bench.results`).
"""

from __future__ import annotations

import argparse
import gc
import pickle
import platform
import random
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable, Sequence
from typing import Any

from actors.trace_index import DEFAULT_MAX_BYTES, TraceIndex
from reach.bench.results import add_out, write
from reach.spans import Attr, SpanKind, SpanName, SpanRecord, SpanStatus

#: Synthetic spans arrive at this rate (their start times and arrival are spread by it).
SPANS_PER_S = 1000
ROUTERS = 10
CAPABILITIES = 20
HOLDERS = 10


def _trace(rng: random.Random, t: int, start_ns: int) -> list[SpanRecord]:
    """One request's four spans, children first (as they end, and so arrive)."""
    trace_id = rng.getrandbits(128).to_bytes(16, "big").hex()
    ids = [rng.getrandbits(64).to_bytes(8, "big").hex() for _ in range(4)]
    cap = rng.randrange(CAPABILITIES)
    router, agent = f"router-{rng.randrange(ROUTERS)}", f"agent-{cap}-{rng.randrange(HOLDERS)}"
    capability = f"bench.cap{cap}.ask"
    failed = t % 50 == 0
    common: dict[str, str | int | float | bool] = {str(Attr.PAYLOAD_SCHEMA): f"{capability}@1.0",
                                                   str(Attr.MSG_TYPE): "request"}
    if t % 10 == 0:
        common[str(Attr.TASK_ID)] = f"task-{t:08d}"

    def attrs(sender: str, to: str, server: bool) -> dict[str, str | int | float | bool]:
        found = {**common, str(Attr.SENDER): sender, str(Attr.AGENT_ID): to,
                 str(Attr.CAPABILITY): capability,
                 str(Attr.MSG_ID): rng.getrandbits(128).to_bytes(16, "big").hex()}
        if server:
            found |= {str(Attr.HOST): f"reach.pool.default.{rng.randrange(8)}",
                      str(Attr.NODE): "ab" * 28, str(Attr.EPOCH): 3, str(Attr.ATTEMPT): 1,
                      str(Attr.QUEUED_MS): round(rng.random(), 3)}
        else:
            found[str(Attr.RECEIVER)] = capability
        return found

    us = 1000
    error = SpanStatus.ERROR if failed else SpanStatus.OK
    return [
        SpanRecord(trace_id, ids[3], ids[2], f"{SpanName.HANDLE} {capability}@1.0",
                   SpanKind.SERVER, start_ns + 300 * us, start_ns + 700 * us, status=error,
                   status_message="handler_error: it broke" if failed else "",
                   process="reach.pool.default.1", attributes=attrs(router, agent, True)),
        SpanRecord(trace_id, ids[2], ids[1], f"{SpanName.SEND} {capability}", SpanKind.CLIENT,
                   start_ns + 200 * us, start_ns + 800 * us, status=error,
                   process="reach.pool.default.0", attributes=attrs(router, agent, False)),
        SpanRecord(trace_id, ids[1], ids[0], f"{SpanName.HANDLE} bench.route@1.0",
                   SpanKind.SERVER, start_ns + 100 * us, start_ns + 900 * us,
                   process="reach.pool.default.0", attributes=attrs("driver:bench", router, True)),
        SpanRecord(trace_id, ids[0], None, f"{SpanName.SEND} bench.route", SpanKind.CLIENT,
                   start_ns, start_ns + 1000 * us, process="driver:bench",
                   attributes=attrs("driver:bench", router, False)),
    ]


def _batches(n: int, batch: int, seed: int = 1) -> list[tuple[bytes, int]]:
    """``n`` spans in pickled batches of ``batch``, each with when it arrives (ns)."""
    rng = random.Random(seed)
    spans: list[SpanRecord] = []
    t = 0
    while len(spans) < n:
        spans += _trace(rng, t, t * 4 * 10**9 // SPANS_PER_S)
        t += 1
    return [(pickle.dumps(spans[i:i + batch], protocol=5), spans[i].start_ns)
            for i in range(0, n, batch)]


def _add_all(index: TraceIndex, batches: Sequence[tuple[bytes, int]]) -> float:
    """Adds every batch (unpickled first, untimed); seconds the adds took."""
    loaded = [(pickle.loads(blob), at) for blob, at in batches]
    took = 0.0
    for spans, at in loaded:
        start = time.perf_counter()
        index.add(spans, at)
        took += time.perf_counter() - start
    return took


def _held_bytes(batches: Sequence[tuple[bytes, int]], max_bytes: int) -> tuple[int, TraceIndex]:
    """What an index holding ``batches`` takes in memory (``tracemalloc``), and the index."""
    gc.collect()
    tracemalloc.start()
    index = TraceIndex(max_bytes)
    base = tracemalloc.get_traced_memory()[0]
    for blob, at in batches:
        index.add(pickle.loads(blob), at)
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    return held, index


def _latency(fn: Callable[[], object], repeats: int) -> dict[str, float]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    times.sort()
    return {"p50_ms": round(statistics.median(times), 3),
            "p95_ms": round(times[min(len(times) - 1, int(len(times) * 0.95))], 3)}


def _queries(index: TraceIndex, repeats: int) -> dict[str, dict[str, float]]:
    """The median and p95 of each query, in ms."""
    held = index.held()
    rng = random.Random(2)
    newest = max(s.start_ns for s in held)
    some = [s.trace_id for s in rng.sample(held, min(len(held), 100))]
    agent = str(held[-1].attributes[Attr.AGENT_ID])
    cases: dict[str, Callable[[], object]] = {
        "trace": lambda: index.trace(rng.choice(some)),
        "recent_50": index.find_traces,
        "slowest_50": lambda: index.find_traces(slowest=True),
        "by_agent": lambda: index.find_traces(agent=agent),
        "by_capability_errors": lambda: index.find_traces(capability="bench.cap3.ask",
                                                          status=SpanStatus.ERROR),
        "by_task": lambda: index.find_traces(task_id="task-00000010"),
        "last_minute": lambda: index.find_traces(since_ns=newest - 60 * 10**9),
        "edges_last_minute": lambda: index.edges(newest - 60 * 10**9, newest),
    }
    found = {}
    for name, fn in cases.items():
        found[name] = _latency(fn, repeats)
        print(f"  {name}: p50 {found[name]['p50_ms']:.3f} ms, p95 {found[name]['p95_ms']:.3f} ms",
              flush=True)
    return found


def main(argv: Sequence[str] | None = None) -> int:
    """Measures the index; prints the figures and writes the JSON results."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--spans", type=int, default=100_000, help="spans held (default 100k)")
    parser.add_argument("--batch", type=int, default=100, help="spans a call (default 100)")
    parser.add_argument("--quick", action="store_true", help="10k spans, fewer repeats")
    add_out(parser)
    args = parser.parse_args(argv)
    n = 10_000 if args.quick else args.spans
    repeats = 10 if args.quick else 50
    batches = _batches(n, args.batch)
    print(f"{n:,} spans in batches of {args.batch}", flush=True)

    index = TraceIndex(1 << 60)
    took = _add_all(index, batches)
    rate = n / took
    print(f"  added, unbounded: {rate:,.0f} spans/s", flush=True)
    queries = _queries(index, repeats)
    del index

    measured, held = _held_bytes(batches, 1 << 60)
    per_100k = measured * 100_000 / n
    estimate_per_100k = held.bytes * 100_000 / n
    print(f"  memory: {per_100k / 2**20:.1f} MiB per 100k spans held "
          f"(the index's estimate: {estimate_per_100k / 2**20:.1f} MiB)", flush=True)
    del held

    # At the default bound: three times what it holds goes through, the oldest dropped.
    per_span = max(1, int(estimate_per_100k / 100_000))
    through = 3 * DEFAULT_MAX_BYTES // per_span if not args.quick else 3 * n
    bound = DEFAULT_MAX_BYTES if not args.quick else n * per_span // 3
    bounded = TraceIndex(bound)
    more = _batches(through, args.batch, seed=3)
    took = _add_all(bounded, more)
    stats = bounded.stats()
    bounded_rate = stats.received / took
    print(f"  added at a bound of {bound / 2**20:.0f} MiB: {bounded_rate:,.0f} spans/s; "
          f"{stats.spans:,} spans held, {stats.dropped:,} dropped", flush=True)
    del bounded, more
    measured_at_bound, at_bound = _held_bytes(_batches(through, args.batch, seed=3), bound)

    report: dict[str, Any] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "spans": n,
        "batch": args.batch,
        "added_spans_per_s": round(rate),
        "queries_over_held": queries,
        "memory": {
            "bytes_per_100k_spans": round(per_100k),
            "mib_per_100k_spans": round(per_100k / 2**20, 1),
            "estimated_bytes_per_100k_spans": round(estimate_per_100k),
            "estimate_over_measured": round(estimate_per_100k / per_100k, 2),
        },
        "bounded": {
            "max_bytes": bound,
            "spans_through": stats.received,
            "added_spans_per_s": round(bounded_rate),
            "spans_held": stats.spans,
            "traces_held": stats.traces,
            "dropped": stats.dropped,
            "measured_bytes": measured_at_bound,
            "measured_over_bound": round(measured_at_bound / bound, 2),
            "spans_held_traced_run": at_bound.stats().spans,
        },
    }
    print(f"  at the bound: {measured_at_bound / 2**20:.1f} MiB measured for "
          f"{bound / 2**20:.0f} MiB estimated", flush=True)
    write(args, "trace_store", report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
