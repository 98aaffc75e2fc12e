"""The restart benchmark's bookkeeping, without Ray: which reply is a new incarnation's, how the
steady scenario's crashes are summed up and judged, and how a run of one scenario keeps the other's
figures in restart.json."""

from __future__ import annotations

import json
from pathlib import Path

import reach
from reach.bench.agents import read_mark
from reach.bench.restart import merged
from reach.bench.restart_steady import Watch
from reach.bench.steady_figures import SteadyCrash, attribute, figures_of, goals
from reach.records import RestartPlacement


def crashed(path: Path, at: float, token: str) -> Path:
    """A mark as the crash handler writes it just before os._exit."""
    path.write_text(f"{at!r} {token}", encoding="ascii")
    return path


def test_a_mark_gives_the_crash_moment_and_the_incarnation_and_nothing_before_it(
    tmp_path: Path,
) -> None:
    mark = tmp_path / "mark"
    assert read_mark(str(mark)) is None
    mark.write_text("", encoding="ascii")  # created, not yet written
    assert read_mark(str(mark)) is None
    assert read_mark(str(crashed(mark, 1700000000.25, "abc"))) == (1700000000.25, "abc")


def test_the_return_is_the_first_reply_of_another_incarnation_after_the_crash(
    tmp_path: Path,
) -> None:
    watch = Watch("a-1", tmp_path / "mark")
    watch.replies = [(10.0, "old"), (10.5, "older"), (11.2, "new"), (11.1, "new")]
    assert watch.returned() is None  # no crash yet: nothing counts as a return
    crashed(tmp_path / "mark", 10.8, "old")
    # "older" answered before the crash (an incarnation a host-mate's crash had replaced)
    assert watch.returned() == 11.1


def crash(agent: str, placement: str, ms: float | None, *, warm: bool | None = None,
          sent_at: float = 100.0, host: str = "") -> SteadyCrash:
    return SteadyCrash(agent, placement, sent_at=sent_at, ms=ms,
                       sent_to_crash_ms=None if ms is None else 2.0, warm_spare=warm, host=host)


def test_each_placement_is_summed_up_apart_with_its_worst_and_its_warm_and_cold_starts() -> None:
    crashes = [crash("p-1", "packed", 40.0, host="reach.pool.p.0"),
               crash("d-1", "dedicated", 45.0, warm=True),
               crash("p-2", "packed", 250.0, host="reach.host.5a7e"),
               crash("p-3", "packed", 50.0, host="reach.pool.p.1"),
               crash("d-2", "dedicated", 1200.0, warm=False), crash("d-3", "dedicated", None)]
    packed, dedicated = figures_of(crashes, "packed"), figures_of(crashes, "dedicated")
    assert (packed["n"], packed["failed"], packed["p50_ms"], packed["max_ms"]) == (
        3, 0, 50.0, 250.0)
    assert packed["ms_in_order"] == [40.0, 250.0, 50.0]
    assert "warm_spare" not in packed
    assert packed["on_spare"] == 1  # the pool's hosts were both dead: it took a spare
    assert (dedicated["n"], dedicated["failed"], dedicated["p50_ms"]) == (2, 1, 622.5)
    assert (dedicated["warm_spare"], dedicated["cold"]) == (1, 1)
    verdict = goals({"packed": packed, "dedicated": dedicated})
    assert verdict["packed"] == {"p50": True, "max": True, "all_returned": True}
    assert verdict["dedicated"] == {"p50": False, "max": False, "all_returned": False}


def test_a_crash_gets_the_first_restart_of_its_own_agent_after_it() -> None:
    c = crash("d-1", "dedicated", 50.0, sent_at=100.0)  # died at 100.002
    restarts = [reach.RestartRecord("d-1", 99.0, RestartPlacement.DEDICATED, 0.01, "earlier"),
                reach.RestartRecord("p-1", 100.02, RestartPlacement.PACKED, 0.01, "another"),
                reach.RestartRecord("d-1", 100.042, RestartPlacement.DEDICATED, 0.02, "this"),
                reach.RestartRecord("d-1", 101.0, RestartPlacement.DEDICATED, 0.02, "later")]
    attribute([c], restarts)
    assert c.supervisor == {"supervisor_ms": 20.0, "running_ms": 40.0, "detected_ms": 20.0}


def test_a_dedicated_crash_is_backed_off_from_the_third_in_a_row_within_the_reset_period(
) -> None:
    first = crash("d-1", "dedicated", 30.0, sent_at=100.0)
    again = crash("d-1", "dedicated", 32.0, sent_at=105.0)  # 5 s after its restart: forgiven
    third = crash("d-1", "dedicated", 80.0, sent_at=109.0)  # 4 s after that: backed off
    later = crash("d-1", "dedicated", 35.0, sent_at=125.0)  # 16 s after
    other = crash("d-2", "dedicated", 40.0, sent_at=106.0)  # its first crash
    packed = crash("p-1", "packed", 50.0, sent_at=107.0)
    crashes = [first, again, third, later, other, packed]
    restarts = [reach.RestartRecord(c.agent, c.sent_at + 0.03, RestartPlacement.DEDICATED,
                                    0.02, "") for c in crashes]
    attribute(crashes, restarts, reset_s=10.0)
    assert [c.backed_off for c in crashes[:5]] == [False, False, True, False, False]
    assert packed.backed_off is None  # it dies with its host-mates: no backoff
    figures = figures_of(crashes[:5], "dedicated")
    assert (figures["backed_off"], figures["p50_ms_not_backed_off"]) == (1, 33.5)


def test_a_run_of_one_scenario_keeps_the_other_scenarios_figures(tmp_path: Path) -> None:
    path = tmp_path / "restart.json"
    assert merged(path, {"restarts": 20}, None) == {"restarts": 20}
    assert merged(path, None, {"crashes": 30}) == {"steady": {"crashes": 30}}
    path.write_text(json.dumps({"restarts": 20, "steady": {"crashes": 30}}), encoding="utf-8")
    assert merged(path, {"restarts": 5}, None) == {"restarts": 5, "steady": {"crashes": 30}}
    assert merged(path, None, {"crashes": 40}) == {"restarts": 20, "steady": {"crashes": 40}}
    assert merged(path, {"restarts": 5}, {"crashes": 40}) == {
        "restarts": 5, "steady": {"crashes": 40}}
    path.write_text("not json", encoding="utf-8")
    assert merged(path, None, {"crashes": 40}) == {"steady": {"crashes": 40}}
