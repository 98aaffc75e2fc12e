"""I/O-bound handlers: 20 agents whose handler awaits 0.5 s (as a model call would), 2,000
requests in flight.

Contestants on one Ray cluster, one after the other, each on actors created for it and removed
after it, once the machine is quiet:

- raw:                  20 plain async Ray actors (``async def handle``, max_concurrency
                        10,000), one ``await actor.handle.remote(...)`` per request (what a user
                        would write);
- packed_id:            20 reach agents packed into a pool of 2 hosts, requested by ID;
- packed_capability:    the same, asked by capability (the least-loaded holder);
- dedicated_id:         20 reach agents, each in its own AgentHost actor, requested by ID;
- dedicated_capability: the same, asked by capability.

reach runs with security off (as the seed scenario's baseline). A handler that waits 0.5 s can
serve any number of requests at once, so at K requests in flight the ideal is K / 0.5 s
(4,000 msg/s at 2,000): each contestant's efficiency is its throughput over that. For reach's
contestants the registry calls this driver made while measuring are counted too (asking by
capability refreshes the list of holders; by ID, routes are cached).
Says each contestant's rate every few seconds as it runs; prints msg/s, p50/p95/p99 latency and
efficiency for each; writes ``io_bound.json`` into the results folder (:mod:`reach.bench.results`).
Run: ``python -m reach.bench.io_bound [--requests N] [--inflight K] [--address ADDR] [--out DIR]``,
or with ``--quick`` (4,000 requests).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import math
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any

import reach
from reach.bench.agents import CALL_S, Prompt, slow_class
from reach.bench.anchors import kill, raw_agent
from reach.bench.progress import Meter
from reach.bench.quiet import settle
from reach.bench.results import add_out, write

AGENTS = 20
#: reach's contestants: the placement of the agents and whether they are asked by capability.
REACH: dict[str, tuple[str, bool]] = {
    "packed_id": ("packed", False),
    "packed_capability": ("packed", True),
    "dedicated_id": ("dedicated", False),
    "dedicated_capability": ("dedicated", True),
}


# -- reach's user API, called only here (a rename of it is a change on these lines) -----------

async def request(rt: reach.Runtime, agent_id: str, prompt: Prompt) -> int:
    """Sends ``prompt`` to one agent by ID; the ``n`` of its reply."""
    return answered(await rt.client.request(agent_id, prompt))


async def ask(rt: reach.Runtime, capability: str, prompt: Prompt) -> int:
    """Sends ``prompt`` to the least-loaded holder of ``capability``; the ``n`` of its reply."""
    return answered(await rt.client.request_capability(capability, prompt))


def answered(reply: Any) -> int:
    """The ``n`` of a reply's completion."""
    return int(reply.value.n)


# -- measuring ----------------------------------------------------------------------------------

async def drive(send: Callable[[int], Awaitable[int]], total: int, inflight: int,
                progress: str | None = None) -> dict[str, float]:
    """Keeps ``inflight`` requests outstanding until ``total`` have ended; returns the figures
    (a request that fails is counted in ``errors``, not in the throughput or latencies; with
    ``progress``, a line so labelled says the rate every few seconds)."""
    meter = Meter(progress, total=total) if progress else None
    latencies: list[float] = []
    errors = 0
    next_i = 0

    async def worker() -> None:
        nonlocal next_i, errors
        while next_i < total:
            i = next_i
            next_i += 1
            t0 = time.perf_counter()
            try:
                got = await send(i)
            except Exception:  # a failure is a figure here, not the end of the run
                got = -1
            if got == i:
                latencies.append(time.perf_counter() - t0)
            else:
                errors += 1
            if meter is not None:
                meter.add()

    started = time.perf_counter()
    if meter is None:
        await asyncio.gather(*(worker() for _ in range(inflight)))
    else:
        async with meter.watching():
            await asyncio.gather(*(worker() for _ in range(inflight)))
    wall = time.perf_counter() - started
    ideal = inflight / CALL_S
    rate = len(latencies) / wall
    q = (statistics.quantiles(latencies, n=100, method="inclusive") if len(latencies) > 1
         else [math.nan] * 99)  # nothing answered (or once): no percentiles to give
    return {"messages": total, "errors": errors, "seconds": round(wall, 3),
            "msgs_per_s": round(rate, 1), "ideal_msgs_per_s": round(ideal, 1),
            "efficiency": round(rate / ideal, 3), "p50_ms": round(q[49] * 1000, 1),
            "p95_ms": round(q[94] * 1000, 1), "p99_ms": round(q[98] * 1000, 1)}


class CountingRegistry:
    """Stands in for the driver's handle on the registry and counts the calls made through it,
    by method (reach is not changed to count them: the bench wraps what it already has)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.calls: collections.Counter[str] = collections.Counter()

    def __getattr__(self, method: str) -> Any:
        self.calls[method] += 1
        return getattr(self._inner, method)


@contextlib.contextmanager
def registry_calls(rt: reach.Runtime, into: dict[str, Any]) -> Iterator[None]:
    """Counts the registry calls this driver makes inside the block into ``into``;
    ``registry_calls`` is None when the runtime has no directory to wrap."""
    directory = getattr(rt, "directory", None)
    if directory is None or not hasattr(directory, "registry"):
        into["registry_calls"] = None
        yield
        return
    counting = CountingRegistry(directory.registry)
    directory.registry = counting
    try:
        yield
    finally:
        directory.registry = counting._inner
        into["registry_calls"] = sum(counting.calls.values())
        into["registry_calls_by_method"] = dict(counting.calls)


async def run_raw(total: int, inflight: int) -> dict[str, Any]:
    """Raw Ray's turn: plain async actors."""
    actors = [raw_agent.remote() for _ in range(AGENTS)]
    await asyncio.gather(*(a.__ray_ready__.remote() for a in actors))

    async def send(i: int) -> int:
        out = await actors[i % AGENTS].handle.remote({"n": i, "text": "summarise this"})
        return int(out["n"])

    try:
        await drive(send, min(total, inflight), inflight)  # warm-up: one wave
        return await drive(send, total, inflight, "raw")
    finally:
        for actor in actors:
            kill(actor)


async def run_reach(rt: reach.Runtime, name: str, total: int, inflight: int) -> dict[str, Any]:
    """The turn of reach's contestant ``name`` (one of :data:`REACH`)."""
    kind, by_capability = REACH[name]
    capability = f"bench.complete.{name}"
    ids = [f"{name}-{i}" for i in range(AGENTS)]
    placement = reach.Packed(pool=f"io-{name}", size=2) if kind == "packed" else reach.Dedicated()
    records = await rt.spawn_many(slow_class(capability), ids, placement=placement)

    async def send(i: int) -> int:
        prompt = Prompt(n=i, text="summarise this")
        if by_capability:
            return await ask(rt, capability, prompt)
        return await request(rt, ids[i % AGENTS], prompt)

    try:
        await drive(send, min(total, inflight), inflight)  # warm-up: one wave
        counted: dict[str, Any] = {}
        with registry_calls(rt, counted):
            figures = await drive(send, total, inflight, name)
        return {**figures, **counted}
    finally:
        for agent_id in ids:
            await rt.stop(agent_id)
        if kind == "packed":  # pool hosts outlive their agents: end them too
            for host in {record.host for record in records}:
                with contextlib.suppress(reach.ReachError):  # gone already
                    rt.cluster.kill(rt.cluster.host(host))


def show(name: str, r: dict[str, Any]) -> None:
    """Prints one contestant's figures."""
    calls = r.get("registry_calls")
    print(f"{name:<21} {r['msgs_per_s']:>7.0f} msg/s  ({r['efficiency']:>4.0%} of ideal)   "
          f"p50 {r['p50_ms']:>6.0f} ms   p95 {r['p95_ms']:>6.0f} ms   p99 {r['p99_ms']:>6.0f} ms"
          + (f"   registry calls {calls}" if calls is not None else "")
          + (f"   ERRORS {r['errors']}" if r["errors"] else ""), flush=True)


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Every contestant in turn; their figures."""
    rt = reach.init(address=args.address, log_to_driver=False, sign=False)
    await rt.agents()  # reach.init returns before its registry is up
    print(f"{AGENTS} agents, handlers wait {CALL_S} s, {args.inflight} requests in flight, "
          f"{args.requests} requests each; ideal {args.inflight / CALL_S:,.0f} msg/s")
    results: dict[str, Any] = {"agents": AGENTS, "call_s": CALL_S, "inflight": args.inflight}
    try:
        await settle()
        results["raw"] = await run_raw(args.requests, args.inflight)
        show("raw", results["raw"])
        for name in REACH:
            await settle()
            results[name] = await run_reach(rt, name, args.requests, args.inflight)
            show(name, results[name])
    finally:
        await rt.close()
    raw = results["raw"]["msgs_per_s"]
    for name in REACH:
        results[name]["x_raw"] = round(results[name]["msgs_per_s"] / raw, 2)
    print(", ".join(f"{name} {results[name]['x_raw']}x raw" for name in REACH))
    return results


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the I/O-bound scenario and writes its figures; the exit status."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--requests", type=int, default=8000)
    parser.add_argument("--inflight", type=int, default=2000)
    parser.add_argument("--address", default=None)
    parser.add_argument("--quick", action="store_true",
                        help="4,000 requests (two waves); figures to the quick/ subfolder")
    add_out(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.requests = 4000
    write(args, "io_bound", asyncio.run(measure(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
