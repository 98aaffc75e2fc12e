"""Registry scale: 10,000 packed agents registered on one machine.

Spawns the agents into a pool of shared hosts in chunks, then measures discovery latency as a
client sees it (one Ray call to the registry) and the registry's own compute time per query, and
the memory of the registry and the hosts; the registration and query rates are said every few
seconds as they run. Writes ``registry_scale.json`` into the results folder
(:mod:`reach.bench.results`). Run: ``python -m reach.bench.registry_scale [--agents N] [--tags T]
[--queries Q] [--out DIR]``, or with ``--quick`` (1,000 agents, 20 tags, 100 queries).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

import reach
from reach.bench.agents import light_class
from reach.bench.progress import Meter
from reach.bench.results import add_out, write


def pct(values: list[float], p: int) -> float:
    """The ``p``-th percentile of ``values``."""
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1]


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Registers the agents, times the discoveries; the figures."""
    rt = reach.init(address=args.address, log_to_driver=False)
    tags = [f"shop.dept{i // 10}.skill{i % 10}" for i in range(args.tags)]
    classes = {tag: light_class(tag) for tag in tags}
    pool = reach.Packed(pool="scale", size=args.hosts)
    per_tag = args.agents // args.tags
    started = time.perf_counter()
    spawned = 0
    meter = Meter("agents registered", unit="agents/s", total=per_tag * len(tags))
    async with meter.watching():
        for n, tag in enumerate(tags):
            ids = [f"scale-{n}-{j}" for j in range(per_tag)]
            await rt.spawn_many(classes[tag], ids, placement=pool)
            spawned += len(ids)
            meter.add(len(ids))
    spawn_s = time.perf_counter() - started
    print(f"  timing {args.queries} discoveries three ways", flush=True)

    # Exact tags, hierarchy prefixes (10 tags, 1,000 agents each) and separator variants.
    queries = [[t, t.rsplit(".", 1)[0], t.replace(".", "_")][q % 3]
               for q, t in enumerate(tags[i % len(tags)] for i in range(args.queries))]
    client_ms: list[float] = []
    meter = Meter("discoveries through one Ray call", unit="queries/s", total=len(queries))
    for query in queries:
        t0 = time.perf_counter()
        found, _ = await rt.cluster.registry().discover(query, None, 64)
        client_ms.append((time.perf_counter() - t0) * 1000)
        meter.add()
        assert found, query
    registry: Any = rt.cluster.registry()  # time_discover: the actor's, for benchmarks only
    compute_ms = await registry.call("time_discover", queries[:150], 4)
    cached_ms: list[float] = []
    for query in queries:
        t0 = time.perf_counter()
        await rt.client.discover(query)
        cached_ms.append((time.perf_counter() - t0) * 1000)
    stats = await rt.cluster.registry().stats()
    hosts = [rt.cluster.host(f"reach.pool.scale.{i}") for i in range(args.hosts)]
    host_rss = [i["rss_bytes"] for i in await asyncio.gather(*(h.info() for h in hosts))]
    result = {
        "agents": stats["agents"], "tags": stats["tags"], "hosts": args.hosts,
        "spawn_seconds": round(spawn_s, 2), "spawn_per_s": round(spawned / spawn_s, 1),
        "discover_client_p50_ms": round(pct(client_ms, 50), 3),
        "discover_client_p95_ms": round(pct(client_ms, 95), 3),
        "discover_compute_p95_ms": round(pct(compute_ms, 95), 3),
        "discover_client_cached_p95_ms": round(pct(cached_ms, 95), 3),
        "registry_rss_mb": round(stats["rss_bytes"] / 2**20, 1),
        "hosts_rss_mb": [round(r / 2**20, 1) for r in host_rss],
    }
    await rt.close()
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the registry scale benchmark and writes its figures; the exit status."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--agents", type=int, default=10_000)
    parser.add_argument("--tags", type=int, default=100)
    parser.add_argument("--hosts", type=int, default=2)
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--address", default=None)
    parser.add_argument("--quick", action="store_true", help="1,000 agents, 20 tags, 100 queries")
    add_out(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.agents, args.tags, args.queries = 1000, 20, 100
    print(f"{args.agents} packed agents with {args.tags} capability tags on "
          f"{args.hosts} hosts", flush=True)
    figures = asyncio.run(measure(args))
    for key, value in figures.items():
        print(f"{key:<26} {value}")
    write(args, "registry_scale", figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
