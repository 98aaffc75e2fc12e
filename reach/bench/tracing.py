"""What tracing costs: the seed scenario's packed contestant with tracing off, sampling 1% of
traces, and sampling all of them, in one run.

Each contestant is the seed scenario's packed round (20 agents in a pool of 2 hosts, security
off, 100 requests in flight; see :mod:`reach.bench.seed_scenario`), run by a driver of its own
whose ``reach.init(tracing=...)`` says how every process of the round traces: ``off``
(``tracing=False``: the API's no-op), ``sampled_1pct`` and ``sampled_100pct`` (the SDK, a
parent-based ratio sampler, and the spans batched to the cluster's trace store; no OTLP
collector). They take turns, ``--rounds`` times each in alternating order, each reporting its
best round. Prints msg/s and latency for each, and the throughput each sampling costs against
``off``; writes ``tracing.json`` into the results folder (:mod:`reach.bench.results`). Run:
``python -m reach.bench.tracing [--messages N] [--inflight K] [--address ADDR] [--quick]
[--out DIR]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from typing import Any

import reach
from reach.bench.anchors import gcs_address
from reach.bench.quiet import settle
from reach.bench.results import add_out, write
from reach.bench.seed_scenario import AGENTS, run_reach, show
from reach.bench.seed_scenario import run_contestant as _seed_round

#: Each contestant's tracing (None: off).
SAMPLING: dict[str, float | None] = {"off": None, "sampled_1pct": 0.01, "sampled_100pct": 1.0}
CONTESTANTS = tuple(SAMPLING)


async def contestant(args: argparse.Namespace) -> dict[str, Any]:
    """One round of one contestant, in this (child) driver process."""
    name = f"tr-{args.contestant}-{args.round}"
    ratio = SAMPLING[args.contestant]
    tracing: reach.Tracing | bool = False if ratio is None else reach.Tracing(sample_ratio=ratio)
    rt = reach.init(address=args.address, log_to_driver=False, sign=False, encrypt=False,
                    audit_calls=False, tracing=tracing)
    result = await run_reach(rt, reach.Packed(pool=name, size=2), name, args.messages,
                             args.inflight)
    await rt.close()
    return result


async def conduct(args: argparse.Namespace) -> dict[str, Any]:
    """Runs every round of every contestant; their best rounds, compared."""
    rt = reach.init(address=args.address, log_to_driver=False, sign=False, tracing=False)
    address = args.address or gcs_address()
    await rt.agents()  # reach.init returns before its registry is up
    best: dict[str, Any] = {}
    print(f"{AGENTS} packed agents, {args.inflight} requests in flight, {args.messages} "
          "messages each")
    for round_ in range(args.rounds):
        order = CONTESTANTS if round_ % 2 == 0 else CONTESTANTS[::-1]
        for name in order:
            await settle()
            result = _seed_round(name, address, args, round_, module="reach.bench.tracing")
            show(f"{name} #{round_ + 1}", result)
            if name not in best or result["msgs_per_s"] > best[name]["msgs_per_s"]:
                best[name] = result
    off = best["off"]["msgs_per_s"]
    for name in CONTESTANTS:
        best[name]["cost_vs_off"] = round(1 - best[name]["msgs_per_s"] / off, 3)
        show(name, best[name])
    print("cost of tracing vs off: " + ", ".join(
        f"{name} {best[name]['cost_vs_off']:.1%}" for name in CONTESTANTS[1:]))
    await rt.close()
    return {name: best[name] for name in CONTESTANTS}


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the comparison (or, with ``--contestant``, one round of one contestant)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--inflight", type=int, default=100)
    parser.add_argument("--address", default=None)
    parser.add_argument("--quick", action="store_true",
                        help="1,000 messages, 50 in flight, one round; figures to quick/")
    parser.add_argument("--rounds", type=int, default=3,
                        help="turns each contestant takes (its best one is reported)")
    parser.add_argument("--contestant", choices=CONTESTANTS, default=None,
                        help="run one round of one contestant (a child driver), print its JSON")
    parser.add_argument("--round", type=int, default=0, help=argparse.SUPPRESS)
    add_out(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.messages, args.inflight, args.rounds = 1000, 50, 1
    if args.contestant:
        print(json.dumps(asyncio.run(contestant(args))), flush=True)
        return 0
    write(args, "tracing", asyncio.run(conduct(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
