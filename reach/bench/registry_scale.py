"""Registry scale: 10,000 packed agents registered on one machine.

Spawns the agents into a pool of shared hosts in chunks, then measures discovery latency as a
client sees it (one Ray call to the registry) and the registry's own compute time per query, and
the memory of the registry and the hosts. Writes bench/results/registry_scale.json.
Run: ``python bench/registry_scale.py [--agents N] [--tags T] [--queries Q]``, or with ``--quick``
(1,000 agents, 20 tags, 100 queries; written to bench/results/quick/registry_scale.json).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

import reach

RESULTS = Path(__file__).parent / "results"


class Light(reach.Agent):
    """A light agent; its capability is set per subclass below."""

    description = "A light agent for the registry scale benchmark."


def light_class(tag: str) -> type[reach.Agent]:
    return type(f"Light_{tag.replace('.', '_')}", (Light,), {"capabilities": (tag,)})


def pct(values: list[float], p: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1]


async def main(args: argparse.Namespace) -> dict[str, Any]:
    rt = reach.init(address=args.address, log_to_driver=False)
    tags = [f"shop.dept{i // 10}.skill{i % 10}" for i in range(args.tags)]
    classes = {tag: light_class(tag) for tag in tags}
    pool = reach.Packed(pool="scale", size=args.hosts)
    per_tag = args.agents // args.tags
    started = time.perf_counter()
    spawned = 0
    for n, tag in enumerate(tags):
        ids = [f"scale-{n}-{j}" for j in range(per_tag)]
        await rt.spawn_many(classes[tag], ids, placement=pool)
        spawned += len(ids)
        if (n + 1) % max(1, args.tags // 10) == 0:
            rate = spawned / (time.perf_counter() - started)
            print(f"  {spawned:>6} agents registered ({rate:,.0f}/s)", flush=True)
    spawn_s = time.perf_counter() - started
    print(f"  timing {args.queries} discoveries three ways", flush=True)

    # Exact tags, hierarchy prefixes (10 tags, 1,000 agents each) and separator variants.
    queries = [[t, t.rsplit(".", 1)[0], t.replace(".", "_")][q % 3]
               for q, t in enumerate(tags[i % len(tags)] for i in range(args.queries))]
    client_ms: list[float] = []
    for query in queries:
        t0 = time.perf_counter()
        found, _ = await rt.cluster.registry().discover(query, None, 64)
        client_ms.append((time.perf_counter() - t0) * 1000)
        assert found, query
    compute_ms = await rt.cluster.registry().time_discover(queries[:150], 4)  # bench only
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


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=10_000)
    parser.add_argument("--tags", type=int, default=100)
    parser.add_argument("--hosts", type=int, default=2)
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--address", default=None)
    parser.add_argument("--quick", action="store_true", help="1,000 agents, 20 tags, 100 queries")
    arguments = parser.parse_args()
    if arguments.quick:
        arguments.agents, arguments.tags, arguments.queries = 1000, 20, 100
    out = RESULTS / "quick" if arguments.quick else RESULTS
    print(f"{arguments.agents} packed agents with {arguments.tags} capability tags on "
          f"{arguments.hosts} hosts", flush=True)
    figures = asyncio.run(main(arguments))
    for key, value in figures.items():
        print(f"{key:<26} {value}")
    out.mkdir(parents=True, exist_ok=True)
    (out / "registry_scale.json").write_text(json.dumps(figures, indent=2) + "\n",
                                             encoding="utf-8")
    print(f"wrote {out / 'registry_scale.json'}")
