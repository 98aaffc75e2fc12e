"""The pure rule that sizes a node's pool of warm spares to the recent claims."""

from __future__ import annotations

import pytest

from policies.spares import SpareSizing, to_retire, to_start, wanted

RULE = SpareSizing(spares=1, max_spares=4, window_s=10.0, quiet_s=60.0)


def test_a_pool_without_claims_keeps_its_spares() -> None:
    assert wanted([], 100.0, RULE) == 1
    assert to_start(0, [], 100.0, RULE) == 1
    assert to_start(1, [], 100.0, RULE) == 0


def test_each_claim_of_the_window_wants_one_spare_more_up_to_the_bound() -> None:
    assert wanted([99.0], 100.0, RULE) == 2
    assert wanted([98.0, 99.0, 99.5], 100.0, RULE) == 4
    assert wanted([95.0 + i * 0.5 for i in range(10)], 100.0, RULE) == 4  # the bound
    assert to_start(1, [98.0, 99.0, 99.5], 100.0, RULE) == 3


def test_claims_older_than_the_window_count_no_more() -> None:
    assert wanted([80.0, 89.9, 95.0], 100.0, RULE) == 2
    assert wanted([90.0], 100.0, RULE) == 1  # exactly one window old: out of it


def test_a_claim_that_found_no_spare_counts_like_one_that_took_one() -> None:
    # The rule sees claims, not their outcome: a cold start is a claim the pool was short of.
    assert to_start(0, [99.9], 100.0, RULE) == 2


def test_spares_off_want_none_whatever_the_claims() -> None:
    off = SpareSizing(spares=0, max_spares=4)
    assert wanted([99.0, 99.5], 100.0, off) == 0
    assert to_start(0, [99.0], 100.0, off) == 0


def test_a_bound_below_spares_counts_as_spares() -> None:
    rule = SpareSizing(spares=3, max_spares=1)
    assert rule.bound == 3
    assert wanted([], 100.0, rule) == 3
    assert wanted([99.0, 99.5], 100.0, rule) == 3


def test_extra_spares_stay_while_claims_keep_coming_and_retire_once_quiet() -> None:
    claims = [100.0, 101.0, 102.0]
    assert to_retire(4, claims, 103.0, RULE) == 0
    assert to_retire(4, claims, 130.0, RULE) == 0  # out of the window, not yet quiet
    assert to_retire(4, claims, 161.9, RULE) == 0
    assert to_retire(4, claims, 162.0, RULE) == 3  # a minute without a claim: back to spares
    assert to_retire(1, claims, 500.0, RULE) == 0


def test_more_than_the_bound_retire_at_once() -> None:
    assert to_retire(6, [99.0], 100.0, RULE) == 2


@pytest.mark.parametrize("since", [50.0, 100.0])
def test_no_spare_retires_before_the_pool_has_been_watched_for_a_quiet_period(
    since: float,
) -> None:
    # A registry that has just restarted knows no claims: a burst may be under way.
    assert to_retire(3, [], since + 59.0, RULE, since=since) == 0
    assert to_retire(3, [], since + 60.0, RULE, since=since) == 2
