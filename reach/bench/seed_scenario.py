"""Seed scenario: 20 agents, 100 requests in flight, a small payload with Chinese text.

Contestants on one Ray cluster, one after the other:

- raw:       20 plain async Ray actors, one actor call per message (what a user would write);
- dedicated: 20 reach agents, each in its own AgentHost actor (security off);
- packed:    20 reach agents packed into a pool of 2 shared hosts (security off: the baseline);
- packed_signed:    packed, every envelope signed and verified (HMAC-SHA256, replay checks);
- packed_encrypted: packed_signed, and every payload encrypted (AES-GCM);
- packed_audited:   packed_signed with every call recorded in the audit log (reach's default).

Every contestant gets the same conditions: each round of each runs as a driver process of its
own joining the same cluster (this module with ``--contestant``; raw Ray's is a plain
``ray.init`` that starts no reach runtime), on actors created for that round and removed after
it (a packed round's pool hosts too), once the machine is quiet. They take turns, ``--rounds``
times each (3 by default, in alternating order), and each reports its best round, so that a
moment of noise on a shared machine does not decide the comparison.
Each round says its rate every few seconds as it runs; prints msg/s and p50/p95/p99 latency for
each and writes ``seed_scenario.json`` into the results folder (:mod:`reach.bench.results`).
Run: ``python -m reach.bench.seed_scenario [--messages N] [--inflight K] [--address ADDR]
[--quick] [--out DIR]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import reach
from reach.bench.agents import Item, ItemEcho
from reach.bench.anchors import connect, disconnect, gcs_address, kill, raw_actor
from reach.bench.progress import Meter
from reach.bench.quiet import process_stats, settle
from reach.bench.results import add_out, write
from reach.bench.turns import Child

AGENTS = 20
PAYLOAD = {"sku": "A-1024", "text": "蓝色羊毛围巾，手工编织，适合冬天 🧣", "qty": 2}
SECURITY_OFF = {"sign": False, "encrypt": False, "audit_calls": False}
#: reach's contestants: placement ("dedicated" or "packed") and reach.init's security settings.
REACH: dict[str, tuple[str, dict[str, bool]]] = {
    "dedicated": ("dedicated", SECURITY_OFF),
    "packed": ("packed", SECURITY_OFF),
    "packed_signed": ("packed", {"sign": True, "encrypt": False, "audit_calls": False}),
    "packed_encrypted": ("packed", {"sign": True, "encrypt": True, "audit_calls": False}),
    "packed_audited": ("packed", {"sign": True, "encrypt": False, "audit_calls": True}),
}
#: Every contestant, each a driver of its own, in the order of the first round.
CONTESTANTS = ("raw", *REACH)


async def drive(send: Callable[[int], Awaitable[Any]], total: int, inflight: int,
                progress: str | None = None, *, seconds: float | None = None,
                ) -> dict[str, float]:
    """Keeps ``inflight`` requests outstanding until ``total`` are done (or, with
    ``seconds``, until that long has passed: no request starts after it); returns the figures
    (with ``progress``, a line so labelled says the rate every few seconds)."""
    meter = Meter(progress, total=total) if progress else None
    latencies: list[float] = []
    next_i = 0
    started = time.perf_counter()
    until = math.inf if seconds is None else started + seconds

    async def worker() -> None:
        nonlocal next_i
        while next_i < total:
            t0 = time.perf_counter()
            if t0 >= until:
                return
            i = next_i
            next_i += 1
            await send(i)
            latencies.append(time.perf_counter() - t0)
            if meter is not None:
                meter.add()

    if meter is None:
        await asyncio.gather(*(worker() for _ in range(inflight)))
    else:
        async with meter.watching():
            await asyncio.gather(*(worker() for _ in range(inflight)))
    wall = time.perf_counter() - started
    done = len(latencies)
    q = statistics.quantiles(latencies, n=100, method="inclusive")
    return {"messages": done, "seconds": round(wall, 3), "msgs_per_s": round(done / wall, 1),
            "p50_ms": round(q[49] * 1000, 2), "p95_ms": round(q[94] * 1000, 2),
            "p99_ms": round(q[98] * 1000, 2)}


async def run_raw(total: int, inflight: int, label: str = "raw") -> dict[str, float]:
    """Raw Ray's round: plain actors, one actor call per message."""
    actors = [raw_actor.remote() for _ in range(AGENTS)]
    await asyncio.gather(*(a.echo.remote(PAYLOAD) for a in actors))

    async def send(i: int) -> Any:
        out = await actors[i % AGENTS].echo.remote(PAYLOAD)
        assert out["qty"] == 4
        return out

    await drive(send, min(total, 500), inflight)  # warm-up
    result = await drive(send, total, inflight, label)
    for a in actors:
        kill(a)
    return result


async def run_reach(rt: reach.Runtime, placement: reach.Placement, prefix: str, total: int,
                    inflight: int) -> dict[str, Any]:
    """A reach contestant's round: ``AGENTS`` agents placed by ``placement``, by ID."""
    round_ = await start_agents(rt, placement, prefix, inflight)
    result = await measure(round_, total, inflight, prefix)
    await stop_agents(round_)
    return result


class Agents:
    """A reach contestant's agents, up and warm, and how to send them a request."""

    def __init__(self, rt: reach.Runtime, placement: reach.Placement, ids: list[str],
                 hosts: list[str]) -> None:
        self.rt, self.placement, self.ids, self.hosts = rt, placement, ids, hosts
        self.item = Item(**PAYLOAD)

    async def send(self, i: int) -> Any:
        """Request ``i`` (to the agents in turn)."""
        reply = await self.rt.client.request(self.ids[i % AGENTS], self.item)
        assert reply.value.qty == 4
        return reply


async def start_agents(rt: reach.Runtime, placement: reach.Placement, prefix: str,
                       inflight: int) -> Agents:
    """Spawns ``AGENTS`` agents placed by ``placement`` and warms them up (500 requests)."""
    ids = [f"{prefix}-{i}" for i in range(AGENTS)]
    records = await rt.spawn_many(ItemEcho, ids, placement=placement)
    agents = Agents(rt, placement, ids, sorted({record.host for record in records}))
    await drive(agents.send, 500, inflight)  # warm-up
    return agents


async def measure(agents: Agents, total: int, inflight: int, label: str | None, *,
                  seconds: float | None = None) -> dict[str, Any]:
    """``total`` requests to the agents (or as many as ``seconds`` allows, see :func:`drive`),
    ``inflight`` at a time: msg/s, latency and the CPU each message took, in the driver, the
    hosts, the machine and each kind of process."""
    rt = agents.rt
    sent0, batches0 = rt.transport.envelopes_sent, rt.transport.batches_sent
    each0 = processes_cpu_s()  # (read outside the driver's own figures)
    cpu0 = time.process_time(), await _hosts_cpu(rt, agents.hosts), machine_cpu_s()
    result: dict[str, Any] = dict(await drive(agents.send, total, inflight, label,
                                              seconds=seconds))
    total = result["messages"]
    cpu1 = time.process_time(), await _hosts_cpu(rt, agents.hosts), machine_cpu_s()
    each1 = processes_cpu_s()
    batches = rt.transport.batches_sent - batches0
    result["driver_batch_mean"] = round((rt.transport.envelopes_sent - sent0) / max(batches, 1), 1)
    # CPU per message: a steadier measure of the work done than msg/s (see docs/tracing.md)
    result["driver_cpu_us"] = round((cpu1[0] - cpu0[0]) / total * 1e6, 1)
    result["hosts_cpu_us"] = round((cpu1[1] - cpu0[1]) / total * 1e6, 1)
    if cpu0[2] is not None and cpu1[2] is not None:  # every process: the store's, Ray's too
        result["machine_cpu_us"] = round((cpu1[2] - cpu0[2]) / total * 1e6, 1)
    if each1:
        result["processes_cpu_us"] = cpu_by_process(each0, each1, total)
    return result


async def stop_agents(agents: Agents) -> None:
    """Stops the agents (and ends a pool's hosts: they outlive their agents)."""
    rt = agents.rt
    for agent_id in agents.ids:
        await rt.stop(agent_id)
    if isinstance(agents.placement, reach.Packed):
        for host in agents.hosts:
            with contextlib.suppress(reach.ReachError):  # gone already
                rt.cluster.kill(rt.cluster.host(host))


def machine_cpu_s() -> float | None:
    """The CPU seconds every process of this machine has used since it started (the busy
    time of ``/proc/stat``: user, nice, system, irq and softirq), or None where there is no
    such file."""
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            ticks = [int(field) for field in stat.readline().split()[1:8]]
    except (OSError, ValueError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq = ticks
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def processes_cpu_s() -> dict[int, tuple[str, float]]:
    """Every process of this machine, by PID, with its name and the CPU seconds it has used
    (user and system; empty where there is no ``/proc``). A Ray worker is named by its title
    (``AgentHost``, ``TraceStore``, ``DashboardAgent``...), this process ``driver``, any other
    by its program's file name (``raylet``, ``gcs_server``, ``python``...)."""
    found: dict[int, tuple[str, float]] = {}
    if not os.path.isdir("/proc"):
        return found
    tick = os.sysconf("SC_CLK_TCK")
    for pid, fields in process_stats():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                program = cmdline.read().split(b"\0", 1)[0].decode(errors="replace")
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if pid == os.getpid():
            name = "driver"
        elif program.startswith("ray::"):
            name = program.removeprefix("ray::").partition(".")[0]
        else:
            name = os.path.basename(program.partition(" ")[0]) or "(kernel)"
        found[pid] = (name, (int(fields[11]) + int(fields[12])) / tick)
    return found


def cpu_by_process(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]],
                   total: int) -> dict[str, float]:
    """The CPU each kind of process used per message (microseconds, by name as it is after,
    the most first) between two :func:`processes_cpu_s`: a process started meanwhile counts
    from nothing, one that ended is not counted."""
    used: dict[str, float] = {}
    for pid, (name, cpu) in after.items():
        used[name] = used.get(name, 0.0) + cpu - before.get(pid, (name, 0.0))[1]
    return {name: round(cpu / total * 1e6, 1)
            for name, cpu in sorted(used.items(), key=lambda kv: -kv[1]) if cpu / total >= 5e-8}


async def _hosts_cpu(rt: reach.Runtime, hosts: list[str]) -> float:
    """The CPU seconds these hosts' processes have used, together."""
    infos = await asyncio.gather(*(rt.cluster.host(host).info() for host in hosts))
    return sum(info["cpu_s"] for info in infos)


def show(name: str, r: dict[str, float]) -> None:
    """Prints one contestant's figures."""
    print(f"{name:<17} {r['msgs_per_s']:>9.0f} msg/s   p50 {r['p50_ms']:>7.1f} ms   "
          f"p95 {r['p95_ms']:>7.1f} ms   p99 {r['p99_ms']:>7.1f} ms" + (
              f"   CPU/msg driver {r['driver_cpu_us']:.0f} us, hosts {r['hosts_cpu_us']:.0f} us"
              if "hosts_cpu_us" in r else ""), flush=True)


async def contestant(args: argparse.Namespace) -> dict[str, Any]:
    """One round of one contestant, in this (child) driver process."""
    name = f"{args.contestant}-{args.round}"
    if args.contestant == "raw":  # a plain Ray driver, as a user without reach would write it
        connect(args.address)
        try:
            return await run_raw(args.messages, args.inflight, name)
        finally:
            disconnect()
    kind, security = REACH[args.contestant]
    return await reach_round(args, name, kind, **security)


async def reach_round(args: argparse.Namespace, name: str, kind: str,
                      **settings: Any) -> dict[str, Any]:
    """A reach contestant's round ``name`` in a driver of its own, started by ``reach.init``
    with ``settings``: its agents packed (``kind`` "packed") or dedicated."""
    rt = reach.init(address=args.address, log_to_driver=False, **settings)
    # Fresh hosts every round: every contestant starts as the first one did.
    placement = reach.Packed(pool=name, size=2) if kind == "packed" else reach.Dedicated()
    result = await run_reach(rt, placement, name, args.messages, args.inflight)
    await rt.close()
    return result


def run_contestant(name: str, address: str, args: argparse.Namespace, round_: int, *,
                   module: str = "reach.bench.seed_scenario") -> dict[str, Any]:
    """Runs one round of a contestant as a driver of its own on the same cluster (``module``
    with ``--contestant``, a :class:`~reach.bench.turns.Child`), passing its progress lines on
    as they come; its figures are its line of JSON.

    Raises:
        subprocess.CalledProcessError: it failed (what it said on standard error is printed).
    """
    cmd = [sys.executable, "-m", module, "--contestant", name,
           "--address", address, "--messages", str(args.messages),
           "--inflight", str(args.inflight), "--round", str(round_)]
    child = Child(cmd)
    figures: dict[str, Any] | None = None
    try:
        figures = child.answer()
    finally:
        child.end(figures)
    return figures


async def best_rounds(contestants: Sequence[str], address: str, args: argparse.Namespace, *,
                      module: str = "reach.bench.seed_scenario") -> dict[str, Any]:
    """Runs ``args.rounds`` rounds of every contestant (each a driver of its own, see
    :func:`run_contestant`), in alternating order, each once the machine is quiet; the best
    round of each (by msg/s), in the order of ``contestants``, with the msg/s of all its
    rounds (``rounds_msgs_per_s``), their median (``median_msgs_per_s``) and their mean
    (``mean_msgs_per_s``: in the alternating order, the rounds of each contestant sit on
    average at the same moment of the run, the same one exactly for an even number of rounds,
    so that the means compare them at the same machine speed however steadily it drifts)."""
    best: dict[str, Any] = {}
    rates: dict[str, list[float]] = {name: [] for name in contestants}
    for round_ in range(args.rounds):
        order = contestants if round_ % 2 == 0 else contestants[::-1]  # no fixed first
        for name in order:
            await settle()
            result = run_contestant(name, address, args, round_, module=module)
            show(f"{name} #{round_ + 1}", result)
            rates[name].append(result["msgs_per_s"])
            if name not in best or result["msgs_per_s"] > best[name]["msgs_per_s"]:
                best[name] = result
    for name in contestants:  # every round's rate too, in the order run
        best[name]["rounds_msgs_per_s"] = rates[name]
        best[name]["median_msgs_per_s"] = round(statistics.median(rates[name]), 1)
        best[name]["mean_msgs_per_s"] = round(statistics.fmean(rates[name]), 1)
    return {name: best[name] for name in contestants}


async def conduct(args: argparse.Namespace) -> dict[str, Any]:
    """Runs every round of every contestant; their best rounds, compared."""
    # This driver starts Ray and reach's registry and store (or joins them), then only
    # conducts: every contestant runs in a driver of its own.
    rt = reach.init(address=args.address, log_to_driver=False, sign=False)
    address = args.address or gcs_address()
    await rt.agents()  # reach.init returns before its registry is up
    print(f"{AGENTS} agents, {args.inflight} requests in flight, {args.messages} messages each")
    results = await best_rounds(CONTESTANTS, address, args)
    for name in CONTESTANTS:
        show(name, results[name])
    raw = results["raw"]["msgs_per_s"]
    packed = results["packed"]["msgs_per_s"]
    for name in REACH:
        results[name]["x_raw"] = round(results[name]["msgs_per_s"] / raw, 2)
    secured = [name for name in REACH if name not in ("dedicated", "packed")]
    for name in secured:
        results[name]["overhead_vs_packed"] = round(1 - results[name]["msgs_per_s"] / packed, 3)
    print(f"dedicated {results['dedicated']['x_raw']}x raw, "
          f"packed {results['packed']['x_raw']}x raw")
    print("cost of security vs packed: " + ", ".join(
        f"{name} {results[name]['overhead_vs_packed']:.0%}" for name in secured))
    await rt.close()
    return results


def parse_args(argv: Sequence[str] | None, description: str, contestants: Sequence[str],
               quick_help: str, *, messages: int = 5000, rounds: int = 3,
               turns: int | None = None, seconds: float = 3.0) -> argparse.Namespace:
    """The flags of a benchmark of contestants taking turns (``quick_help``: what ``--quick``
    does, as its help says), with their defaults; ``turns``: the default of ``--turns`` and
    ``seconds`` that of ``--seconds`` (a turn's length, see :mod:`reach.bench.turns`), None
    for a benchmark without them."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--messages", type=int, default=messages,
                        help="messages a round measures")
    parser.add_argument("--inflight", type=int, default=100)
    parser.add_argument("--address", default=None)
    parser.add_argument("--quick", action="store_true", help=quick_help)
    if turns is None:
        parser.add_argument("--rounds", type=int, default=rounds,
                            help="rounds each contestant takes (its best one is reported)")
    else:
        parser.add_argument("--rounds", type=int, default=rounds,
                            help="rounds, each with fresh drivers, agents and hosts")
        parser.add_argument("--turns", type=int, default=turns,
                            help="turns each contestant takes in each round")
        parser.add_argument("--seconds", type=float, default=seconds,
                            help="how long a turn lasts")
    parser.add_argument("--contestant", choices=contestants, default=None,
                        help="run one round of one contestant (a child driver), print its JSON")
    parser.add_argument("--round", type=int, default=0, help=argparse.SUPPRESS)
    add_out(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.messages, args.inflight, args.rounds = 1000, 50, 1
        if turns is not None:
            args.turns, args.seconds = 1, 1.0
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the seed scenario (or, with ``--contestant``, one round of one contestant)."""
    args = parse_args(argv, (__doc__ or "").splitlines()[0], CONTESTANTS,
                      "1,000 messages, 50 in flight; figures to the quick/ subfolder")
    if args.contestant:
        print(json.dumps(asyncio.run(contestant(args))), flush=True)
        return 0
    write(args, "seed_scenario", asyncio.run(conduct(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
