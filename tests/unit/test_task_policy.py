"""The task state machine, the default severity policy, and user-supplied task policies."""

from __future__ import annotations

import random
from itertools import product

import pytest

from policies.supervision import Backoff, backoff_delay
from policies.tasks import (
    FINAL_STATE,
    TERMINAL,
    Action,
    Decision,
    SeverityPolicy,
    TaskPolicy,
    TaskState,
    transition,
)
from reach.errors import InvalidTransition, Severity

S = TaskState

#: The moves the state machine allows, written out independently of the module under test.
LEGAL = {
    (S.INITIALIZED, S.RUNNING),
    (S.INITIALIZED, S.CANCELLED),
    (S.RUNNING, S.COMPLETED),
    (S.RUNNING, S.DEGRADED),
    (S.RUNNING, S.FAILED),
    (S.RUNNING, S.CANCELLED),
}
#: Every other pair of states; built from the enum so a new state is covered automatically.
ILLEGAL = sorted(set(product(TaskState, TaskState)) - LEGAL)


def move_id(pair: tuple[TaskState, TaskState]) -> str:
    return f"{pair[0].value}->{pair[1].value}"


def decide(
    policy: TaskPolicy,
    severity: Severity,
    *,
    attempt: int = 0,
    retry_limit: int = 3,
    alternatives: int = 1,
    seed: int = 0,
) -> Decision:
    return policy.decide(severity, attempt=attempt, retry_limit=retry_limit,
                         alternatives=alternatives, rng=random.Random(seed))


# --- transition -------------------------------------------------------------------------------


@pytest.mark.parametrize("move", sorted(LEGAL), ids=move_id)
def test_a_legal_move_returns_the_target_state(move: tuple[TaskState, TaskState]) -> None:
    state, to = move
    assert transition(state, to) is to


@pytest.mark.parametrize("move", ILLEGAL, ids=move_id)
def test_every_other_move_raises_invalid_transition_naming_both_states(
    move: tuple[TaskState, TaskState],
) -> None:
    state, to = move
    with pytest.raises(InvalidTransition) as caught:
        transition(state, to)
    assert caught.value.details == {"from": state.value, "to": to.value}
    assert state.value in caught.value.message
    assert to.value in caught.value.message


def test_the_illegal_moves_include_leaving_a_terminal_state_and_returning_to_initialized() -> None:
    assert {(s, S.INITIALIZED) for s in TaskState} <= set(ILLEGAL)
    assert set(product(TERMINAL, TaskState)) <= set(ILLEGAL)
    assert len(ILLEGAL) == len(TaskState) ** 2 - len(LEGAL)


def test_the_terminal_states_are_exactly_those_with_no_way_out() -> None:
    no_way_out = {s for s in TaskState if not any(state == s for state, _ in LEGAL)}
    assert no_way_out == {S.COMPLETED, S.DEGRADED, S.FAILED, S.CANCELLED}
    assert no_way_out == TERMINAL


def test_an_invalid_transition_is_refused_as_invalid_transition() -> None:
    with pytest.raises(InvalidTransition):
        transition(S.COMPLETED, S.RUNNING)


# --- SeverityPolicy.decide --------------------------------------------------------------------


def test_a_retryable_error_under_the_limit_is_retried_on_another_holder_when_there_is_one(
) -> None:
    decision = decide(SeverityPolicy(), Severity.RETRYABLE, attempt=0, retry_limit=3,
                      alternatives=2)
    assert decision.action is Action.RETRY
    assert decision.failover is True
    assert decision.delay_s > 0


def test_a_retryable_error_under_the_limit_is_retried_on_the_same_agent_without_alternatives(
) -> None:
    decision = decide(SeverityPolicy(), Severity.RETRYABLE, attempt=2, retry_limit=3,
                      alternatives=0)
    assert decision.action is Action.RETRY
    assert decision.failover is False
    assert decision.delay_s > 0


@pytest.mark.parametrize("attempt", [0, 1, 4])
def test_the_retry_delay_is_the_policys_backoff_for_that_attempt(attempt: int) -> None:
    policy = SeverityPolicy(backoff=Backoff(base_s=0.5, cap_s=3.0))
    decision = decide(policy, Severity.RETRYABLE, attempt=attempt, retry_limit=10, seed=11)
    assert decision.delay_s == backoff_delay(attempt, policy.backoff, random.Random(11))


@pytest.mark.parametrize(("attempt", "retry_limit"), [(3, 3), (4, 3), (0, 0)])
def test_a_retryable_error_at_the_retry_limit_fails_the_task(
    attempt: int, retry_limit: int
) -> None:
    decision = decide(SeverityPolicy(), Severity.RETRYABLE, attempt=attempt,
                      retry_limit=retry_limit, alternatives=2)
    assert decision.action is Action.FAIL
    assert decision.failover is False
    assert decision.delay_s == 0.0
    assert str(retry_limit) in decision.reason


@pytest.mark.parametrize(("attempt", "alternatives"), [(0, 0), (0, 3), (9, 3)])
def test_a_degradable_error_finishes_the_task_degraded(attempt: int, alternatives: int) -> None:
    decision = decide(SeverityPolicy(), Severity.DEGRADABLE, attempt=attempt, retry_limit=3,
                      alternatives=alternatives)
    assert decision == Decision(Action.DEGRADE, reason=decision.reason)
    assert decision.reason


@pytest.mark.parametrize(("attempt", "alternatives"), [(0, 0), (0, 3), (9, 3)])
def test_a_fatal_error_aborts_the_task_even_with_retries_and_alternatives_left(
    attempt: int, alternatives: int
) -> None:
    decision = decide(SeverityPolicy(), Severity.FATAL, attempt=attempt, retry_limit=3,
                      alternatives=alternatives)
    assert decision == Decision(Action.ABORT, reason=decision.reason)
    assert decision.reason


@pytest.mark.parametrize("alternatives", [0, 1, 5])
def test_a_policy_without_failover_never_fails_over(alternatives: int) -> None:
    decision = decide(SeverityPolicy(failover=False), Severity.RETRYABLE, alternatives=alternatives)
    assert decision.action is Action.RETRY
    assert decision.failover is False


@pytest.mark.parametrize("severity", list(Severity))
def test_for_every_severity_only_a_retry_waits_before_acting(severity: Severity) -> None:
    decision = decide(SeverityPolicy(), severity)
    assert (decision.delay_s > 0) is (decision.action is Action.RETRY)


def test_each_ending_action_leads_to_its_final_state() -> None:
    assert FINAL_STATE == {
        Action.DEGRADE: S.DEGRADED,
        Action.ABORT: S.FAILED,
        Action.FAIL: S.FAILED,
    }


def test_every_action_but_retry_ends_the_task_in_a_terminal_state_reachable_from_running() -> None:
    assert set(FINAL_STATE) == set(Action) - {Action.RETRY}
    for state in FINAL_STATE.values():
        assert state in TERMINAL
        assert transition(S.RUNNING, state) is state


# --- user-supplied policies -------------------------------------------------------------------


class NeverRetry:
    """A user policy: a task that must not be repeated fails on its first retryable error."""

    def decide(self, severity: Severity, *, attempt: int, retry_limit: int, alternatives: int,
               rng: random.Random) -> Decision:
        if severity is Severity.DEGRADABLE:
            return Decision(Action.DEGRADE, reason="keep the partial result")
        return Decision(Action.FAIL, reason="this task is never retried")


def run_task(policy: TaskPolicy, errors: list[Severity], *, retry_limit: int = 3
             ) -> tuple[TaskState, list[Decision]]:
    """Drives a task the way its owner does: run, ask the policy on each error, end on a verdict.

    Returns:
        The task's final state (COMPLETED if the errors ran out while retrying) and the decisions.
    """
    state = transition(S.INITIALIZED, S.RUNNING)
    decisions: list[Decision] = []
    rng = random.Random(0)
    for attempt, severity in enumerate(errors):
        decision = policy.decide(severity, attempt=attempt, retry_limit=retry_limit,
                                 alternatives=1, rng=rng)
        decisions.append(decision)
        if decision.action is not Action.RETRY:
            return transition(state, FINAL_STATE[decision.action]), decisions
    return transition(state, S.COMPLETED), decisions


def test_a_user_policy_satisfies_the_task_policy_protocol() -> None:
    policy: TaskPolicy = NeverRetry()
    decision = decide(policy, Severity.RETRYABLE, attempt=0, retry_limit=5, alternatives=3)
    assert decision.action is Action.FAIL


def test_the_default_policy_satisfies_the_task_policy_protocol() -> None:
    policy: TaskPolicy = SeverityPolicy()
    assert decide(policy, Severity.RETRYABLE).action is Action.RETRY


def test_a_task_owner_driven_by_a_user_policy_fails_where_the_default_would_retry() -> None:
    default_state, default_decisions = run_task(SeverityPolicy(), [Severity.RETRYABLE])
    user_state, user_decisions = run_task(NeverRetry(), [Severity.RETRYABLE])
    assert [d.action for d in default_decisions] == [Action.RETRY]
    assert default_state is S.COMPLETED
    assert [d.action for d in user_decisions] == [Action.FAIL]
    assert user_state is S.FAILED


def test_a_task_owner_with_the_default_policy_fails_once_the_retries_run_out() -> None:
    state, decisions = run_task(SeverityPolicy(), [Severity.RETRYABLE] * 5, retry_limit=2)
    assert [d.action for d in decisions] == [Action.RETRY, Action.RETRY, Action.FAIL]
    assert state is S.FAILED


def test_a_task_owner_with_the_default_policy_ends_degraded_on_a_degradable_error() -> None:
    state, decisions = run_task(SeverityPolicy(), [Severity.RETRYABLE, Severity.DEGRADABLE])
    assert [d.action for d in decisions] == [Action.RETRY, Action.DEGRADE]
    assert state is S.DEGRADED


def test_a_severity_given_as_its_string_value_is_decided_like_the_enum() -> None:
    decision = SeverityPolicy().decide("retryable", attempt=0, retry_limit=3,  # type: ignore[arg-type]
                                       alternatives=0, rng=random.Random(1))
    assert decision.action is Action.RETRY


def test_a_user_policy_is_recognised_at_run_time_and_a_plain_object_is_not() -> None:
    assert isinstance(SeverityPolicy(), TaskPolicy)
    assert not isinstance(object(), TaskPolicy)
