"""The restart plan: what a supervisor does about a batch of exits, decided without Ray.

Time is a number passed in and randomness a seeded ``random.Random``: no clock, no sleeps.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from policies.supervision import (
    SIBLING_RESTARTED,
    Backoff,
    ChildExit,
    ChildHealth,
    Intensity,
    RestartPlan,
    RestartType,
    Strategy,
    backoff_delay,
    plan_restart,
    should_restart,
)

CHILDREN = ("a", "b", "c", "d")
NOW = 100.0
BACKOFF = Backoff(base_s=0.1, cap_s=1.0)
PERMANENT = dict.fromkeys(CHILDREN, RestartType.PERMANENT)
THREE_IN_TEN = Intensity(max_restarts=3, period_s=10.0)


def crash(child_id: str, reason: str = "boom") -> ChildExit:
    return ChildExit(child_id=child_id, normal=False, reason=reason, at=NOW - 0.01)


def finish(child_id: str) -> ChildExit:
    return ChildExit(child_id=child_id, normal=True, reason="done", at=NOW - 0.01)


def plan(
    *exits: ChildExit,
    started: Sequence[str] = CHILDREN,
    restart_types: Mapping[str, RestartType] = PERMANENT,
    strategy: Strategy = Strategy.ONE_FOR_ONE,
    intensity: Intensity = THREE_IN_TEN,
    history: Sequence[float] = (),
    now: float = NOW,
    rng: random.Random | None = None,
    health: Mapping[str, ChildHealth] | None = None,
    reset_s: float = 10.0,
) -> RestartPlan:
    """``plan_restart`` with the defaults of these tests: four permanent children, one for one."""
    return plan_restart(
        exits, started=started, restart_types=restart_types, strategy=strategy,
        intensity=intensity, backoff=BACKOFF, history=history, now=now,
        rng=rng if rng is not None else random.Random(0), health=health, reset_s=reset_s,
    )


# --- strategies -------------------------------------------------------------------------------


def test_one_for_one_restarts_only_the_crashed_child_and_stops_no_sibling() -> None:
    result = plan(crash("b"))
    assert result.restart == ("b",)
    assert result.stop == ()
    assert result.ended == ()
    assert result.reasons == {"b": "boom"}
    assert result.give_up is False


def test_one_for_all_stops_every_sibling_in_reverse_start_order_and_restarts_all() -> None:
    result = plan(crash("b"), strategy=Strategy.ONE_FOR_ALL)
    assert result.restart == ("a", "b", "c", "d")
    assert result.stop == ("d", "c", "a")
    assert result.reasons == {"a": SIBLING_RESTARTED, "b": "boom", "c": SIBLING_RESTARTED,
                              "d": SIBLING_RESTARTED}


@pytest.mark.parametrize(
    ("failed", "restart", "stop"),
    [("a", ("a", "b", "c", "d"), ("d", "c", "b")), ("b", ("b", "c", "d"), ("d", "c")),
     ("c", ("c", "d"), ("d",)), ("d", ("d",), ())],
)
def test_rest_for_one_restarts_the_crashed_child_and_those_started_after_it(
    failed: str, restart: tuple[str, ...], stop: tuple[str, ...]
) -> None:
    result = plan(crash(failed), strategy=Strategy.REST_FOR_ONE)
    assert result.restart == restart
    assert result.stop == stop


@pytest.mark.parametrize("strategy", [Strategy.ONE_FOR_ALL, Strategy.REST_FOR_ONE])
def test_a_sibling_the_supervisor_cannot_start_is_neither_stopped_nor_restarted(
        strategy: Strategy) -> None:
    result = plan_restart(
        [crash("b")], started=CHILDREN, restart_types=PERMANENT, strategy=strategy,
        intensity=THREE_IN_TEN, backoff=BACKOFF, history=(), now=NOW, rng=random.Random(0),
        external={"c"})
    assert "c" not in result.restart
    assert "c" not in result.stop
    own = plan_restart(
        [crash("c")], started=CHILDREN, restart_types=PERMANENT, strategy=strategy,
        intensity=THREE_IN_TEN, backoff=BACKOFF, history=(), now=NOW, rng=random.Random(0),
        external={"c"})
    assert "c" in own.restart  # its own exit restarts it (its supervisor awaits it)


def test_a_sibling_swept_along_is_restarted_because_a_sibling_restarted() -> None:
    assert SIBLING_RESTARTED == "sibling restarted"
    assert plan(crash("c"), strategy=Strategy.REST_FOR_ONE).reasons["d"] == "sibling restarted"


# --- restart types ----------------------------------------------------------------------------


@pytest.mark.parametrize("restart_type", list(RestartType))
@pytest.mark.parametrize("normal", [False, True], ids=["abnormal", "normal"])
def test_a_child_restarts_or_ends_according_to_its_restart_type_and_how_it_exited(
    restart_type: RestartType, normal: bool
) -> None:
    exit_ = ChildExit(child_id="b", normal=normal, reason="why", at=NOW)
    result = plan(exit_, restart_types={**PERMANENT, "b": restart_type})
    if should_restart(restart_type, abnormal=not normal):
        assert (result.restart, result.ended, result.history) == (("b",), (), (NOW,))
    else:
        assert (result.restart, result.ended, result.history) == ((), ("b",), ())
        assert result.delay_s == 0.0


def test_a_transient_child_that_exits_normally_ends_without_restarting_its_siblings() -> None:
    types = {**PERMANENT, "b": RestartType.TRANSIENT}
    result = plan(finish("b"), restart_types=types, strategy=Strategy.ONE_FOR_ALL,
                  history=(95.0,))
    assert result == RestartPlan(ended=("b",), stop=(), restart=(), delay_s=0.0,
                                 history=(95.0,), give_up=False, reasons={})


def test_an_ended_child_is_not_restarted_by_a_sibling_that_crashes_later_in_the_batch() -> None:
    types = {**PERMANENT, "c": RestartType.TEMPORARY}
    result = plan(crash("c"), crash("b"), restart_types=types, strategy=Strategy.ONE_FOR_ALL)
    assert result.ended == ("c",)
    assert result.restart == ("a", "b", "d")
    assert result.stop == ("d", "a")


def test_an_ended_child_is_not_restarted_by_a_sibling_that_crashed_earlier_in_the_batch() -> None:
    types = {**PERMANENT, "c": RestartType.TRANSIENT}
    result = plan(crash("b"), finish("c"), restart_types=types, strategy=Strategy.REST_FOR_ONE)
    assert result.ended == ("c",)
    assert result.restart == ("b", "d")
    assert result.stop == ("d",)


def test_ended_children_are_listed_once_in_the_order_they_exited() -> None:
    types = dict.fromkeys(CHILDREN, RestartType.TEMPORARY)
    result = plan(crash("d"), finish("a"), crash("d"), restart_types=types)
    assert result.ended == ("d", "a")


def test_restart_types_may_be_given_as_their_string_values_from_a_config_file() -> None:
    types: dict[str, RestartType] = {"a": "transient", "b": "temporary"}  # type: ignore[dict-item]
    result = plan(crash("a"), crash("b"), started=("a", "b"), restart_types=types)
    assert (result.restart, result.ended) == (("a",), ("b",))


# --- several exits in one batch ---------------------------------------------------------------


def died_with(host: str, *children: str, node: str | None = None) -> list[ChildExit]:
    """The exits of children whose host died (``node``: with that lost node)."""
    return [ChildExit(c, normal=False, reason=f"host {host} died", at=NOW - 0.01, host=host,
                      node=node) for c in children]


def test_a_host_whose_agents_die_together_counts_as_one_restart() -> None:
    one_in_five = Intensity(max_restarts=1, period_s=5.0)
    result = plan(*died_with("reach.pool.p.0", "b", "d", "a"), intensity=one_in_five)
    assert result.give_up is False
    assert result.restart == ("a", "b", "d")
    assert result.stop == ()
    assert result.history == (NOW,)


def test_processes_that_died_apart_are_a_failure_each_however_close_together() -> None:
    # Two processes killed apart, on a live node, their deaths seen in one batch: two failures.
    one_in_five = Intensity(max_restarts=1, period_s=5.0)
    hosts = plan(*died_with("reach.host.x", "a"), *died_with("reach.host.y", "b"),
                 intensity=one_in_five)
    assert hosts.give_up is True
    assert hosts.history == (NOW, NOW)
    own = plan(crash("a"), crash("c"), intensity=Intensity(2, 5.0))
    assert own.history == (NOW, NOW)
    assert own.restart == ("a", "c")


def test_the_agents_of_a_lost_node_count_as_one_restart_and_restart_at_once() -> None:
    one_in_five = Intensity(max_restarts=1, period_s=5.0)
    result = plan(*died_with("reach.host.x", "a", node="n1"),
                  *died_with("reach.pool.p.0", "b", "c", node="n1"), intensity=one_in_five,
                  health={"a": looping(3), "b": looping(2)})
    assert result.give_up is False
    assert result.history == (NOW,)
    assert result.delays == {"a": 0.0, "b": 0.0, "c": 0.0}
    assert {c: h.streak for c, h in result.health.items()} == {"a": 3, "b": 2, "c": 0}


def test_two_lost_nodes_are_two_failures_and_a_crash_beside_them_a_third() -> None:
    result = plan(*died_with("reach.host.x", "a", node="n1"),
                  *died_with("reach.host.y", "b", node="n2"), crash("c"), intensity=LOTS)
    assert result.history == (NOW, NOW, NOW)


def test_only_the_exits_that_restart_a_child_count() -> None:
    # "b" is temporary: its crash ends it; "a"'s crash is the batch's one failure.
    types = {**PERMANENT, "b": RestartType.TEMPORARY}
    result = plan(crash("a"), crash("b"), restart_types=types, intensity=LOTS)
    assert result.ended == ("b",)
    assert result.history == (NOW,)


def test_a_crash_that_restarts_its_siblings_counts_though_a_later_exit_ends_its_child() -> None:
    types = {**PERMANENT, "d": RestartType.TRANSIENT}
    result = plan(crash("d"), finish("d"), restart_types=types, strategy=Strategy.ONE_FOR_ALL,
                  intensity=LOTS)
    assert result.restart == ("a", "b", "c")
    assert result.history == (NOW,)


def test_the_same_exits_detected_apart_exceed_an_intensity_of_one() -> None:
    one_in_five = Intensity(max_restarts=1, period_s=5.0)
    first = plan(crash("b"), intensity=one_in_five)
    second = plan(crash("d"), intensity=one_in_five, history=first.history, now=NOW + 0.5)
    assert second.give_up is True


def test_siblings_that_crashed_in_the_same_batch_are_restarted_but_not_stopped() -> None:
    result = plan(crash("c"), crash("a"), strategy=Strategy.ONE_FOR_ALL)
    assert result.restart == ("a", "b", "c", "d")
    assert result.stop == ("d", "b")
    assert result.reasons["a"] == result.reasons["c"] == "boom"


def test_a_child_that_exited_twice_in_a_batch_restarts_once_for_its_first_reason() -> None:
    result = plan(crash("b", "first"), crash("b", "second"))
    assert result.restart == ("b",)
    assert result.reasons == {"b": "first"}
    assert result.history == (NOW,)  # one failure


# --- intensity --------------------------------------------------------------------------------


def test_exceeding_the_intensity_gives_up_and_restarts_nothing() -> None:
    one_in_five = Intensity(max_restarts=1, period_s=5.0)
    result = plan(crash("b"), strategy=Strategy.ONE_FOR_ALL, intensity=one_in_five,
                  history=(98.0,))
    assert result == RestartPlan(ended=(), stop=(), restart=(), delay_s=0.0,
                                 history=(98.0, NOW), give_up=True, reasons={})


def test_a_plan_that_gives_up_still_lists_the_children_that_ended() -> None:
    types = {**PERMANENT, "a": RestartType.TEMPORARY}
    result = plan(finish("a"), crash("b"), restart_types=types,
                  intensity=Intensity(max_restarts=0, period_s=5.0))
    assert result.give_up is True
    assert result.ended == ("a",)


def test_restarts_older_than_the_period_are_forgotten_and_no_longer_count() -> None:
    one_in_five = Intensity(max_restarts=1, period_s=5.0)
    result = plan(crash("b"), intensity=one_in_five, history=(90.0, 95.0))
    assert result.give_up is False
    assert result.history == (NOW,)


def test_the_window_slides_with_each_batch() -> None:
    two_in_ten = Intensity(max_restarts=2, period_s=10.0)
    history: tuple[float, ...] = ()
    outcomes = []
    for now in (0.0, 6.0, 12.0, 14.0):
        result = plan(crash("a"), intensity=two_in_ten, history=history, now=now)
        history = result.history
        outcomes.append(result.give_up)
    # At 12 the restart at 0 has aged out; at 14 those at 6, 12 and 14 are three in ten seconds.
    assert outcomes == [False, False, False, True]
    assert history == (6.0, 12.0, 14.0)


def test_exits_that_restart_nothing_leave_the_history_as_it_was() -> None:
    types = {**PERMANENT, "a": RestartType.TEMPORARY}
    assert plan(crash("a"), restart_types=types, history=[1.0, 2.0]).history == (1.0, 2.0)
    assert plan(history=[1.0, 2.0]).history == (1.0, 2.0)


# --- backoff ----------------------------------------------------------------------------------


def test_the_first_restart_in_the_window_is_immediate_as_in_otp() -> None:
    for seed in range(50):
        assert plan(crash("a"), rng=random.Random(seed)).delay_s == 0.0


LOTS = Intensity(max_restarts=100, period_s=60.0)


def looping(streak: int, ran_s: float = 0.5) -> ChildHealth:
    """A child restarted ``streak`` times in a row, its current incarnation ``ran_s`` old."""
    return ChildHealth(streak=streak, since=NOW - 0.01 - ran_s)


def test_a_childs_first_repeat_within_the_reset_period_is_restarted_at_once() -> None:
    for seed in range(20):
        result = plan(crash("a"), intensity=LOTS, health={"a": looping(1)},
                      rng=random.Random(seed))
        assert result.delays["a"] == result.delay_s == 0.0
        assert result.health["a"] == ChildHealth(2, looping(1).since)  # the next one backs off


@pytest.mark.parametrize(("streak", "top"), [(2, 0.1), (3, 0.2), (4, 0.4), (5, 0.8), (7, 1.0)])
def test_a_child_that_fails_again_soon_after_its_restart_backs_off_by_its_own_streak(
        streak: int, top: float) -> None:
    for seed in range(20):
        result = plan(crash("a"), intensity=LOTS, health={"a": looping(streak)},
                      rng=random.Random(seed))
        assert top / 2 <= result.delays["a"] <= top + 1e-12
        assert result.delays["a"] == backoff_delay(streak - 2, BACKOFF, random.Random(seed))
        assert result.delay_s == result.delays["a"]
        assert result.health["a"] == ChildHealth(streak + 1, looping(streak).since)


def test_a_crash_loop_grows_its_delay_up_to_the_cap_and_then_escalates() -> None:
    one_in_a_loop: dict[str, ChildHealth] = {}
    history: tuple[float, ...] = ()
    now, delays = NOW, []
    ten_in_sixty = Intensity(max_restarts=10, period_s=60.0)
    for _ in range(12):
        exit_ = ChildExit("a", normal=False, reason="boom", at=now)
        result = plan(exit_, intensity=ten_in_sixty, history=history, now=now,
                      health=one_in_a_loop)
        if result.give_up:
            break
        delays.append(result.delays["a"])
        history = result.history
        started = now + result.delays["a"] + 0.05
        one_in_a_loop = {"a": result.health["a"].started(started)}
        now = started + 0.01  # it crashes right after every restart
    assert result.give_up
    assert len(delays) == 10
    assert delays[0] == 0.0
    assert all(later >= earlier / 2 for earlier, later in itertools.pairwise(delays))
    assert BACKOFF.cap_s / 2 <= delays[-1] <= BACKOFF.cap_s


def test_a_siblings_failures_never_slow_a_childs_restart() -> None:
    # Nine restarts of "a" in a row fill the supervisor's history; "b" fails for the first time.
    history = tuple(NOW - 5 + i * 0.5 for i in range(9))
    result = plan(crash("b"), intensity=LOTS, history=history,
                  health={"a": looping(9), "b": ChildHealth(since=NOW - 30)})
    assert result.restart == ("b",)
    assert result.delays == {"b": 0.0}
    assert result.delay_s == 0.0
    assert result.history == (*history, NOW)  # the intensity still counts every restart
    assert result.health == {"b": ChildHealth(1, NOW - 30)}


@pytest.mark.parametrize("ran_s", [10.0, 11.0, 3600.0])
def test_a_child_that_ran_for_the_reset_period_is_restarted_at_once_again(ran_s: float) -> None:
    result = plan(crash("a"), intensity=LOTS, health={"a": looping(7, ran_s=ran_s)})
    assert result.delays == {"a": 0.0}
    assert result.health["a"].streak == 1  # its next quick failure backs off from the start


def test_the_reset_period_is_a_setting() -> None:
    record = {"a": looping(3, ran_s=2.0)}
    assert plan(crash("a"), intensity=LOTS, health=record, reset_s=1.0).delays == {"a": 0.0}
    assert plan(crash("a"), intensity=LOTS, health=record, reset_s=5.0).delays["a"] > 0


def host_death(*children: str, host: str = "reach.pool.p.0") -> list[ChildExit]:
    return [ChildExit(c, normal=False, reason=f"host {host} died", at=NOW - 0.01, host=host)
            for c in children]


def test_children_that_died_with_their_host_restart_at_once_and_keep_their_streaks() -> None:
    # "a" has been crash-looping and takes "b" and "c" down with it each time: which of them
    # kills the host cannot be told, so none is held back (the intensity stops a loop).
    health = {"a": looping(5), "b": looping(5), "c": looping(1)}
    result = plan(*host_death("a", "b", "c"), intensity=LOTS, health=health)
    assert result.restart == ("a", "b", "c")
    assert result.delays == {"a": 0.0, "b": 0.0, "c": 0.0}
    assert {c: h.streak for c, h in result.health.items()} == {"a": 5, "b": 5, "c": 1}
    assert result.history == (NOW,)  # one failure event


def test_a_child_alone_on_the_host_that_died_backs_off_as_for_its_own_crash() -> None:
    result = plan(*host_death("a"), *host_death("b", host="reach.host.x"), intensity=LOTS,
                  health={"a": looping(3), "b": looping(2)})
    assert result.delays["a"] > 0
    assert result.delays["b"] > 0
    assert {c: h.streak for c, h in result.health.items()} == {"a": 4, "b": 3}


def test_children_restarted_together_wait_for_the_longest_delay_among_them() -> None:
    result = plan(crash("b"), strategy=Strategy.ONE_FOR_ALL, intensity=LOTS,
                  health={"b": looping(3)})
    assert result.restart == CHILDREN
    assert result.delay_s == result.delays["b"] > 0
    assert result.delays["a"] == result.delays["c"] == 0.0  # swept along: no delay of its own
    assert set(result.health) == {"b"}


def test_the_same_seed_gives_the_same_plan() -> None:
    health = {"b": looping(2)}
    first = plan(crash("b"), strategy=Strategy.ONE_FOR_ALL, health=health, rng=random.Random(7))
    assert first == plan(crash("b"), strategy=Strategy.ONE_FOR_ALL, health=health,
                         rng=random.Random(7))
    delays = {plan(crash("b"), health=health, rng=random.Random(s)).delay_s for s in range(20)}
    assert len(delays) == 20


def test_the_generator_is_drawn_from_only_when_a_restart_backs_off() -> None:
    rng = random.Random(5)
    before = rng.getstate()
    plan(finish("a"), restart_types={**PERMANENT, "a": RestartType.TRANSIENT}, rng=rng)
    plan(crash("a"), history=(99.0, 99.5, 99.7), health={"a": looping(3)}, rng=rng)  # gives up
    plan(crash("a"), rng=rng)  # the first restart: immediate
    plan(*host_death("a", "b"), health={"a": looping(3)}, rng=rng)  # died together: at once
    assert rng.getstate() == before


# --- children not started, inputs, errors -----------------------------------------------------


@pytest.mark.parametrize("strategy", list(Strategy))
def test_a_child_no_longer_started_restarts_nothing(strategy: Strategy) -> None:
    types = {**PERMANENT, "z": RestartType.PERMANENT}
    result = plan(crash("z"), restart_types=types, strategy=strategy, history=(99.0,))
    assert result == RestartPlan(ended=(), stop=(), restart=(), delay_s=0.0,
                                 history=(99.0,), give_up=False, reasons={})


def test_a_temporary_child_no_longer_started_is_listed_as_ended_to_drop_it_again() -> None:
    types = {**PERMANENT, "z": RestartType.TEMPORARY}
    result = plan(crash("z"), crash("b"), restart_types=types)
    assert (result.ended, result.restart) == (("z",), ("b",))


def test_an_empty_batch_plans_nothing() -> None:
    assert plan() == RestartPlan(ended=(), stop=(), restart=(), delay_s=0.0, history=(),
                                 give_up=False, reasons={})


def test_planning_does_not_change_the_start_order_or_history_it_is_given() -> None:
    started, history = list(CHILDREN), [99.0]
    types = {**PERMANENT, "a": RestartType.TEMPORARY}
    plan(finish("a"), crash("b"), started=started, restart_types=types,
         strategy=Strategy.ONE_FOR_ALL, history=history)
    assert (started, history) == (list(CHILDREN), [99.0])


def test_an_exit_of_a_child_without_a_restart_type_raises_key_error() -> None:
    with pytest.raises(KeyError, match="z"):
        plan(crash("z"))


# --- properties -------------------------------------------------------------------------------

NAMES = list("abcdefgh")


@dataclass(frozen=True)
class Case:
    """A supervisor's state and a batch of exits."""

    exits: list[ChildExit]
    started: list[str]
    restart_types: dict[str, RestartType]
    strategy: Strategy
    intensity: Intensity
    history: list[float]


@st.composite
def cases(draw: st.DrawFn) -> Case:
    """A supervisor's state and a batch of exits, some of children no longer started."""
    exits = st.builds(ChildExit, child_id=st.sampled_from(NAMES), normal=st.booleans(),
                      reason=st.sampled_from(["x", "y"]), at=st.just(NOW))
    intensity = st.builds(Intensity, max_restarts=st.integers(0, 5),
                          period_s=st.floats(min_value=0.5, max_value=30.0))
    history = st.lists(st.floats(min_value=NOW - 20, max_value=NOW), max_size=4)
    return Case(
        exits=draw(st.lists(exits, max_size=6)),
        started=draw(st.lists(st.sampled_from(NAMES), unique=True, max_size=6)),
        restart_types={n: draw(st.sampled_from(list(RestartType))) for n in NAMES},
        strategy=draw(st.sampled_from(list(Strategy))),
        intensity=draw(intensity),
        history=sorted(draw(history)),
    )


@given(case=cases(), seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_every_plan_keeps_its_invariants(case: Case, seed: int) -> None:
    result = plan(*case.exits, started=case.started, restart_types=case.restart_types,
                  strategy=case.strategy, intensity=case.intensity, history=case.history,
                  rng=random.Random(seed))
    exited = {e.child_id for e in case.exits}
    order = {c: i for i, c in enumerate(case.started)}

    assert set(result.restart) <= set(case.started)
    assert [order[c] for c in result.restart] == sorted(order[c] for c in result.restart)
    assert set(result.stop) <= set(result.restart)
    assert not set(result.stop) & exited
    assert result.stop == tuple(c for c in reversed(result.restart) if c not in exited)
    assert set(result.ended) <= exited
    assert not set(result.ended) & set(result.restart)
    assert set(result.reasons) == set(result.restart)
    if result.give_up:
        assert result.restart == result.stop == ()
    if result.restart:
        assert result.history[-1] == NOW
        assert len(result.history) <= case.intensity.max_restarts
        # Each started child whose exit restarts it (and its siblings, as the strategy says)
        # failed once, whatever a later exit made of it (none of these died with a host).
        kept = [t for t in case.history if NOW - t < case.intensity.period_s]
        failed = {e.child_id for e in case.exits if e.child_id in case.started
                  and should_restart(case.restart_types[e.child_id], not e.normal)}
        assert len(result.history) - len(kept) == len(failed)
        assert set(result.delays) == set(result.restart)
        assert result.delay_s == max(result.delays.values()) == 0.0  # no child had failed before
        assert set(result.health) <= set(result.restart) & exited
    elif not result.give_up:
        assert result.history == tuple(case.history)
        assert result.delay_s == 0.0
    # Every started child that exited is either dropped or restarted, unless the plan gives up.
    if not result.give_up:
        assert exited & set(case.started) <= set(result.ended) | set(result.restart)


def test_a_batch_whose_only_restart_a_later_exit_ended_counts_as_no_restart() -> None:
    # Found by the property test: a transient child crashes, then exits normally, in one batch.
    types = {**PERMANENT, "a": RestartType.TRANSIENT}
    result = plan(crash("a"), finish("a"), restart_types=types, history=())
    assert result.restart == ()
    assert result.ended == ("a",)
    assert result.history == ()
    assert not result.give_up
