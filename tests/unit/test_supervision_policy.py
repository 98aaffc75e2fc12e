"""Supervision decisions: who restarts, whether the intensity allows it, and the backoff delay.

Time is a number passed in and randomness a seeded ``random.Random``: no clock, no sleeps.
"""

from __future__ import annotations

import random
from collections.abc import Iterable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from policies.supervision import (
    Backoff,
    Intensity,
    RestartType,
    Strategy,
    backoff_delay,
    record_restart,
    should_restart,
    to_restart,
)

CHILDREN = ["a", "b", "c", "d"]


def replay(times: Iterable[float], intensity: Intensity) -> tuple[tuple[float, ...], list[bool]]:
    """Records a restart at each of ``times`` in turn, as a supervisor would.

    Returns:
        The history after the last restart, and whether each restart exceeded the intensity.
    """
    history: tuple[float, ...] = ()
    exceeded: list[bool] = []
    for now in times:
        history, over = record_restart(history, now, intensity)
        exceeded.append(over)
    return history, exceeded


# --- should_restart ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("restart", "abnormal", "expected"),
    [
        (RestartType.PERMANENT, False, True),
        (RestartType.PERMANENT, True, True),
        (RestartType.TRANSIENT, False, False),
        (RestartType.TRANSIENT, True, True),
        (RestartType.TEMPORARY, False, False),
        (RestartType.TEMPORARY, True, False),
    ],
)
def test_a_child_is_restarted_according_to_its_restart_type_and_how_it_exited(
    restart: RestartType, abnormal: bool, expected: bool
) -> None:
    assert should_restart(restart, abnormal) is expected


def test_the_restart_table_covers_every_restart_type() -> None:
    assert set(RestartType) == {
        RestartType.PERMANENT, RestartType.TRANSIENT, RestartType.TEMPORARY
    }


# --- to_restart -------------------------------------------------------------------------------


@pytest.mark.parametrize("failed", CHILDREN)
def test_one_for_one_restarts_only_the_failed_child(failed: str) -> None:
    assert to_restart(Strategy.ONE_FOR_ONE, CHILDREN, failed) == [failed]


@pytest.mark.parametrize("failed", CHILDREN)
def test_one_for_all_restarts_every_child_in_start_order(failed: str) -> None:
    assert to_restart(Strategy.ONE_FOR_ALL, CHILDREN, failed) == ["a", "b", "c", "d"]


@pytest.mark.parametrize(
    ("failed", "expected"),
    [
        ("a", ["a", "b", "c", "d"]),
        ("b", ["b", "c", "d"]),
        ("c", ["c", "d"]),
        ("d", ["d"]),
    ],
)
def test_rest_for_one_restarts_the_failed_child_and_those_started_after_it(
    failed: str, expected: list[str]
) -> None:
    assert to_restart(Strategy.REST_FOR_ONE, CHILDREN, failed) == expected


@pytest.mark.parametrize("strategy", list(Strategy))
def test_to_restart_returns_a_new_list_and_leaves_the_start_order_untouched(
    strategy: Strategy,
) -> None:
    started = ("a", "b", "c", "d")
    restarted = to_restart(strategy, started, "b")
    restarted.append("intruder")
    assert started == ("a", "b", "c", "d")
    assert "intruder" not in to_restart(strategy, started, "b")


# --- record_restart ---------------------------------------------------------------------------


def test_the_default_intensity_is_one_restart_in_five_seconds() -> None:
    assert Intensity() == Intensity(max_restarts=1, period_s=5.0)


def test_a_first_restart_does_not_exceed_the_default_intensity() -> None:
    history, exceeded = record_restart((), 100.0, Intensity())
    assert history == (100.0,)
    assert exceeded is False


def test_a_second_restart_within_five_seconds_exceeds_the_default_intensity() -> None:
    _, exceeded = replay([100.0, 104.9], Intensity())
    assert exceeded == [False, True]


def test_restarts_spaced_further_apart_than_the_period_never_exceed_the_intensity() -> None:
    history, exceeded = replay([i * 5.1 for i in range(100)], Intensity())
    assert not any(exceeded)
    assert history == (99 * 5.1,)


def test_the_history_drops_restarts_older_than_the_period() -> None:
    history, _ = record_restart((1.0, 2.0, 8.0, 9.0), 10.0, Intensity(max_restarts=5, period_s=5.0))
    assert history == (8.0, 9.0, 10.0)


def test_the_history_ends_with_the_restart_just_recorded() -> None:
    history, _ = record_restart((7.0,), 9.5, Intensity(max_restarts=3, period_s=10.0))
    assert history == (7.0, 9.5)


def test_three_in_ten_seconds_allows_three_restarts_and_the_fourth_exceeds() -> None:
    history, exceeded = replay([0.0, 3.0, 6.0, 9.0], Intensity(max_restarts=3, period_s=10.0))
    assert exceeded == [False, False, False, True]
    assert history == (0.0, 3.0, 6.0, 9.0)


def test_a_fourth_restart_after_the_first_has_aged_out_is_allowed() -> None:
    history, exceeded = replay([0.0, 3.0, 6.0, 10.5], Intensity(max_restarts=3, period_s=10.0))
    assert exceeded == [False, False, False, False]
    assert history == (3.0, 6.0, 10.5)


def test_a_restart_exactly_one_period_old_no_longer_counts() -> None:
    # The window is half-open: an entry is kept while now - t < period_s, so one that is exactly
    # period_s old has aged out.
    history, exceeded = record_restart((0.0,), 5.0, Intensity())
    assert history == (5.0,)
    assert exceeded is False


def test_a_restart_just_under_one_period_old_still_counts() -> None:
    history, exceeded = record_restart((0.0,), 4.999, Intensity())
    assert history == (0.0, 4.999)
    assert exceeded is True


def test_record_restart_does_not_change_the_history_it_is_given() -> None:
    history = [1.0, 2.0]
    record_restart(history, 3.0, Intensity(max_restarts=5, period_s=10.0))
    assert history == [1.0, 2.0]


def test_an_intensity_of_zero_restarts_gives_up_on_the_first_restart() -> None:
    _, exceeded = record_restart((), 0.0, Intensity(max_restarts=0, period_s=5.0))
    assert exceeded is True


# --- backoff_delay ----------------------------------------------------------------------------


def ceiling(attempt: int, backoff: Backoff) -> float:
    return min(backoff.cap_s, backoff.base_s * 2.0**attempt)


def test_the_delay_grows_with_the_attempt_until_the_cap() -> None:
    backoff = Backoff(base_s=0.05, cap_s=2.0)
    delays = [backoff_delay(a, backoff, random.Random(7)) for a in range(10)]
    # Below the cap each attempt's lowest delay is the previous attempt's highest.
    assert delays[:6] == sorted(delays[:6])
    assert delays[5] > 2 * delays[0]
    assert all(1.0 <= d <= 2.0 for d in delays[6:])


def test_the_delay_for_a_given_attempt_lies_between_half_the_ceiling_and_the_ceiling() -> None:
    backoff = Backoff(base_s=0.05, cap_s=2.0)
    for seed in range(50):
        for attempt in range(12):
            top = ceiling(attempt, backoff)
            assert top / 2 <= backoff_delay(attempt, backoff, random.Random(seed)) <= top


def test_the_delay_is_capped_for_large_attempts() -> None:
    backoff = Backoff(base_s=0.05, cap_s=2.0)
    assert 1.0 <= backoff_delay(200, backoff, random.Random(3)) <= 2.0


def test_the_same_seed_gives_the_same_delay() -> None:
    backoff = Backoff()
    assert backoff_delay(4, backoff, random.Random(42)) == backoff_delay(
        4, backoff, random.Random(42)
    )


def test_different_seeds_give_different_delays() -> None:
    backoff = Backoff()
    delays = {backoff_delay(4, backoff, random.Random(seed)) for seed in range(20)}
    assert len(delays) == 20


def test_a_negative_attempt_is_treated_as_the_first_retry() -> None:
    backoff = Backoff()
    assert backoff_delay(-3, backoff, random.Random(5)) == backoff_delay(
        0, backoff, random.Random(5)
    )


@given(
    attempt=st.integers(min_value=0, max_value=30),
    seed=st.integers(min_value=0, max_value=2**32 - 1),
    base_s=st.floats(min_value=0.001, max_value=10.0),
    cap_s=st.floats(min_value=0.001, max_value=600.0),
)
def test_the_delay_is_always_within_half_the_capped_exponential_and_the_capped_exponential(
    attempt: int, seed: int, base_s: float, cap_s: float
) -> None:
    backoff = Backoff(base_s=base_s, cap_s=cap_s)
    top = min(cap_s, base_s * 2**attempt)
    assert top / 2 <= backoff_delay(attempt, backoff, random.Random(seed)) <= top


def test_backoff_for_a_huge_attempt_number_is_capped_not_an_overflow() -> None:
    delay = backoff_delay(1024, Backoff(), random.Random(0))
    assert Backoff().cap_s / 2 <= delay <= Backoff().cap_s


def test_restart_type_and_strategy_may_be_given_as_their_string_values() -> None:
    assert should_restart("permanent", abnormal=False) is True  # type: ignore[arg-type]
    assert to_restart("one_for_all", list("abcd"), "c") == list("abcd")  # type: ignore[arg-type]


def test_a_child_that_is_no_longer_started_restarts_nothing() -> None:
    for strategy in Strategy:
        assert to_restart(strategy, list("abcd"), "z") == []
