"""Restart latency: from an agent's death to its new incarnation's first reply, as a caller sees it.

Two scenarios (``--scenario isolated|steady|both``, both by default), each on a Ray of its own:
the isolated one, below, where every death starts from the steady state, and the steady one
(:mod:`reach.bench.restart_steady`), where 20 agents under one supervisor crash one a second
(``--crashes``, 30; ``--crash-every``, 1 s) and nothing is awaited between two crashes. Both go
into ``restart.json``, the steady scenario's under its ``steady`` key (a run of one scenario
keeps the other's figures in the file).

The isolated scenario's contestants, all in one Ray, taking turns death by death (the order
rotates every round):

- packed:          a supervised agent in a pool of 2 hosts; its host dies, it moves to the other
                   live host (the dead one is started again, empty, in the background);
- dedicated_spare: a supervised dedicated agent, ``reach.init(spares=1)``: its restart takes a
                   warm spare host (and a new spare is started in its place);
- dedicated_cold:  the same with no spare (a second runtime, ``reach.init(spares=0)``, whose
                   supervisor's spawner starts a new host process for the restart);
- ray:             a plain ``@ray.remote(max_restarts=-1)`` async actor restarted by Ray itself,
                   the anchor.

Two kinds of death, ``--restarts`` of each per contestant: ``sigkill`` (the driver SIGKILLs the
process that holds the agent, timed just before ``os.kill``) and ``crash`` (the agent's own
handler calls ``os._exit(1)``, timed by the handler's clock just before it, written to a file;
the time from the driver sending the crash request to that moment is reported beside it).

The caller starts a request every 2 ms (``--probe-every``), each with a 2 s timeout, never
waiting for the earlier ones, until the first reply from a new incarnation (the reply names its
process and a token drawn by each incarnation): the latency is that reply's arrival minus the
death. (Probing costs the driver CPU, as a busy caller would: on a small machine the restarts
share its cores with it, and each death's ``busy`` share of the machine is recorded.) Every death
starts from the steady state: the supervisor has recorded the previous restart, the pool's two
hosts answer, a warm spare is offered and none is still starting (for the spare contestant,
once the spares' top-up after its restart has had its time: the pool may have grown with the
claims, and a new process costs a core for a while), and the previous restart is
out of the supervisor's intensity period (``Intensity(1000, 1 s)``, default backoff), longer
than the backoff's reset period (``backoff_reset_s=0.5``), so each restart is immediate as for
an isolated failure (a child failing again sooner backs off by design: that would measure the
backoff, not the restart).
Security is reach's default (signed, audited).

Prints p50/p95/max per contestant and kind, when the supervisor detected the death (``detect``)
and its own restart latency (detection to running again, from its ``RestartRecord``: a restart
that needed several attempts counts from the last one's), the speedups against Ray's restart
and the goals (packed p50 <= 50 ms, p95 <= 150 ms; dedicated with a spare p50 <= 100 ms,
p95 <= 300 ms; both at least 10x faster than Ray's restart at p50); writes ``restart.json``
into the results folder (:mod:`reach.bench.results`; ``--quick``: 5 deaths of each kind, 10
steady crashes). Exits non-zero if an agent did not come back. Other Ray instances on the
machine disturb the figures: the number of raylets seen during the run is reported, and so is
the commit of the checkout the code runs from, if it is one (hosts started during the run import
the code on disk: an edit made meanwhile is what they run). Each round's figures are printed as
it ends (a line every few seconds).
Run: ``python -m reach.bench.restart [--scenario S] [--restarts N] [--crashes N]
[--crash-every S] [--probe-every MS] [--address ADDR] [--logs] [--out DIR]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import reach
from reach import ChildSpec, Intensity, SupervisorSpec
from reach._runtime.names import POOL_PREFIX
from reach.bench.agents import Victim
from reach.bench.anchors import kill
from reach.bench.restart_probe import (
    PERIOD_S,
    PROBE_TIMEOUT_S,
    SETTLE_WITHIN_S,
    Contestant,
    Death,
    RayAnchor,
    ReachVictim,
    commit,
    die_and_return,
    pct,
    raylets,
)
from reach.bench.restart_steady import (
    CRASH_EVERY_S,
    CRASHES,
    DEDICATED,
    PACKED,
    QUICK_CRASHES,
    run_steady,
)
from reach.bench.results import add_out, folder, write
from reach.bench.steady_figures import PLACEMENTS

KINDS = ("sigkill", "crash")
CONTESTANTS = ("packed", "dedicated_spare", "dedicated_cold", "ray")
#: A new probe request leaves this often (by default).
PROBE_EVERY_MS = 2.0
#: The goals: (p50, p95) in ms, and how much faster than Ray's restart (at p50).
GOALS = {"packed": (50.0, 150.0), "dedicated_spare": (100.0, 300.0)}
SPEEDUP_GOAL = 10.0
def summary(deaths: list[Death]) -> dict[str, Any]:
    """The figures of one contestant's deaths of one kind."""
    ms = [d.ms for d in deaths if d.ms is not None]
    sup = [d.supervisor["supervisor_ms"] for d in deaths if "supervisor_ms" in d.supervisor]
    crash = [d.sent_to_crash_ms for d in deaths if d.sent_to_crash_ms is not None]
    return {"n": len(ms), "failed": len(deaths) - len(ms),
            "p50_ms": pct(ms, 50), "p95_ms": pct(ms, 95), "max_ms": max(ms, default=None),
            "supervisor_p50_ms": pct(sup, 50), "supervisor_max_ms": max(sup, default=None),
            # death -> the supervisor's detection, and its restart done -> the caller's reply
            "detected_p50_ms": pct([d.supervisor["detected_ms"] for d in deaths
                                    if "detected_ms" in d.supervisor], 50),
            "caller_after_running_p50_ms": pct(
                [d.ms - d.supervisor["running_ms"] for d in deaths
                 if d.ms is not None and "running_ms" in d.supervisor], 50),
            "sent_to_crash_p50_ms": pct(crash, 50),
            "settle_p50_ms": pct([d.settle_ms for d in deaths if d.settle_ms is not None], 50),
            "probes_p50": pct([float(d.probes) for d in deaths], 50),
            "busy_p50": pct([d.busy for d in deaths if d.busy is not None], 50),
            "deaths": [vars(d) for d in deaths]}


def judge(figures: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Speedups against Ray's restart and the goals, by contestant and kind."""
    speedups: dict[str, dict[str, Any]] = {}
    goals: dict[str, dict[str, Any]] = {}
    for name in CONTESTANTS[:-1]:
        for kind in KINDS:
            mine, ray_ = figures[name][kind], figures["ray"][kind]
            x50 = (round(ray_["p50_ms"] / mine["p50_ms"], 1)
                   if mine["p50_ms"] and ray_["p50_ms"] else None)
            x95 = (round(ray_["p95_ms"] / mine["p95_ms"], 1)
                   if mine["p95_ms"] and ray_["p95_ms"] else None)
            speedups.setdefault(name, {})[kind] = {"p50": x50, "p95": x95}
            if name in GOALS:
                p50_goal, p95_goal = GOALS[name]
                goals.setdefault(name, {})[kind] = {
                    "p50": mine["p50_ms"] is not None and mine["p50_ms"] <= p50_goal,
                    "p95": mine["p95_ms"] is not None and mine["p95_ms"] <= p95_goal,
                    "x_ray": x50 is not None and x50 >= SPEEDUP_GOAL,
                    "all_returned": mine["failed"] == 0}
    return {"speedup_vs_ray": speedups, "goals": goals}


def show(figures: dict[str, dict[str, Any]], verdict: dict[str, Any]) -> None:
    """Prints the table of figures and the goals."""
    def ms(v: float | None) -> str:
        return f"{v:>8.1f}" if v is not None else f"{'-':>8}"

    print(f"\n{'contestant':<16} {'kind':<8} {'n':>3} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8}"
          f" {'detect':>7} {'sup p50':>8} {'x ray p50':>9} {'busy':>5}")
    for name in CONTESTANTS:
        for kind in KINDS:
            f = figures[name][kind]
            x = verdict["speedup_vs_ray"].get(name, {}).get(kind, {}).get("p50")
            print(f"{name:<16} {kind:<8} {f['n']:>3} {ms(f['p50_ms'])} {ms(f['p95_ms'])} "
                  f"{ms(f['max_ms'])} {ms(f['detected_p50_ms'])[1:]} {ms(f['supervisor_p50_ms'])} "
                  f"{(f'{x:.1f}x' if x else '-'):>9} {f['busy_p50'] or 0:>5.0%}")
    crash = {n: figures[n]["crash"]["sent_to_crash_p50_ms"] for n in CONTESTANTS}
    print("crash request sent -> os._exit, p50 ms (not in the figures above): "
          + ", ".join(f"{n} {v}" for n, v in crash.items()))
    for name, kinds in verdict["goals"].items():
        p50_goal, p95_goal = GOALS[name]
        for kind, ok in kinds.items():
            marks = ", ".join(f"{k} {'ok' if v else 'MISSED'}" for k, v in ok.items())
            print(f"goal {name} {kind} (p50 <= {p50_goal:.0f} ms, p95 <= {p95_goal:.0f} ms, "
                  f">= {SPEEDUP_GOAL:.0f}x ray): {marks}")


async def run(restarts: int, address: str | None, *, logs: bool = False,
              probe_every_ms: float = PROBE_EVERY_MS) -> dict[str, Any]:
    """Runs ``restarts`` rounds of deaths of each kind for every contestant; the figures."""
    # Every probe that meets the dead host is a dead letter, which the driver logs as a
    # warning: they are counted per death instead (``errors``).
    logging.getLogger("reach._runtime.directory").setLevel(logging.ERROR)
    before = raylets()  # other Rays' nodes on this machine
    code = commit()
    tag = f"{os.getpid()}"
    work = Path(tempfile.mkdtemp(prefix="reach-restart-"))
    store = str(work / "sessions.db")  # not the folder's own: another run may use it
    rt = reach.init(address=address, log_to_driver=logs, session_path=store, spares=1)
    cold = reach.init(address=address, log_to_driver=logs, session_path=store, spares=0)
    assert cold.limits.spares == 0
    seen = [raylets()]

    def tree(name: str, child: ChildSpec) -> SupervisorSpec:
        return SupervisorSpec(f"restart-{name}-{tag}", children=[child],
                              intensity=Intensity(1000, PERIOD_S), seed=7,
                              backoff_reset_s=PERIOD_S / 2)

    pool = f"restart-{tag}"
    sups = {
        "packed": await rt.supervise(tree("packed", ChildSpec(
            Victim, f"victim-packed-{tag}", placement=reach.Packed(pool=pool, size=2)))),
        "dedicated_spare": await rt.supervise(tree("spare", ChildSpec(
            Victim, f"victim-spare-{tag}"))),
        "dedicated_cold": await cold.supervise(tree("cold", ChildSpec(
            Victim, f"victim-cold-{tag}"))),
    }
    contestants: dict[str, Contestant] = {
        "packed": ReachVictim("packed", rt, sups["packed"], f"victim-packed-{tag}", pool=pool),
        "dedicated_spare": ReachVictim("dedicated_spare", rt, sups["dedicated_spare"],
                                       f"victim-spare-{tag}", spare=True),
        "dedicated_cold": ReachVictim("dedicated_cold", cold, sups["dedicated_cold"],
                                      f"victim-cold-{tag}"),
        "ray": (anchor := RayAnchor()),
    }
    for c in contestants.values():  # up, and in the steady state (the spare offered)
        await c.ping()
        end = time.monotonic() + SETTLE_WITHIN_S
        while isinstance(c, ReachVictim) and not (
                (c.pool is None or await c.pool_up())
                and (not c.spare or await c.spare_offered())):
            if time.monotonic() > end:
                raise RuntimeError(f"{c.name} did not reach its steady state")
            await asyncio.sleep(0.05)
    deaths: dict[str, dict[str, list[Death]]] = {n: {k: [] for k in KINDS} for n in CONTESTANTS}
    started = time.perf_counter()
    for round_ in range(restarts):
        shift = round_ % len(CONTESTANTS)
        order = CONTESTANTS[shift:] + CONTESTANTS[:shift]  # every position in turn
        for kind in KINDS:
            line = []
            for name in order:
                death = await die_and_return(contestants[name], kind, work,
                                             probe_every_ms / 1000)
                deaths[name][kind].append(death)
                got = f"{death.ms:.0f} ms" if death.ms is not None else "FAILED"
                line.append(f"{name} {got}" + (f" ({death.note})" if death.note else ""))
            print(f"  [{round_ + 1}/{restarts}] {kind:<7} " + ", ".join(line), flush=True)
        seen.append(raylets())
    wall = time.perf_counter() - started
    for sup in sups.values():
        await sup.stop()
    kill(anchor.actor)
    for i in range(2):  # pool hosts outlive their agents: end them too
        with contextlib.suppress(reach.ReachError):  # gone already
            rt.cluster.kill(rt.cluster.host(f"{POOL_PREFIX}{pool}.{i}"))
    await cold.close()
    await rt.close()
    seen.append(raylets())
    figures = {n: {k: summary(deaths[n][k]) for k in KINDS} for n in CONTESTANTS}
    verdict = judge(figures)
    show(figures, verdict)
    joined = address or os.environ.get("RAY_ADDRESS") or "local"
    ours = 1 if joined == "local" else 0  # a local Ray of our own (``reach bench`` says "local")
    others = max(before, max(seen) - ours)
    print(f"raylets on this machine: {before} before this run's Ray, {min(seen)}..{max(seen)} "
          f"during it ({ours} ours): {'other Rays overlapped' if others else 'no other Ray'}")
    now = commit()
    if now != code:
        print(f"the checkout changed during the run: {code} -> {now}")
    return {"restarts": restarts, "seconds": round(wall, 1), "commit": code,
            "commit_after": now,
            "probe_every_ms": probe_every_ms, "probe_timeout_ms": PROBE_TIMEOUT_S * 1000,
            "intensity_period_s": PERIOD_S, "raylets_before": before, "raylets_during": seen,
            "other_rays_overlapped": others > 0,
            **verdict, "contestants": figures}


def merged(path: Path, isolated: dict[str, Any] | None,
           steady: dict[str, Any] | None) -> dict[str, Any]:
    """The figures to write to ``path``: those of the scenarios run now over those the file
    holds (a run of one scenario keeps the other's figures)."""
    try:
        previous = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        previous = {}
    if not isinstance(previous, dict):
        previous = {}
    out = dict(isolated) if isolated is not None else previous
    kept = steady if steady is not None else previous.get("steady")
    if kept is not None:
        out["steady"] = kept
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the restart benchmark and writes its figures; non-zero if an agent did not return."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--scenario", choices=("isolated", "steady", "both"), default="both",
                        help="isolated deaths, the steady trickle of crashes, or both (both)")
    parser.add_argument("--restarts", type=int, default=20,
                        help="isolated: deaths of each kind per contestant (20)")
    parser.add_argument("--crashes", type=int, default=CRASHES,
                        help=f"steady: crashes, one every --crash-every ({CRASHES})")
    parser.add_argument("--crash-every", type=float, default=CRASH_EVERY_S,
                        help=f"steady: seconds between two crashes ({CRASH_EVERY_S:g})")
    parser.add_argument("--address", default=None)
    parser.add_argument("--logs", action="store_true",
                        help="show the actors' logs (reach's warnings) on this driver's stderr")
    parser.add_argument("--probe-every", type=float, default=PROBE_EVERY_MS,
                        help="milliseconds between the caller's probes (2)")
    parser.add_argument("--quick", action="store_true",
                        help=f"5 deaths of each kind, {QUICK_CRASHES} steady crashes")
    add_out(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.restarts, args.crashes = 5, QUICK_CRASHES
    isolated = steady = None
    failed = 0
    if args.scenario in ("isolated", "both"):
        print(f"{args.restarts} deaths of each kind per contestant: "
              f"{', '.join(CONTESTANTS)}; kinds {', '.join(KINDS)}", flush=True)
        isolated = asyncio.run(run(args.restarts, args.address, logs=args.logs,
                                   probe_every_ms=args.probe_every))
        failed += sum(isolated["contestants"][n][k]["failed"] for n in CONTESTANTS
                      for k in KINDS)
    if args.scenario in ("steady", "both"):
        print(f"steady: {DEDICATED} dedicated and {PACKED} packed agents under one supervisor, "
              f"a crash every {args.crash_every:g} s, {args.crashes} crashes", flush=True)
        steady = asyncio.run(run_steady(
            args.address, args.crashes, every_s=args.crash_every,
            probe_every_s=args.probe_every / 1000, logs=args.logs,
            work=Path(tempfile.mkdtemp(prefix="reach-steady-"))))
        failed += sum(steady[p]["failed"] for p in PLACEMENTS)
    write(args, "restart", merged(folder(args.out, args.quick) / "restart.json", isolated,
                                  steady))
    if failed:
        print(f"FAIL: {failed} deaths without a return (see 'note' in the JSON)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
