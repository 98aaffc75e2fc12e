"""Chaos: tasks over supervised agents while a random agent or packed host is SIGKILLed.

8 agents hold the capability ``chaos.work``: 4 dedicated, 4 packed into a pool of 2 hosts, all
under one supervisor. The driver submits tasks (by capability, with retries and failover) while
a killer SIGKILLs a random dedicated agent's process or a packed host every ``--kill-every`` ms.
Counts every task's end: completed, degraded, failed (with reasons), lost (never ended) and hung
(still running past its deadline), plus restarts and restart latency by placement; the rate of
tasks ending is said every few seconds as it runs. Writes ``chaos.json`` into the results folder
(:mod:`reach.bench.results`) and exits non-zero if any task was lost or hung.
Run: ``python -m reach.bench.chaos [--tasks N] [--inflight K] [--kill-every MS] [--out DIR]``, or
with ``--quick`` (150 tasks, 20 in flight).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import random
import signal
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

import reach
from reach import ChildSpec, Intensity, SupervisorSpec
from reach.bench.agents import ChaosWorker, Job
from reach.bench.progress import Meter
from reach.bench.results import add_out, write


def pct(values: list[float], p: int) -> float | None:
    """The ``p``-th percentile of ``values`` (None if there are none)."""
    if len(values) < 2:
        return values[0] if values else None
    return round(statistics.quantiles(values, n=100, method="inclusive")[p - 1], 3)


def _is_host(pid: int) -> bool:
    """Whether ``pid`` is (still) an AgentHost process: a pid is never killed on a stale guess."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"AgentHost" in f.read()
    except OSError:
        return False


async def killer(rt: reach.Runtime, stop: asyncio.Event, every_s: float, rng: random.Random,
                 kills: list[dict[str, Any]]) -> None:
    """SIGKILLs a random live agent's host process every ``every_s`` until ``stop`` is set."""
    pids: dict[str, int] = {}
    tick = time.monotonic()
    while not stop.is_set():
        tick += every_s
        try:
            await asyncio.wait_for(stop.wait(), timeout=max(tick - time.monotonic(), 0))
        except TimeoutError:
            pass
        else:
            return
        agents = [a for a in await rt.agents() if a.agent_id.startswith("chaos-")
                  and a.status == "online"]
        if not agents:
            continue
        victim = rng.choice(agents)
        try:
            pid = pids.get(victim.host)
            if pid is None or not _is_host(pid):
                host = rt.cluster.host(victim.host)
                pid = pids[victim.host] = (await asyncio.wait_for(host.info(), 2))["pid"]
            os.kill(pid, signal.SIGKILL)
            pids.pop(victim.host, None)
            kills.append({"agent": victim.agent_id, "host": victim.host, "at": time.time()})
        except (ValueError, ProcessLookupError, TimeoutError, reach.ReachError):
            continue  # it died already, or is restarting: pick again next time


async def run(tasks: int, inflight: int, kill_every_ms: int, *, seed: int = 7,
              address: str | None = None, progress_every: int = 0) -> dict[str, Any]:
    """Runs the chaos scenario and returns its figures.

    With ``progress_every``, prints a line each time that many more tasks have ended; the rate
    of tasks ending is said every few seconds.
    """
    rt = reach.init(address=address, log_to_driver=False)
    name = f"chaos-{os.getpid()}"
    children = [ChildSpec(ChaosWorker, f"chaos-d{i}") for i in range(4)] + [
        ChildSpec(ChaosWorker, f"chaos-p{i}", placement=reach.Packed(pool=name, size=2))
        for i in range(4)]
    sup = await rt.supervise(SupervisorSpec(
        name, children=children, intensity=Intensity(10_000, 10),
        backoff=reach.Backoff(base_s=0.01, cap_s=0.2), seed=seed))
    timeout_ms, grace_s = 20_000, 10.0
    results: list[reach.TaskResult] = []
    lost: list[str] = []
    hung = 0
    stop = asyncio.Event()
    kills: list[dict[str, Any]] = []
    chaos = asyncio.ensure_future(killer(rt, stop, kill_every_ms / 1000, random.Random(seed),
                                         kills))
    gate = asyncio.Semaphore(inflight)
    ended = 0
    meter = Meter("tasks ended", unit="tasks/s", total=tasks)

    async def one(n: int) -> None:
        nonlocal ended
        try:
            await attempt(n)
        finally:
            ended += 1
            meter.add()
            if progress_every and (ended % progress_every == 0 or ended == tasks):
                print(f"  {ended}/{tasks} tasks ended, {len(kills)} kills so far", flush=True)

    async def attempt(n: int) -> None:
        nonlocal hung
        async with gate:
            try:
                handle = await sup.submit("chaos.work", Job(n=n), by_capability=True,
                                          timeout_ms=timeout_ms, retry_limit=10)
            except reach.ReachError as exc:
                lost.append(f"submit {n}: {exc}")
                return
            try:
                results.append(await asyncio.wait_for(handle.result(),
                                                      timeout_ms / 1000 + grace_s))
            except TimeoutError:
                hung += 1
            except Exception as exc:  # the owner itself went away: the task is lost
                lost.append(f"task {n}: {type(exc).__name__}: {exc}")

    started = time.perf_counter()
    async with meter.watching():
        await asyncio.gather(*(one(n) for n in range(tasks)))
    wall = time.perf_counter() - started
    stop.set()
    await chaos
    status = await sup.status()
    await sup.stop()
    await rt.close()
    return {"tasks": tasks, "inflight": inflight, "kill_every_ms": kill_every_ms,
            "seconds": round(wall, 2), **_ends(tasks, results, lost, hung=hung, kills=len(kills),
                                         status=status)}


def _ends(tasks: int, results: list[reach.TaskResult], lost: list[str], *, hung: int, kills: int,
          status: reach.SupervisorStatus) -> dict[str, Any]:
    """How the tasks ended, and the restarts that happened meanwhile."""
    states = collections.Counter(str(r.state) for r in results)
    reasons = collections.Counter(f"{r.error.code}: {r.error.reason[:80]}"
                                  for r in results if r.state == "failed" and r.error)
    # Submission to end, as the task's owner recorded them.
    task_ms = [(r.finished - r.submitted) * 1000 for r in results if r.finished]
    latency: dict[str, list[float]] = collections.defaultdict(list)
    for r in status.restarts:
        latency[str(r.placement)].append(r.latency_s * 1000)
    return {
        "submitted": tasks - sum(1 for x in lost if x.startswith("sub")),
        "completed": states["completed"], "degraded": states["degraded"],
        "failed": states["failed"], "failed_reasons": dict(reasons),
        "lost": len(lost) + sum(1 for r in results if r.state not in
                                ("completed", "degraded", "failed", "cancelled")),
        "lost_detail": lost[:10], "hung": hung, "kills": kills,
        "restarts": len(status.restarts),
        "restart_ms_p50": {k: pct(v, 50) for k, v in latency.items()},
        "restart_ms_p95": {k: pct(v, 95) for k, v in latency.items()},
        "retries": sum(len(r.attempts) - 1 for r in results),
        "task_ms_p50": pct(task_ms, 50), "task_ms_p95": pct(task_ms, 95),
        "task_ms_max": round(max(task_ms, default=0.0), 1),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the chaos scenario and writes its figures; non-zero if a task was lost or hung."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--inflight", type=int, default=50)
    parser.add_argument("--kill-every", type=int, default=200, help="milliseconds")
    parser.add_argument("--address", default=None)
    parser.add_argument("--quick", action="store_true", help="150 tasks, 20 in flight")
    add_out(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.tasks, args.inflight = 150, 20
    print(f"{args.tasks} tasks, {args.inflight} in flight, a SIGKILL every {args.kill_every} ms",
          flush=True)
    figures = asyncio.run(run(args.tasks, args.inflight, args.kill_every, address=args.address,
                              progress_every=max(args.tasks // 10, 1)))
    for key, value in figures.items():
        print(f"{key:<16} {value}")
    write(args, "chaos", figures, ensure_ascii=False)
    ok = figures["lost"] == 0 and figures["hung"] == 0
    print("PASS: no task lost or hung" if ok else "FAIL: tasks were lost or hung")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
