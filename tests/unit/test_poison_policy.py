"""The poison rules as pure functions: a request's fingerprint, kills counted by distinct
epochs per agent and cleared by an answer in between, quarantines, and the ledger's bounds in
memory and time."""

from __future__ import annotations

import pytest

from policies.poison import (
    POISON_AFTER,
    KillLedger,
    Quarantined,
    Verdict,
    check_poison_after,
    fingerprint,
)
from reach.errors import ConfigError


def test_a_fingerprint_is_the_same_whatever_the_order_of_the_payloads_keys() -> None:
    one = fingerprint("a", "s@1.0", {"x": 1, "y": {"p": [1, 2], "q": b"\x00"}})
    two = fingerprint("a", "s@1.0", {"y": {"q": b"\x00", "p": (1, 2)}, "x": 1})
    assert one == two
    assert len(one) == 32
    assert int(one, 16) >= 0


@pytest.mark.parametrize(("receiver", "schema", "payload"), [
    ("b", "s@1.0", {"x": 1}),          # another agent
    ("a", "s@1.1", {"x": 1}),          # another schema
    ("a", "s@1.0", {"x": 2}),          # another value
    ("a", "s@1.0", {"x": 1.0}),        # another type
    ("a", "s@1.0", {"x": True}),
    ("a", "s@1.0", {"x": 1, "z": None}),
    ("a@", "1.0", {"x": 1}),           # the same characters, split elsewhere
])
def test_a_fingerprint_differs_for_any_other_receiver_schema_or_payload(
    receiver: str, schema: str, payload: dict[str, object],
) -> None:
    assert fingerprint(receiver, schema, payload) != fingerprint("a", "s@1.0", {"x": 1})


def test_a_request_is_poison_once_it_killed_two_distinct_incarnations() -> None:
    ledger = KillLedger()
    assert POISON_AFTER == 2
    assert ledger.note("a", "p", 1, 0.0) == Verdict(1, quarantined=False)
    assert not ledger.holds("a")
    assert ledger.note("a", "p", 2, 1.0) == Verdict(2, quarantined=True, fresh=True)
    assert ledger.holds("a")
    assert ledger.quarantined("a", 1.0) == {"p": Quarantined(2, 1.0 + ledger.quarantine_s)}
    assert ledger.note("a", "p", 3, 2.0) == Verdict(3, quarantined=True, fresh=False)
    assert len(ledger) == 1


def test_one_death_reported_twice_is_one_kill() -> None:
    ledger = KillLedger()
    ledger.note("a", "p", 1, 0.0)
    assert ledger.note("a", "p", 1, 0.5) == Verdict(1, quarantined=False)


def test_kills_count_per_agent_and_per_fingerprint() -> None:
    ledger = KillLedger()
    ledger.note("a", "p", 1, 0.0)
    assert ledger.note("b", "p", 2, 0.0).kills == 1  # another agent's incarnation
    assert ledger.note("a", "q", 2, 0.0).kills == 1  # another request to the same agent
    assert not ledger.holds("a")
    assert not ledger.holds("b")


def test_an_answer_between_two_kills_starts_the_count_again() -> None:
    ledger = KillLedger()
    ledger.note("a", "p", 1, 0.0)
    assert ledger.answered("a", "p", 2, 1.0)  # the next incarnation answered it
    assert ledger.note("a", "p", 2, 2.0) == Verdict(1, quarantined=False)
    assert not ledger.holds("a")
    assert ledger.answered("a", "p", 3, 3.0)
    assert ledger.note("a", "p", 3, 4.0) == Verdict(1, quarantined=False)
    assert not ledger.holds("a")


def test_two_kills_in_a_row_with_no_answer_between_quarantine_as_before() -> None:
    ledger = KillLedger()
    ledger.note("a", "p", 1, 0.0)
    assert not ledger.answered("a", "q", 2, 1.0)  # another content's answer clears nothing
    assert not ledger.answered("b", "p", 2, 1.0)  # nor the same content's, by another agent
    assert ledger.note("a", "p", 2, 2.0) == Verdict(2, quarantined=True, fresh=True)


def test_an_answer_clears_only_the_kills_of_incarnations_before_the_one_that_answered() -> None:
    ledger = KillLedger()
    ledger.note("a", "p", 2, 0.0)
    # Answered by incarnation 2 before it died (reported late, after its death): it still
    # counts; so does an answer from an older incarnation, arriving later still.
    assert not ledger.answered("a", "p", 2, 1.0)
    assert not ledger.answered("a", "p", 1, 1.0)
    assert ledger.note("a", "p", 3, 2.0).quarantined


def test_an_answer_never_releases_a_quarantine() -> None:
    ledger = KillLedger()
    ledger.note("a", "p", 1, 0.0)
    ledger.note("a", "p", 2, 1.0)
    ledger.answered("a", "p", 3, 2.0)
    assert "p" in ledger.quarantined("a", 2.0)
    assert ledger.note("a", "p", 3, 3.0) == Verdict(2, quarantined=True, fresh=False)


def test_an_answer_for_a_request_that_killed_nothing_changes_nothing() -> None:
    ledger = KillLedger()
    assert not ledger.answered("a", "p", 1, 0.0)
    assert ledger.note("a", "p", 1, 1.0) == Verdict(1, quarantined=False)


def test_kills_further_apart_than_the_memory_are_not_one_poisons() -> None:
    ledger = KillLedger(remember_s=60.0)
    ledger.note("a", "p", 1, 0.0)
    assert ledger.note("a", "p", 2, 61.0) == Verdict(1, quarantined=False)
    assert ledger.note("a", "p", 3, 62.0).quarantined


def test_a_quarantine_ends_after_its_time_and_the_request_counts_afresh() -> None:
    ledger = KillLedger(remember_s=10.0, quarantine_s=100.0)
    ledger.note("a", "p", 1, 0.0)
    ledger.note("a", "p", 2, 1.0)
    assert "p" in ledger.quarantined("a", 100.0)
    assert ledger.quarantined("a", 101.0) == {}
    assert not ledger.holds("a")
    assert len(ledger) == 0
    assert ledger.note("a", "p", 3, 200.0) == Verdict(1, quarantined=False)


def test_a_count_of_one_quarantines_at_the_first_kill() -> None:
    assert KillLedger(1).note("a", "p", 1, 0.0) == Verdict(1, quarantined=True, fresh=True)


def test_the_ledger_keeps_at_most_its_bounds_dropping_the_oldest() -> None:
    ledger = KillLedger(max_suspects=3, max_quarantined=2)
    for i in range(5):
        ledger.note("a", f"s{i}", 1, float(i))
    assert ledger.note("a", "s0", 2, 10.0).kills == 1  # s0 was forgotten
    assert ledger.note("a", "s4", 2, 10.0).quarantined  # s4 was not
    for agent in ("b", "c"):
        ledger.note(agent, "p", 1, 11.0)
        ledger.note(agent, "p", 2, 11.0)
    assert len(ledger) == 2
    assert not ledger.holds("a")  # the oldest quarantine went first
    assert ledger.holds("b")
    assert ledger.holds("c")


def test_a_suspect_remembers_a_bounded_number_of_epochs() -> None:
    ledger = KillLedger(poison_after=1000)
    for epoch in range(200):
        verdict = ledger.note("a", "p", epoch, float(epoch) / 1000)
    assert verdict.kills == 64


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "2"])
def test_poison_after_must_be_a_positive_integer(bad: object) -> None:
    with pytest.raises(ConfigError) as caught:
        check_poison_after(bad)  # type: ignore[arg-type]
    assert caught.value.details["setting"] == "poison_after"
    with pytest.raises(ConfigError):
        KillLedger(bad)  # type: ignore[arg-type]


def test_poison_after_accepts_any_positive_integer() -> None:
    assert check_poison_after(1) == 1
    assert check_poison_after(5) == 5
