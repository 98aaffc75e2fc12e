"""The benchmark chart drawn from results files (`reach bench` itself: test_bench_package.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.image import imread

from reach.tools import benchchart

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def figures(msgs: float, p50: float, p95: float) -> dict[str, float]:
    return {"messages": 1000, "seconds": 1000 / msgs, "msgs_per_s": msgs, "p50_ms": p50,
            "p95_ms": p95, "p99_ms": p95 * 1.2}


SEED = {
    "dedicated": figures(1800, 53, 102),
    "raw": figures(1077, 86, 178),
    "packed": {**figures(10600, 8.7, 14.5), "driver_batch_mean": 38.8, "x_raw": 9.85},
    "packed_signed": figures(7000, 12, 20),
    "packed_encrypted": figures(5000, 15, 25),
}


def io_figures(msgs: float, p50: float, p95: float, **extra: Any) -> dict[str, Any]:
    return {**figures(msgs, p50, p95), "ideal_msgs_per_s": 4000.0, "efficiency": msgs / 4000,
            **extra}


IO_BOUND = {
    "agents": 20, "call_s": 0.5, "inflight": 2000,
    "raw": io_figures(1400, 1300, 1900),
    "packed_id": io_figures(3300, 560, 700, registry_calls=0),
    "packed_capability": io_figures(3100, 580, 760, registry_calls=3),
    "dedicated_id": io_figures(2400, 700, 1100, registry_calls=0),
    "dedicated_capability": io_figures(2300, 720, 1200, registry_calls=4),
}
CODEC = {"unit": "microseconds per envelope", "cases": {
    "single": {"reach_us": 12.3, "reach_schema_us": 18.1, "pickle_us": 3.4},
    "batch 100": {"reach_us": 10.2, "reach_schema_us": 15.5, "pickle_us": 1.5},
}}
SESSIONS = {
    "storage": {"group_commit": {"msgs_per_s": 90000.0},
                "commit_per_message": {"msgs_per_s": 2100.0}},
    "store": {"group_commit_1_per_call_coalesced": {"msgs_per_s": 11300.0}},
    "context_read": {"p95_ms": 2.2},
}


def restart_figures(p50: float | None, p95: float | None, *, n: int = 20,
                    failed: int = 0) -> dict[str, Any]:
    return {"n": n, "failed": failed, "p50_ms": p50, "p95_ms": p95,
            "max_ms": None if p95 is None else p95 * 1.1, "supervisor_p50_ms": None,
            "deaths": []}


#: As reach.bench.restart writes it: contestants in its order, Ray's own restart last.
RESTART = {
    "restarts": 20, "other_rays_overlapped": False,
    "speedup_vs_ray": {"packed": {"sigkill": {"p50": 4.2, "p95": 4.1}}},
    "contestants": {
        "packed": {"sigkill": restart_figures(138.9, 158.1),
                   "crash": restart_figures(142.8, 182.1)},
        "dedicated_spare": {"sigkill": restart_figures(94.7, 120.5),
                            "crash": restart_figures(92.1, 120.2)},
        "dedicated_cold": {"sigkill": restart_figures(841.2, 989.9),
                           "crash": restart_figures(831.3, 933.2)},
        "ray": {"sigkill": restart_figures(583.0, 643.2),
                "crash": restart_figures(565.8, 649.5)},
    },
}
STEADY = {
    "crashes": 30, "supervisor_restarts": 75, "other_rays_overlapped": False,
    "packed": {"n": 15, "failed": 0, "p50_ms": 41.0, "p95_ms": 80.5, "max_ms": 120.0},
    "dedicated": {"n": 14, "failed": 1, "p50_ms": 45.2, "p95_ms": 99.0, "max_ms": 1310.0,
                  "warm_spare": 13, "cold": 1},
}
#: The chart's rows are this many pixels high; the restart benchmark's is the last.
ROW_PX = 2200 // 5


def write(folder: Path, **results: Any) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in results.items():
        (folder / f"{name}.json").write_text(json.dumps(data), encoding="utf-8")
    return folder


def assert_png(path: Path) -> np.ndarray:
    assert path.read_bytes()[:8] == PNG_SIGNATURE
    image = imread(path)
    assert image.shape == (2200, 1300, 4)
    assert float(image[..., :3].std()) > 0.05, "the chart is not blank"
    return image


def test_contestants_put_raw_ray_first_and_keep_the_others_in_file_order() -> None:
    found = benchchart.contestants({**SEED, "note": "not a contestant", "partial": {"p50_ms": 1}})
    assert [label for label, _ in found] == [
        "raw Ray", "reach dedicated", "reach packed", "reach packed signed",
        "reach packed encrypted"]
    assert found[0][1]["msgs_per_s"] == 1077


def test_io_bound_contestants_are_labelled_by_placement_and_by_how_they_are_addressed() -> None:
    found = benchchart.contestants(IO_BOUND)
    assert [label for label, _ in found] == [
        "raw Ray", "reach packed by ID", "reach packed by capability", "reach dedicated by ID",
        "reach dedicated by capability"]


def test_a_chart_is_drawn_from_a_sample_of_each_results_file(tmp_path: Path) -> None:
    results, problems = benchchart.load(write(tmp_path / "results", seed_scenario=SEED,
                                              io_bound=IO_BOUND, codec=CODEC, sessions=SESSIONS,
                                              restart=RESTART))
    assert problems == []
    assert set(results) == {"seed_scenario", "io_bound", "codec", "sessions", "restart"}
    assert results["restart"] == RESTART
    out = benchchart.draw(results, tmp_path / "charts" / "chart.png", title="sample")
    assert out == tmp_path / "charts" / "chart.png"
    assert_png(out)


def test_missing_results_leave_their_panels_empty_and_unreadable_ones_are_named(
    tmp_path: Path,
) -> None:
    folder = write(tmp_path, codec=CODEC)
    (folder / "sessions.json").write_text("{not json", encoding="utf-8")
    results, problems = benchchart.load(folder)
    assert list(results) == ["codec"]
    assert len(problems) == 1
    assert problems[0].startswith(str(folder / "sessions.json"))
    full = assert_png(benchchart.draw({"codec": CODEC, "seed_scenario": SEED,
                                       "io_bound": IO_BOUND, "sessions": SESSIONS},
                                      tmp_path / "full.png"))
    partial = assert_png(benchchart.draw(results, tmp_path / "partial.png"))
    assert not np.array_equal(full, partial)


def test_restart_contestants_put_rays_own_restart_first_with_readable_labels_and_goals() -> None:
    found = benchchart.restarts(RESTART, "sigkill")
    assert [r.label for r in found] == [
        "Ray's own restart", "reach packed", "reach dedicated + warm spare",
        "reach dedicated, no spare"]
    assert [(r.p50_ms, r.p95_ms) for r in found] == [
        (583.0, 643.2), (138.9, 158.1), (94.7, 120.5), (841.2, 989.9)]
    assert [r.goal_p50_ms for r in found] == [None, 50.0, 100.0, None]
    assert [(r.returned, r.failed) for r in found] == [(20, 0)] * 4
    assert [r.p50_ms for r in benchchart.restarts(RESTART, "crash")] == [
        565.8, 142.8, 92.1, 831.3]


def test_a_restart_contestant_that_never_came_back_is_kept_and_one_not_killed_is_not() -> None:
    figures = {"contestants": {
        "packed": {"sigkill": restart_figures(None, None, n=0, failed=5)},
        "dedicated_spare": {"crash": restart_figures(90.0, 110.0)},
        "dedicated_pinned": {"sigkill": restart_figures(70.0, 80.0, n=4, failed=1)},
        "ray": {"sigkill": {"n": 0}},  # no figures: not a contestant of this kind
    }}
    found = benchchart.restarts(figures, "sigkill")
    assert [(r.label, r.p50_ms, r.failed) for r in found] == [
        ("reach packed", None, 5), ("reach dedicated pinned", 70.0, 1)]
    assert benchchart.restarts({"restarts": 20}, "sigkill") == []


def test_the_steady_scenario_gives_packed_then_dedicated_with_their_worst_restart() -> None:
    found = benchchart.steady({**RESTART, "steady": STEADY})
    assert [(r.label, r.p50_ms, r.max_ms, r.returned, r.failed) for r in found] == [
        ("reach packed", 41.0, 120.0, 15, 0), ("reach dedicated", 45.2, 1310.0, 14, 1)]
    assert benchchart.steady(RESTART) == []  # a file of the isolated scenario alone


def test_the_steady_panel_is_drawn_beside_the_isolated_ones_and_says_so_when_missing(
    tmp_path: Path,
) -> None:
    isolated = assert_png(benchchart.draw({"restart": RESTART}, tmp_path / "isolated.png"))
    both = assert_png(benchchart.draw({"restart": {**RESTART, "steady": STEADY}},
                                      tmp_path / "both.png"))
    assert np.array_equal(both[:4 * ROW_PX], isolated[:4 * ROW_PX])
    third = slice(2 * 1300 // 3 + 20, None)  # the row's third panel, the steady scenario's
    assert not np.array_equal(both[4 * ROW_PX:, third], isolated[4 * ROW_PX:, third])


def test_the_restart_row_is_drawn_from_its_figures_and_leaves_the_other_panels_as_they_were(
    tmp_path: Path,
) -> None:
    others = {"seed_scenario": SEED, "io_bound": IO_BOUND, "codec": CODEC, "sessions": SESSIONS}
    without = assert_png(benchchart.draw(others, tmp_path / "without.png"))
    with_ = assert_png(benchchart.draw({**others, "restart": RESTART}, tmp_path / "with.png"))
    assert np.array_equal(with_[:4 * ROW_PX], without[:4 * ROW_PX])
    assert not np.array_equal(with_[4 * ROW_PX:], without[4 * ROW_PX:])


GATEWAY = {"clients": 100, "direct": {"msgs_per_s": 3100.0, "p50_ms": 30.1, "p95_ms": 41.0},
           "gateway": {"msgs_per_s": 1020.0, "p50_ms": 90.0, "p95_ms": 120.0},
           "serve_echo": {"msgs_per_s": 1500.0, "p50_ms": 60.0, "p95_ms": 80.0},
           "gateway_added_p50_ms": 59.9}


def test_gateway_contestants_come_in_the_chart_order_and_only_with_figures() -> None:
    found = benchchart.gateway_contestants({**GATEWAY, "outbound": {"msgs_per_s": 5.0}})
    assert [label for label, _ in found] == ["Serve echo", "reach direct", "A2A via gateway"]
    assert benchchart.gateway_contestants({}) == []


def test_the_gateway_row_is_drawn_from_its_figures_and_leaves_the_rows_above_as_they_were(
    tmp_path: Path,
) -> None:
    others = {"seed_scenario": SEED, "io_bound": IO_BOUND, "codec": CODEC, "sessions": SESSIONS}
    without = assert_png(benchchart.draw(others, tmp_path / "without.png"))
    with_ = assert_png(benchchart.draw({**others, "gateway": GATEWAY}, tmp_path / "with.png"))
    assert np.array_equal(with_[:3 * ROW_PX], without[:3 * ROW_PX])
    assert not np.array_equal(with_[3 * ROW_PX:4 * ROW_PX], without[3 * ROW_PX:4 * ROW_PX])
    assert np.array_equal(with_[4 * ROW_PX + ROW_PX // 4:], without[4 * ROW_PX + ROW_PX // 4:])


def test_a_restart_panel_draws_what_it_has_a_contestant_that_never_came_back_among_them(
    tmp_path: Path,
) -> None:
    lost = {"contestants": {**RESTART["contestants"],
                            "packed": {"sigkill": restart_figures(None, None, n=0, failed=20)}}}
    assert_png(benchchart.draw({"restart": lost}, tmp_path / "lost.png"))
