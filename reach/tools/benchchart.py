"""The benchmark chart: throughput and latency by contestant, drawn from the results folder's
``*.json`` (``bench/results/`` by default), as the ``reach.bench`` modules write them.

Eleven panels in one PNG: messages per second and p50/p95 latency of the seed scenario's
contestants (raw Ray first, then each reach placement), the same for the I/O-bound scenario's
(with each one's share of the ideal throughput), the codec's cost per envelope beside pickle,
the session store's append rate by commit strategy, A2A calls through the gateway beside the
direct client, a trivial Ray Serve echo and the outbound proxy, and the p50/p95 restart latency
(an agent's death to its new incarnation's first reply) after a SIGKILL and after a crash, Ray's
own restart first, then reach's, against the goals, with the steady scenario's (a crash a second
among 20 agents) p50/p95/max beside them. A panel whose results file is missing says so instead
of failing, so a partial run still gives a chart.
"""

from __future__ import annotations

import json
import math
import re
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import LogLocator, NullFormatter, StrMethodFormatter

#: The results files the chart reads, by benchmark name.
FILES = ("seed_scenario", "io_bound", "codec", "sessions", "gateway", "restart")
RAW_COLOUR = "#8c8c8c"
P50_COLOUR, P95_COLOUR = "#4c72b0", "#dd8452"
REACH_COLOURS = ("#1f77b4", "#2ca02c", "#9467bd", "#d62728", "#17becf", "#bcbd22")
#: Words of a contestant's key said otherwise in its label (``packed_id``: reach packed by ID).
LABEL_WORDS = {"id": "by ID", "capability": "by capability"}
#: The gateway benchmark's contestants (``reach.bench.gateway``), in the chart's order and words.
GATEWAY_LABELS = {"serve_echo": "Serve echo", "direct": "reach direct",
                  "gateway": "A2A via gateway", "a2a_direct": "A2A server direct",
                  "outbound": "reach via A2A proxy"}
#: The restart benchmark's contestants (``reach.bench.restart``), as the chart names them.
RESTART_LABELS = {"ray": "Ray's own restart", "packed": "reach packed",
                  "dedicated_spare": "reach dedicated + warm spare",
                  "dedicated_cold": "reach dedicated, no spare"}
#: The restart goals at p50, in ms, by contestant (``GOALS`` in ``reach.bench.restart``).
RESTART_GOALS_MS = {"packed": 50.0, "dedicated_spare": 100.0}
#: The kinds of death the restart benchmark times, and each one's panel title.
RESTART_KINDS = {"sigkill": "Restart after a SIGKILL of the agent's process",
                 "crash": "Restart after a crash (the handler calls os._exit)"}
#: The restart benchmark's steady scenario: its placements as the chart names them, and its
#: goals for both, in ms (``GOAL_P50_MS``, ``GOAL_MAX_MS`` in ``reach.bench.restart_steady``).
STEADY_LABELS = {"packed": "reach packed", "dedicated": "reach dedicated"}
STEADY_GOALS_MS = {"p50": 60.0, "max": 300.0}
MAX_COLOUR = "#c44e52"


def load(folder: Path) -> tuple[dict[str, Any], list[str]]:
    """Reads the results files in ``folder``.

    Returns:
        The figures by benchmark name (missing files left out), and one line per file that
        exists but could not be read.
    """
    results: dict[str, Any] = {}
    problems: list[str] = []
    for name in FILES:
        path = folder / f"{name}.json"
        if not path.is_file():
            continue
        try:
            results[name] = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            problems.append(f"{path}: {exc}")
    return results, problems


def contestants(figures: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """A scenario's contestants (the seed's, the I/O-bound one's) as (label, figures): raw Ray
    first, then reach's.

    A contestant is any entry with ``msgs_per_s``, ``p50_ms`` and ``p95_ms``; the others keep
    the order of the file.
    """
    found = [(key, value) for key, value in figures.items()
             if isinstance(value, Mapping) and {"msgs_per_s", "p50_ms", "p95_ms"} <= value.keys()]
    found.sort(key=lambda kv: kv[0] != "raw")  # stable: raw first, the rest as written
    return [("raw Ray" if key == "raw" else _label(key), value) for key, value in found]


def gateway_contestants(figures: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """The gateway benchmark's contestants as (label, figures), in :data:`GATEWAY_LABELS`'
    order; those without figures are left out."""
    return [(label, figures[key]) for key, label in GATEWAY_LABELS.items()
            if isinstance(figures.get(key), Mapping)
            and {"msgs_per_s", "p50_ms", "p95_ms"} <= figures[key].keys()]


def _label(key: str) -> str:
    """``packed_signed`` -> ``reach packed signed``; ``packed_id`` -> ``reach packed by ID``."""
    return " ".join(["reach", *(LABEL_WORDS.get(word, word) for word in key.split("_"))])


@dataclass(frozen=True)
class Restart:
    """One contestant's restart latency after one kind of death: from the death to the first
    reply of the new incarnation, as the caller saw it."""

    label: str
    p50_ms: float | None  # None when no death of this kind was followed by a return
    p95_ms: float | None
    returned: int
    failed: int  # deaths after which the agent did not come back
    goal_p50_ms: float | None


def restarts(figures: Mapping[str, Any], kind: str) -> list[Restart]:
    """The restart benchmark's contestants after ``kind`` of death (``sigkill``, ``crash``):
    Ray's own restart first, then reach's in the order of the file.

    Args:
        figures: ``restart.json`` as read; contestants without figures for ``kind`` are left out.
        kind: the kind of death.
    """
    found = figures.get("contestants")
    if not isinstance(found, Mapping):
        return []
    rows = [(key, kinds[kind]) for key, kinds in found.items()
            if isinstance(kinds, Mapping) and isinstance(kinds.get(kind), Mapping)
            and {"p50_ms", "p95_ms"} <= kinds[kind].keys()]
    rows.sort(key=lambda kv: kv[0] != "ray")  # stable: Ray first, the rest as written
    return [Restart(label=RESTART_LABELS.get(key) or _label(key),
                    p50_ms=_ms(run["p50_ms"]), p95_ms=_ms(run["p95_ms"]),
                    returned=int(run.get("n", 0)), failed=int(run.get("failed", 0)),
                    goal_p50_ms=RESTART_GOALS_MS.get(key))
            for key, run in rows]


@dataclass(frozen=True)
class Steady:
    """One placement's restarts in the steady scenario (a crash every second, not waiting for
    the previous return): from each crash to the first reply of the new incarnation."""

    label: str
    p50_ms: float | None
    p95_ms: float | None
    max_ms: float | None
    returned: int
    failed: int


def steady(figures: Mapping[str, Any]) -> list[Steady]:
    """The steady scenario's placements, packed then dedicated, from ``restart.json`` as read
    (its ``steady`` key); none when it holds no steady figures."""
    found = figures.get("steady")
    if not isinstance(found, Mapping):
        return []
    return [Steady(label=label, p50_ms=_ms(run.get("p50_ms")), p95_ms=_ms(run.get("p95_ms")),
                   max_ms=_ms(run.get("max_ms")), returned=int(run.get("n", 0)),
                   failed=int(run.get("failed", 0)))
            for key, label in STEADY_LABELS.items()
            if isinstance(run := found.get(key), Mapping)]


def _ms(value: Any) -> float | None:
    return None if value is None else float(value)


def draw(results: Mapping[str, Any], out: Path, *, title: str = "reach benchmarks") -> Path:
    """Draws the chart of ``results`` (as :func:`load` returns them) into the PNG ``out``.

    Returns:
        ``out``, written (its folder is created if need be).
    """
    fig = Figure(figsize=(13, 22), dpi=100, layout="constrained")
    fig.suptitle(title, fontsize=15)
    rows = fig.subfigures(5, 1, squeeze=False)  # laid out apart: long labels below widen nothing
    through, latency = rows[0, 0].subplots(1, 2)
    io_through, io_latency = rows[1, 0].subplots(1, 2)
    codec, sessions = rows[2, 0].subplots(1, 2)
    gw_through, gw_latency = rows[3, 0].subplots(1, 2)
    restart_axes = rows[4, 0].subplots(1, len(RESTART_KINDS) + 1)
    seed = contestants(results.get("seed_scenario", {}))
    _throughput(through, seed, "Seed scenario", "reach bench --only seed_scenario")
    _latency(latency, seed, "Seed scenario", "reach bench --only seed_scenario")
    io_bound = results.get("io_bound", {})
    io = contestants(io_bound)
    _throughput(io_through, io, _io_title(io_bound), "reach bench --only io_bound")
    _latency(io_latency, io, "I/O-bound handlers", "reach bench --only io_bound")
    _codec(codec, results.get("codec", {}))
    _sessions(sessions, results.get("sessions", {}))
    gateway = gateway_contestants(results.get("gateway", {}))
    _throughput(gw_through, gateway, "A2A from outside", "reach bench --only gateway")
    _latency(gw_latency, gateway, "A2A from outside", "reach bench --only gateway")
    restart = results.get("restart", {})
    for ax, kind in zip(restart_axes[:-1], RESTART_KINDS, strict=True):
        _restart(ax, restart, kind)
    _steady(restart_axes[-1], restart)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png")
    return out


def _colours(labels: list[str]) -> list[str]:
    reach = iter(REACH_COLOURS * (len(labels) // len(REACH_COLOURS) + 1))
    return [RAW_COLOUR if label == "raw Ray" else next(reach) for label in labels]


def _tick(label: str) -> str:
    """One word a line (``reach``, ``packed``, ``signed``): long labels never overlap."""
    return label.replace(" ", "\n")


def _words(key: str) -> str:
    """``group_commit_10_per_call_coalesced`` -> ``group commit, 10/call, coalesced``."""
    parts = re.fullmatch(r"(.+?)_(\d+)_per_call(?:_(.+))?", key)
    if parts is None:
        return key.replace("_", " ")
    words = [parts[1].replace("_", " "), f"{parts[2]}/call"]
    return ", ".join(words + ([parts[3].replace("_", " ")] if parts[3] else []))


def _missing(ax: Axes, title: str, what: str) -> None:
    ax.set_title(title)
    ax.text(0.5, 0.5, f"no figures: run {what}", ha="center", va="center",
            transform=ax.transAxes, color="#666666")
    ax.set_xticks([])
    ax.set_yticks([])


def _io_title(io_bound: Mapping[str, Any]) -> str:
    """``I/O-bound handlers (0.5 s each, 2,000 in flight)`` as far as the file says."""
    call_s, inflight = io_bound.get("call_s"), io_bound.get("inflight")
    if call_s is None or inflight is None:
        return "I/O-bound handlers"
    return f"I/O-bound handlers ({float(call_s):g} s each, {int(inflight):,} in flight)"


def _throughput(ax: Axes, found: list[tuple[str, Mapping[str, Any]]], scenario: str,
                how: str) -> None:
    title = f"{scenario}: throughput"
    if not found:
        _missing(ax, title, how)
        return
    labels = [label for label, _ in found]
    xs = range(len(labels))
    rates = [float(f["msgs_per_s"]) for _, f in found]
    bars = ax.bar(xs, rates, color=_colours(labels))
    shares = [f.get("efficiency") for _, f in found]
    ax.bar_label(bars, padding=2, labels=[
        f"{rate:,.0f}" + (f"\n{float(share):.0%} of ideal" if share is not None else "")
        for rate, share in zip(rates, shares, strict=True)], fontsize=8)
    ideal = found[0][1].get("ideal_msgs_per_s")
    if ideal is not None:
        ax.axhline(float(ideal), color="#666666", linestyle="--", linewidth=1,
                   label=f"ideal: {float(ideal):,.0f} msg/s")
        ax.legend(loc="upper left", fontsize=8)
    ax.set_xticks(list(xs), [_tick(label) for label in labels])
    messages = found[0][1].get("messages")
    ax.set_title(title + (f"\n{int(messages):,} messages each" if messages else ""))
    ax.set_ylabel("messages per second (higher is better)")
    ax.margins(y=0.18)


def _latency(ax: Axes, found: list[tuple[str, Mapping[str, Any]]], scenario: str,
             how: str) -> None:
    title = f"{scenario}: latency per request"
    if not found:
        _missing(ax, title, how)
        return
    labels = [label for label, _ in found]
    xs = range(len(labels))
    width = 0.38
    for offset, key, colour in ((-width / 2, "p50", P50_COLOUR), (width / 2, "p95", P95_COLOUR)):
        bars = ax.bar([x + offset for x in xs], [float(f[f"{key}_ms"]) for _, f in found],
                      width, label=key, color=colour)
        ax.bar_label(bars, fmt="{:,.1f}", padding=2, fontsize=8)
    ax.set_xticks(list(xs), [_tick(label) for label in labels])
    ax.set_title(title)
    ax.set_ylabel("milliseconds (lower is better)")
    ax.legend()
    ax.margins(y=0.12)


def _codec(ax: Axes, codec: Mapping[str, Any]) -> None:
    title = "Codec: cost per envelope, reach beside pickle"
    cases = codec.get("cases")
    if not isinstance(cases, Mapping) or not cases:
        _missing(ax, title, "reach bench --only codec")
        return
    names = list(cases)
    series = (("reach_us", "reach encode + decode + validate", "#1f77b4"),
              ("reach_schema_us", "reach, + payload schema read", "#aec7e8"),
              ("pickle_us", "pickle (no validation)", RAW_COLOUR))
    width = 0.8 / len(series)
    for i, (key, label, colour) in enumerate(series):
        xs = [n + (i - 1) * width for n in range(len(names))]
        bars = ax.bar(xs, [float(cases[c].get(key, 0.0)) for c in names], width, label=label,
                      color=colour)
        ax.bar_label(bars, fmt="{:.1f}", padding=2, fontsize=8)
    ax.set_xticks(range(len(names)), names)
    ax.set_title(title)
    ax.set_ylabel("microseconds per envelope (lower is better)")
    ax.legend(fontsize=8)
    ax.margins(y=0.12)


def _sessions(ax: Axes, sessions: Mapping[str, Any]) -> None:
    title = "Sessions: appends per second, by commit strategy"
    rows: list[tuple[str, float]] = []
    for level, prefix in (("storage", "SQLite"), ("store", "Ray store")):
        runs = sessions.get(level)
        if isinstance(runs, Mapping):
            rows += [(f"{prefix}: {_words(key)}", float(run["msgs_per_s"]))
                     for key, run in runs.items()
                     if isinstance(run, Mapping) and "msgs_per_s" in run]
    if not rows:
        _missing(ax, title, "reach bench --only sessions")
        return
    rows.reverse()  # barh draws bottom-up: keep the file's order top-down
    bars = ax.barh([label for label, _ in rows], [rate for _, rate in rows],
                   color=["#2ca02c" if "group" in label else "#d62728" for label, _ in rows])
    ax.bar_label(bars, fmt="{:,.0f}", padding=2, fontsize=8)
    ax.set_xscale("log")
    ax.set_title(title)
    ax.set_xlabel("messages per second, log scale (higher is better)")
    ax.tick_params(axis="y", labelsize=8)
    ax.margins(x=0.15)


def _restart(ax: Axes, figures: Mapping[str, Any], kind: str) -> None:
    title = RESTART_KINDS[kind]
    found = restarts(figures, kind)
    if not found:
        _missing(ax, title, "reach bench --only restart")
        return
    xs = range(len(found))
    width = 0.38
    for offset, key, colour in ((-width / 2, "p50", P50_COLOUR), (width / 2, "p95", P95_COLOUR)):
        values = [r.p50_ms if key == "p50" else r.p95_ms for r in found]
        bars = ax.bar([x + offset for x in xs], [math.nan if v is None else v for v in values],
                      width, label=key, color=colour)
        ax.bar_label(bars, labels=["" if v is None else f"{v:,.0f}" for v in values], padding=2,
                     fontsize=8, bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.5},
                     zorder=4)  # a goal's line passes behind a label near it, not through
    goals = [(x, r.goal_p50_ms) for x, r in zip(xs, found, strict=True) if r.goal_p50_ms]
    if goals:  # each over its own contestant's bars: the goals differ
        ax.hlines([g for _, g in goals], [x - width * 1.2 for x, _ in goals],
                  [x + width * 1.2 for x, _ in goals], colors="#222222", linestyles="--",
                  linewidth=1.2, label="p50 goal")
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    known = [v for k in RESTART_KINDS for r in restarts(figures, k)  # the same scale for each kind
             for v in (r.p50_ms, r.p95_ms, r.goal_p50_ms) if v]
    if known:  # room below the shortest bar and above the tallest one's label
        ax.set_ylim(min(known) / 2, max(known) * 2)
    ax.set_xticks(list(xs), [_restart_tick(r) for r in found], fontsize=8)
    deaths = max(r.returned + r.failed for r in found)
    overlapped = " (other Rays ran meanwhile)" if figures.get("other_rays_overlapped") else ""
    ax.set_title(f"{title}\n{deaths} deaths each, kill to first good reply{overlapped}")
    ax.set_ylabel("milliseconds, log scale (lower is better)")
    ax.legend(loc="upper left", fontsize=8)


def _steady(ax: Axes, figures: Mapping[str, Any]) -> None:
    title = "Steady: a crash a second, none awaited"
    found = steady(figures)
    if not found:
        _missing(ax, title, "reach bench --only restart")
        return
    xs = range(len(found))
    width = 0.27
    for i, (key, colour) in enumerate((("p50", P50_COLOUR), ("p95", P95_COLOUR),
                                       ("max", MAX_COLOUR))):
        values = [getattr(r, f"{key}_ms") for r in found]
        bars = ax.bar([x + (i - 1) * width for x in xs],
                      [math.nan if v is None else v for v in values], width, label=key,
                      color=colour)
        ax.bar_label(bars, labels=["" if v is None else f"{v:,.0f}" for v in values], padding=2,
                     fontsize=8, bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.5},
                     zorder=4)
    for key, style in (("p50", "--"), ("max", ":")):
        ax.axhline(STEADY_GOALS_MS[key], color="#222222", linestyle=style, linewidth=1.2,
                   label=f"{key} goal: {STEADY_GOALS_MS[key]:,.0f} ms")
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    known = [v for r in found for v in (r.p50_ms, r.max_ms) if v] + list(STEADY_GOALS_MS.values())
    ax.set_ylim(min(known) / 2, max(known) * 8)  # the legend above the tallest bar's label
    ax.set_xticks(list(xs), [_steady_tick(r) for r in found], fontsize=8)
    run = figures["steady"]
    dedicated = run.get("dedicated", {})
    overlapped = " (other Rays ran meanwhile)" if run.get("other_rays_overlapped") else ""
    ax.set_title(f"{title}\n{run.get('crashes', '?')} crashes of 20 agents, "
                 f"{run.get('supervisor_restarts', '?')} restarts{overlapped}\n"
                 f"dedicated: {dedicated.get('warm_spare', '?')} into a warm spare, "
                 f"{dedicated.get('cold', '?')} cold")
    ax.set_ylabel("milliseconds, log scale (lower is better)")
    ax.legend(loc="upper left", fontsize=7, ncols=2)


def _steady_tick(r: Steady) -> str:
    lines = [r.label.replace(" ", "\n"), f"{r.returned} crashes"]
    if r.failed:
        lines.append(f"{r.failed} never back")
    return "\n".join(lines)


def _restart_tick(r: Restart) -> str:
    """The label in lines of at most 12 characters (three panels share the row), then the goal
    and the deaths not followed by a return, if any."""
    lines = [textwrap.fill(r.label, 12)]
    if r.goal_p50_ms:
        lines.append(f"goal: p50\n\u2264 {r.goal_p50_ms:,.0f} ms")
    if r.failed:
        lines.append(f"{r.failed} of {r.returned + r.failed} never back")
    return "\n".join(lines)
