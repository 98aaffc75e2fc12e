"""What tracing costs: the seed scenario's packed contestant with tracing off, sampling 1% of
traces, and sampling all of them, in one run.

Each contestant is the seed scenario's packed round (20 agents in a pool of 2 hosts, security
off, 100 requests in flight; see :mod:`reach.bench.seed_scenario`), run by a driver of its own
whose ``reach.init(tracing=...)`` says how every process of the round traces: ``off``
(``tracing=False``: the API's no-op), ``sampled_1pct`` and ``sampled_100pct`` (the SDK, a
parent-based ratio sampler, and the spans batched to the cluster's trace store; no OTLP
collector). They take turns, ``--rounds`` times each in alternating order, each reporting its
best round, the median of its rounds and their mean: over an even number of rounds every
contestant's rounds sit on average at the same moment of the run, so that the means cancel a
steady drift of the machine's speed, which the best rounds do not (the round run first is often
the best). Where the machine's speed moves from minute to minute, up and down, neither holds:
the median of each round's cost against ``off``'s round of the same number, run beside it, does
(:func:`round_costs`). Prints msg/s, latency and CPU per message (the driver's process and the
hosts' together, where ``/proc/stat`` exists every process of the machine's, the trace store's
and Ray's own included, and each kind of process's, over the measured messages) for each, and
the throughput (of the best rounds, the medians, the means and round by round) and CPU each
sampling costs against ``off``; writes ``tracing.json`` into the results folder
(:mod:`reach.bench.results`). Run: ``python -m reach.bench.tracing [--messages N]
[--inflight K] [--address ADDR] [--quick] [--out DIR]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
from collections.abc import Sequence
from typing import Any

import reach
from reach.bench.anchors import gcs_address
from reach.bench.results import write
from reach.bench.seed_scenario import AGENTS, best_rounds, parse_args, reach_round, show

#: Each contestant's tracing (None: off).
SAMPLING: dict[str, float | None] = {"off": None, "sampled_1pct": 0.01, "sampled_100pct": 1.0}
CONTESTANTS = tuple(SAMPLING)


async def contestant(args: argparse.Namespace) -> dict[str, Any]:
    """One round of one contestant, in this (child) driver process: the seed scenario's packed
    round, security off, tracing as the contestant says."""
    ratio = SAMPLING[args.contestant]
    tracing: reach.Tracing | bool = False if ratio is None else reach.Tracing(sample_ratio=ratio)
    return await reach_round(args, f"tr-{args.contestant}-{args.round}", "packed", sign=False,
                             encrypt=False, audit_calls=False, tracing=tracing)


def round_costs(rates: Sequence[float], off_rates: Sequence[float]) -> list[float]:
    """What a contestant costs against ``off`` in each round: 1 less its msg/s over off's of the
    same round (``rates`` and ``off_rates`` in the order run). The rounds of one round number
    run one after the other, minutes from those of the next: where the machine's speed moves
    from minute to minute, the median of these compares each contestant with ``off`` at the
    speed of its own moment, which neither the best rounds nor the means do."""
    return [1 - rate / off for rate, off in zip(rates, off_rates, strict=True)]


async def conduct(args: argparse.Namespace) -> dict[str, Any]:
    """Runs every round of every contestant; their best rounds, compared."""
    rt = reach.init(address=args.address, log_to_driver=False, sign=False, tracing=False)
    address = args.address or gcs_address()
    await rt.agents()  # reach.init returns before its registry is up
    print(f"{AGENTS} packed agents, {args.inflight} requests in flight, {args.messages} "
          "messages each")
    best = await best_rounds(CONTESTANTS, address, args, module="reach.bench.tracing")
    off = best["off"]
    for name in CONTESTANTS:
        best[name]["cost_vs_off"] = round(1 - best[name]["msgs_per_s"] / off["msgs_per_s"], 3)
        for kind in ("median", "mean"):
            best[name][f"{kind}_cost_vs_off"] = round(
                1 - best[name][f"{kind}_msgs_per_s"] / off[f"{kind}_msgs_per_s"], 3)
        costs = round_costs(best[name]["rounds_msgs_per_s"], off["rounds_msgs_per_s"])
        best[name]["rounds_cost_vs_off"] = [round(cost, 3) for cost in costs]
        best[name]["paired_cost_vs_off"] = round(statistics.median(costs), 3)
        show(name, best[name])
    print("cost of tracing vs off, best rounds: " + ", ".join(
        f"{name} {best[name]['cost_vs_off']:.1%}" for name in CONTESTANTS[1:])
        + "; median rounds: " + ", ".join(
        f"{name} {best[name]['median_cost_vs_off']:.1%}" for name in CONTESTANTS[1:])
        + "; mean of the rounds: " + ", ".join(
        f"{name} {best[name]['mean_cost_vs_off']:.1%}" for name in CONTESTANTS[1:])
        + "; median of each round's against off's of the same round: " + ", ".join(
        f"{name} {best[name]['paired_cost_vs_off']:.1%}" for name in CONTESTANTS[1:]))
    cpu = {name: best[name]["driver_cpu_us"] + best[name]["hosts_cpu_us"] for name in CONTESTANTS}
    print("CPU per message vs off (driver and hosts): " + ", ".join(
        f"{name} {cpu[name] - cpu['off']:+.1f} us ({cpu[name] / cpu['off'] - 1:+.1%})"
        for name in CONTESTANTS[1:]))
    if all("machine_cpu_us" in best[name] for name in CONTESTANTS):
        machine = {name: best[name]["machine_cpu_us"] for name in CONTESTANTS}
        print("CPU per message vs off (every process of the machine): " + ", ".join(
            f"{name} {machine[name] - machine['off']:+.1f} us "
            f"({machine[name] / machine['off'] - 1:+.1%})" for name in CONTESTANTS[1:]))
    if all("processes_cpu_us" in best[name] for name in CONTESTANTS):
        print("CPU per message by process (us): " + "; ".join(
            f"{name}: " + ", ".join(f"{proc} {cpu}" for proc, cpu in
                                    list(best[name]["processes_cpu_us"].items())[:6])
            for name in CONTESTANTS))
    await rt.close()
    return best


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the comparison (or, with ``--contestant``, one round of one contestant)."""
    args = parse_args(argv, (__doc__ or "").splitlines()[0], CONTESTANTS,
                      "1,000 messages, 50 in flight, one round; figures to quick/")
    if args.contestant:
        print(json.dumps(asyncio.run(contestant(args))), flush=True)
        return 0
    write(args, "tracing", asyncio.run(conduct(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
