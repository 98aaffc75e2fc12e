"""The backoff policy: delays grow from a base to a cap, half fixed and half jittered.

Randomness is a seeded ``random.Random``: no clock, no sleeps.
"""

from __future__ import annotations

import dataclasses
import random
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

import policies.supervision
from policies.backoff import POLL, Backoff, backoff_delay, poll_delay


def poll_ceiling(attempt: int) -> float:
    """The highest delay of poll number ``attempt`` (past 2**4 the cap is reached)."""
    return min(0.25, 0.02 * 2.0 ** min(max(attempt, 0), 10))


class LowestRandom(random.Random):
    """A generator whose jitter is always the lowest it may be."""

    def uniform(self, a: float, b: float) -> float:
        return a


class HighestRandom(random.Random):
    """A generator whose jitter is always the highest it may be."""

    def uniform(self, a: float, b: float) -> float:
        return b


def test_polling_starts_at_20_ms_and_is_capped_at_250_ms() -> None:
    assert Backoff(base_s=0.02, cap_s=0.25) == POLL


def test_the_poll_backoff_cannot_be_changed_in_place() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        POLL.cap_s = 10.0  # type: ignore[misc]


@pytest.mark.parametrize("attempt", range(11))
def test_a_poll_delay_lies_between_half_its_ceiling_and_its_ceiling(attempt: int) -> None:
    top = poll_ceiling(attempt)
    for seed in range(50):
        assert top / 2 <= poll_delay(attempt, random.Random(seed)) <= top


@pytest.mark.parametrize(
    ("attempt", "lowest", "highest"),
    [(0, 0.01, 0.02), (1, 0.02, 0.04), (2, 0.04, 0.08), (3, 0.08, 0.16), (4, 0.125, 0.25),
     (10, 0.125, 0.25)],
)
def test_the_poll_delay_doubles_from_20_ms_until_the_250_ms_cap(
    attempt: int, lowest: float, highest: float
) -> None:
    assert poll_delay(attempt, LowestRandom()) == pytest.approx(lowest)
    assert poll_delay(attempt, HighestRandom()) == pytest.approx(highest)


def test_no_poll_delay_exceeds_the_cap() -> None:
    assert max(poll_delay(a, HighestRandom()) for a in range(100)) == 0.25


def test_a_poll_delay_is_never_zero_even_with_the_lowest_jitter() -> None:
    assert min(poll_delay(a, LowestRandom()) for a in range(100)) == pytest.approx(0.01)


def test_the_same_seed_gives_the_same_poll_delays() -> None:
    first, second = random.Random(42), random.Random(42)
    assert [poll_delay(a, first) for a in range(11)] == [poll_delay(a, second) for a in range(11)]


def test_different_seeds_give_different_poll_delays() -> None:
    assert len({poll_delay(2, random.Random(seed)) for seed in range(20)}) == 20


@pytest.mark.parametrize("attempt", [1024, 10**6, sys.maxsize, 2**4096])
def test_a_huge_poll_attempt_is_capped_not_an_overflow(attempt: int) -> None:
    assert 0.125 <= poll_delay(attempt, random.Random(0)) <= 0.25


def test_a_negative_poll_attempt_is_treated_as_the_first_poll() -> None:
    assert poll_delay(-5, random.Random(3)) == poll_delay(0, random.Random(3))


@given(attempt=st.integers(), seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_a_poll_delay_is_the_backoff_delay_of_the_poll_backoff(attempt: int, seed: int) -> None:
    delay = poll_delay(attempt, random.Random(seed))
    assert delay == backoff_delay(attempt, POLL, random.Random(seed))
    assert 0 < poll_ceiling(attempt) / 2 <= delay <= poll_ceiling(attempt)


def test_a_poll_delay_draws_from_the_generator_it_is_given() -> None:
    rng = random.Random(9)
    before = rng.getstate()
    poll_delay(0, rng)
    assert rng.getstate() != before


def test_the_backoff_names_are_still_importable_from_the_supervision_policy() -> None:
    assert policies.supervision.Backoff is Backoff
    assert policies.supervision.backoff_delay is backoff_delay
