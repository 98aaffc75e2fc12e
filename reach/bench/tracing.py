"""What tracing costs: the seed scenario's packed agents with tracing off, sampling 1% of traces,
and sampling all of them, in one run, each beside tracing off at the same moment.

Each contestant is the seed scenario's packed agents (20 agents in a pool of 2 hosts, security
off, 100 requests in flight; see :mod:`reach.bench.seed_scenario`), driven by a driver of its
own whose ``reach.init(tracing=...)`` says how every process of it traces: ``off``
(``tracing=False``: the API's no-op), ``sampled_1pct`` and ``sampled_100pct`` (reach's
parent-based ratio sampler, the spans batched to the cluster's trace store; no OTLP
collector), and ``off_control``, tracing off again. The machine this was first measured on
changes speed from second to second, by 10% and more, so that rounds run one after the other
differ by more than 1% sampling costs. Here ``off`` runs side by side with each of the others
in turn (:func:`reach.bench.turns.side_by_side`): both for the same ``--seconds``, sharing the
machine at the same speed, and each turn's cost is 1 less the other's msg/s over ``off``'s of
the same seconds. ``off_control`` beside ``off`` measures the method itself: what it says two
equal contestants differ by. Each contestant's cost is the median of its turns' (with their
mean and that mean's 95% interval, two standard errors either side), and the same for the CPU
each message took in its driver and hosts. Prints each turn's msg/s, latency and CPU per
message; writes ``tracing.json`` into the results folder (:mod:`reach.bench.results`). Run:
``python -m reach.bench.tracing [--seconds S] [--turns T] [--rounds R] [--inflight K]
[--address ADDR] [--quick] [--out DIR]``.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import statistics
import sys
from collections.abc import Sequence
from typing import Any

import reach
from reach.bench.anchors import gcs_address
from reach.bench.results import write
from reach.bench.seed_scenario import (
    AGENTS,
    measure,
    parse_args,
    show,
    start_agents,
    stop_agents,
)
from reach.bench.turns import paired_costs, serve, side_by_side

#: Each contestant's tracing (None: off); the first is the one the others run beside.
SAMPLING: dict[str, float | None] = {"off": None, "sampled_1pct": 0.01, "sampled_100pct": 1.0,
                                     "off_control": None}
CONTESTANTS = tuple(SAMPLING)
#: The defaults: rounds (fresh drivers, agents and hosts each), turns each contestant takes
#: beside ``off`` in a round, and how long a turn lasts (seconds).
ROUNDS, TURNS, SECONDS = 2, 8, 3.0


async def contestant(args: argparse.Namespace) -> None:
    """One contestant's round, in this (child) driver process: the seed scenario's packed
    agents (security off, tracing as the contestant says) up and warm, then a turn measured
    each time the conductor says (:func:`reach.bench.turns.serve`)."""
    ratio = SAMPLING[args.contestant]
    tracing: reach.Tracing | bool = False if ratio is None else reach.Tracing(sample_ratio=ratio)
    rt = reach.init(address=args.address, log_to_driver=False, sign=False, encrypt=False,
                    audit_calls=False, tracing=tracing)
    name = f"tr-{args.contestant}-{args.round}"
    agents = await start_agents(rt, reach.Packed(pool=name, size=2), name, args.inflight)

    async def turn(_number: int, seconds: float | None) -> dict[str, Any]:
        total = args.messages if seconds is None else sys.maxsize  # (as many as it allows)
        return await measure(agents, total, args.inflight, None, seconds=seconds)

    await serve(turn)
    await stop_agents(agents)
    await rt.close()


def compare(results: dict[str, Any]) -> None:
    """Adds to each contestant's figures (:func:`~reach.bench.turns.side_by_side`'s) what it
    costs against ``off`` beside it: of its msg/s (``cost_vs_off``: the median of its turns',
    every turn's in ``costs_vs_off``, their mean in ``mean_cost_vs_off`` and that mean's 95%
    interval in ``cost_interval``), and of the CPU each message took in its driver and hosts
    together (``cpu_cost_vs_off``, the median of its turns')."""
    beside = results[CONTESTANTS[0]]["beside"]
    for name in CONTESTANTS[1:]:
        mine, offs = results[name], beside[name]
        costs = paired_costs([turn["msgs_per_s"] for turn in mine["turns"]],
                             [turn["msgs_per_s"] for turn in offs])
        mine["costs_vs_off"] = [round(cost, 4) for cost in costs]
        mine["cost_vs_off"] = round(statistics.median(costs), 4)
        mean = statistics.fmean(costs)
        half = 2 * statistics.stdev(costs) / math.sqrt(len(costs)) if len(costs) > 1 else math.inf
        mine["mean_cost_vs_off"] = round(mean, 4)
        mine["cost_interval"] = [round(mean - half, 4), round(mean + half, 4)]
        mine["cpu_cost_vs_off"] = round(statistics.median(paired_costs(
            [_cpu(turn) for turn in mine["turns"]], [_cpu(turn) for turn in offs],
            more_is_better=False)), 4)


def _cpu(turn: dict[str, Any]) -> float:
    """A turn's CPU per message in its driver and hosts together (microseconds)."""
    return float(turn["driver_cpu_us"] + turn["hosts_cpu_us"])


async def conduct(args: argparse.Namespace) -> dict[str, Any]:
    """Runs every round and turn; the contestants' figures, compared."""
    rt = reach.init(address=args.address, log_to_driver=False, sign=False, tracing=False)
    address = args.address or gcs_address()
    await rt.agents()  # reach.init returns before its registry is up
    print(f"{AGENTS} packed agents a contestant, {args.inflight} requests in flight, "
          f"{args.rounds} rounds of {args.turns} turns of {args.seconds:g} s beside off")
    results = await side_by_side(CONTESTANTS, address, args, module="reach.bench.tracing",
                                 show=show)
    compare(results)
    off = results[CONTESTANTS[0]]
    print(f"off beside the others: median {off['median_msgs_per_s']:.0f} msg/s")
    for name in CONTESTANTS[1:]:
        mine = results[name]
        low, high = mine["cost_interval"]
        print(f"{name:<15} median {mine['median_msgs_per_s']:>6.0f} msg/s; cost vs off beside "
              f"it {mine['cost_vs_off']:+.1%} (median of {len(mine['costs_vs_off'])} turns; "
              f"mean {mine['mean_cost_vs_off']:+.1%}, 95% {low:+.1%} to {high:+.1%}); CPU "
              f"per message in driver and hosts {mine['cpu_cost_vs_off']:+.1%}", flush=True)
    await rt.close()
    return results


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the comparison (or, with ``--contestant``, one round of one contestant)."""
    args = parse_args(argv, (__doc__ or "").splitlines()[0], CONTESTANTS,
                      "50 in flight, one round of one turn of 1 s; figures to quick/",
                      rounds=ROUNDS, turns=TURNS, seconds=SECONDS)
    if args.contestant:
        asyncio.run(contestant(args))
        return 0
    write(args, "tracing", asyncio.run(conduct(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
