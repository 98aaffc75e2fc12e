"""What the restart benchmark's steady scenario (:mod:`reach.bench.restart_steady`) records and
reports: each crash and its return, the figures of each placement against the goals, and the
warm spares (which the restarts took, what an idle one costs, the registry's counts of them).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import Any

import reach
from policies.supervision import DEFAULT_RESET_S, FORGIVEN_REPEATS
from reach.bench.restart_probe import pct
from reach.placement import is_own_host
from reach.ports.registry import SpareStats

#: How often the spares offered are polled (for which restarts took one).
SPARES_POLL_S = 0.05
#: The goals, for packed and dedicated alike: p50 and worst, in ms.
GOAL_P50_MS, GOAL_MAX_MS = 60.0, 300.0
PLACEMENTS = ("packed", "dedicated")


@dataclass
class SteadyCrash:
    """One crash and the return of the agent that crashed."""

    agent: str
    placement: str  # packed or dedicated
    index: int = 0  # the crash's number, in the order the crashes were sent (from 1)
    sent_at: float = 0.0  # epoch seconds: the crash request left
    ms: float | None = None  # the crash to the first reply of the new incarnation
    sent_to_crash_ms: float | None = None
    crash_resends: int = 0  # crash requests sent again: the host died under the one before
    probes: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    busy: float | None = None  # the machine's CPU busy share from the crash to the return
    spares_offered: int = 0  # spares offered (as last polled) when the crash was sent
    host: str = ""  # where the new incarnation runs (packed: a pool host, or a spare it took)
    warm_spare: bool | None = None  # dedicated: its host had been offered as a spare
    # Dedicated: its failure came in a streak past the repeats forgiven (each within the reset
    # period of the restart before), so its restart waited out its own backoff, by design (a
    # packed agent dies with its host-mates: its streak does not grow)
    backed_off: bool | None = None
    supervisor: dict[str, float] = field(default_factory=dict)
    note: str = ""


class SparesSeen:
    """Polls the spares the registry offers: every host name ever offered, and the count now."""

    def __init__(self, rt: reach.Runtime) -> None:
        self.rt = rt
        self.names: set[str] = set()
        self.now = 0
        self.most = 0

    async def poll(self) -> None:
        """Reads the offers once."""
        offered = await self.rt.cluster.registry().spares()
        hosts = [h for names in offered.values() for h in names]
        self.names.update(hosts)
        self.now = len(hosts)
        self.most = max(self.most, self.now)

    async def forever(self) -> None:
        """Polls every :data:`SPARES_POLL_S` until cancelled."""
        while True:
            with contextlib.suppress(reach.ReachError):
                await self.poll()
            await asyncio.sleep(SPARES_POLL_S)


def attribute(crashes: list[SteadyCrash], restarts: list[reach.RestartRecord],
              reset_s: float = DEFAULT_RESET_S) -> None:
    """Gives each crash its supervisor's figures: the first restart of its agent after it; and
    each dedicated crash whether its agent's own backoff delayed it: whether it came in a streak
    of restarts each within ``reset_s`` (the supervisor's ``backoff_reset_s``) of the one before,
    longer than the repeats the supervisor forgives."""
    for c in crashes:
        if c.ms is None or c.sent_to_crash_ms is None:
            continue
        died = c.sent_at + c.sent_to_crash_ms / 1000
        if c.placement == "dedicated":
            streak, at = 0, died
            for then in sorted((r.at for r in restarts if r.child == c.agent and r.at < died),
                               reverse=True):
                if at - then >= reset_s:
                    break
                streak, at = streak + 1, then
            c.backed_off = streak > FORGIVEN_REPEATS
        mine = [r for r in restarts if r.child == c.agent and r.at >= died]
        if not mine:
            continue
        r = min(mine, key=lambda r: r.at)
        running_ms = (r.at - died) * 1000
        c.supervisor = {"supervisor_ms": round(r.latency_s * 1000, 2),
                        "running_ms": round(running_ms, 2),
                        "detected_ms": round(running_ms - r.latency_s * 1000, 2)}


def figures_of(crashes: list[SteadyCrash], placement: str) -> dict[str, Any]:
    """The figures of one placement's crashes."""
    mine = [c for c in crashes if c.placement == placement]
    ms = [c.ms for c in mine if c.ms is not None]
    sup = [c.supervisor["supervisor_ms"] for c in mine if "supervisor_ms" in c.supervisor]
    out: dict[str, Any] = {
        "n": len(ms), "failed": len(mine) - len(ms),
        "p50_ms": pct(ms, 50), "p95_ms": pct(ms, 95), "max_ms": max(ms, default=None),
        "supervisor_p50_ms": pct(sup, 50), "supervisor_max_ms": max(sup, default=None),
        "detected_p50_ms": pct([c.supervisor["detected_ms"] for c in mine
                                if "detected_ms" in c.supervisor], 50),
        "busy_p50": pct([c.busy for c in mine if c.busy is not None], 50),
        "ms_in_order": [c.ms for c in mine]}
    if placement == "dedicated":
        out["warm_spare"] = sum(1 for c in mine if c.warm_spare)
        out["cold"] = sum(1 for c in mine if c.warm_spare is False)
        out["backed_off"] = sum(1 for c in mine if c.backed_off)
        out["p50_ms_not_backed_off"] = pct(
            [c.ms for c in mine if c.ms is not None and c.backed_off is False], 50)
    else:  # a pool whose hosts were all dead took a spare: a host of its own, not the pool's
        out["on_spare"] = sum(1 for c in mine if c.ms is not None and is_own_host(c.host))
    return out


def goals(result: dict[str, Any]) -> dict[str, dict[str, bool]]:
    """Whether each placement met the goals."""
    return {p: {"p50": result[p]["p50_ms"] is not None and result[p]["p50_ms"] <= GOAL_P50_MS,
                "max": result[p]["max_ms"] is not None and result[p]["max_ms"] <= GOAL_MAX_MS,
                "all_returned": result[p]["failed"] == 0}
            for p in PLACEMENTS}


def show(result: dict[str, Any]) -> None:
    """Prints the steady scenario's table and goals."""
    def ms(v: float | None) -> str:
        return f"{v:>8.1f}" if v is not None else f"{'-':>8}"

    others = result["others_busy"]
    print(f"\nsteady: {result['crashes']} crashes, one every {result['crash_every_s']:g} s; "
          f"the supervisor made {result['supervisor_restarts']} restarts; the machine was "
          f"{result['busy'] or 0:.0%} busy, "
          + (f"{others:.0%} with other processes than this run's" if others is not None
             else "other processes unknown"))
    print(f"{'placement':<10} {'n':>3} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8} {'detect':>7} "
          f"{'sup p50':>8} {'sup max':>8} {'busy':>5}")
    for p in PLACEMENTS:
        f = result[p]
        print(f"{p:<10} {f['n']:>3} {ms(f['p50_ms'])} {ms(f['p95_ms'])} {ms(f['max_ms'])} "
              f"{ms(f['detected_p50_ms'])[1:]} {ms(f['supervisor_p50_ms'])} "
              f"{ms(f['supervisor_max_ms'])} {f['busy_p50'] or 0:>5.0%}")
    d = result["dedicated"]
    r = result["registry_spares"]
    counted = (f"; the registry counted {r['taken']} claims taken, {r['missed']} missed, "
               f"{r['started']} spares started, {r['retired']} retired" if r else "")
    print(f"dedicated restarts: {d['warm_spare']} into a warm spare, {d['cold']} cold "
          f"(at most {result['spares_offered_most']} spares offered at once{counted})")
    if d.get("backed_off"):
        print(f"dedicated restarts backed off by their own streak (a third failure in a row or "
              f"more, each within the reset period of the restart before): {d['backed_off']}; "
              f"p50 of the others {d['p50_ms_not_backed_off'] or 0:.1f} ms")
    print(f"packed restarts: {result['packed'].get('on_spare', 0)} onto a warm spare their "
          "pool took (both its hosts dead)")
    cost, start = result["spare_cost"], r.get("start_p50_s")
    if cost:
        print(f"an idle spare: {cost.get('rss_mb')} MB resident, {cost.get('uss_mb', '?')} MB "
              "its own" + (f"; asked for to offered in {start:.2f} s (median)" if start else ""))
    for p, ok in result["goals"].items():
        marks = ", ".join(f"{k} {'ok' if v else 'MISSED'}" for k, v in ok.items())
        print(f"goal {p} steady (p50 <= {GOAL_P50_MS:.0f} ms, max <= {GOAL_MAX_MS:.0f} ms): "
              f"{marks}")


def memory_mb(pid: int) -> dict[str, float]:
    """A process's memory in MB: resident (``rss``), its proportional share (``pss``) and its
    own (``uss``: what ending it frees; the rest is libraries shared with other processes), as
    /proc says (empty where it is not readable: another machine's process)."""
    fields: dict[str, float] = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as f:
            for line in f:
                name, _, rest = line.partition(":")
                if rest.strip().endswith("kB"):
                    fields[name] = int(rest.split()[0]) / 1024
    except (OSError, ValueError):
        return {}
    return {"rss": round(fields.get("Rss", 0.0), 1), "pss": round(fields.get("Pss", 0.0), 1),
            "uss": round(fields.get("Private_Clean", 0.0) + fields.get("Private_Dirty", 0.0), 1)}


async def spare_cost(rt: reach.Runtime) -> dict[str, Any]:
    """What an idle spare offered now costs: its memory, as its host says and as /proc does."""
    offered = await rt.cluster.registry().spares()
    for name in (h for hosts in offered.values() for h in hosts):
        with contextlib.suppress(reach.ReachError):
            info = await rt.cluster.host(name).info()
            return {"rss_mb": round(info["rss_bytes"] / 2**20, 1), **{
                f"{k}_mb": v for k, v in memory_mb(info["pid"]).items()}}
    return {}


def claims_between(before: SpareStats | None, after: SpareStats | None) -> dict[str, Any]:
    """The registry's spare counts over the run: claims taken and missed, spares started and
    retired; the spares offered at the end and the median start time (none from a registry
    that keeps no such counts)."""
    if before is None or after is None:
        return {}
    moved = {k: after[k] - before[k] for k in ("taken", "missed", "started", "retired")}
    return {**moved, "offered_at_end": after["offered"], "start_p50_s": after["start_p50_s"]}
