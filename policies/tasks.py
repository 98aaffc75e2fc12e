"""The task state machine, and what a task owner does with an error of each severity.

A task is initialized, then running, then ends completed, degraded, failed or cancelled; any
other transition is refused. On an error the owner asks a :class:`TaskPolicy`: the default,
:class:`SeverityPolicy`, retries a retryable error (on another holder of the capability when
there is one) until the retry limit, finishes a degradable one as degraded with its partial
result, and aborts on a fatal one. A user may pass any object with the same ``decide`` method.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol, runtime_checkable

from policies.supervision import Backoff, backoff_delay
from reach.errors import InvalidTransition, Severity
from reach.records import TaskState

#: States a task never leaves.
TERMINAL = frozenset({TaskState.COMPLETED, TaskState.DEGRADED, TaskState.FAILED,
                      TaskState.CANCELLED})

_LEGAL: dict[TaskState, frozenset[TaskState]] = {
    TaskState.INITIALIZED: frozenset({TaskState.RUNNING, TaskState.CANCELLED}),
    TaskState.RUNNING: TERMINAL,
}


def transition(state: TaskState, to: TaskState) -> TaskState:
    """Returns ``to`` if a task may go there from ``state``.

    Raises:
        InvalidTransition: the move is not in the state machine.
    """
    if to not in _LEGAL.get(state, frozenset()):
        raise InvalidTransition(
            f"a task cannot go from {state.value} to {to.value}",
            details={"from": state.value, "to": to.value},
        )
    return to


class Action(StrEnum):
    """What the task owner does next."""

    RETRY = "retry"
    DEGRADE = "degrade"
    ABORT = "abort"
    FAIL = "fail"


@dataclass(frozen=True)
class Decision:
    """A task owner's decision on an error.

    Attributes:
        action: Retry, finish degraded, abort (fatal) or fail (retries exhausted).
        failover: For a retry, send to another holder of the capability.
        delay_s: For a retry, how long to wait first.
        reason: Why, in words (recorded in the task's history).
    """

    action: Action
    failover: bool = False
    delay_s: float = 0.0
    reason: str = ""


@runtime_checkable
class TaskPolicy(Protocol):
    """Anything that decides what to do about a task's error."""

    def decide(self, severity: Severity, *, attempt: int, retry_limit: int, alternatives: int,
               rng: random.Random) -> Decision:
        """Decides on the error of attempt number ``attempt`` (0 for the first).

        Args:
            severity: The error's severity.
            attempt: How many attempts failed before this one.
            retry_limit: How many retries the task allows.
            alternatives: How many other holders of the capability could take it.
            rng: The random generator for jitter.
        """
        ...


@dataclass(frozen=True)
class SeverityPolicy:
    """The default policy: retry retryable, degrade degradable, abort fatal.

    Attributes:
        backoff: Delays between retries.
        failover: Retry on another holder of the capability when one exists.
    """

    backoff: Backoff = field(default_factory=Backoff)
    failover: bool = True

    def decide(self, severity: Severity, *, attempt: int, retry_limit: int, alternatives: int,
               rng: random.Random) -> Decision:
        """See :meth:`TaskPolicy.decide`."""
        severity = Severity(severity)
        if severity is Severity.RETRYABLE:
            if attempt >= retry_limit:
                return Decision(Action.FAIL, reason=f"retry limit of {retry_limit} reached")
            over = self.failover and alternatives > 0
            return Decision(Action.RETRY, failover=over,
                            delay_s=backoff_delay(attempt, self.backoff, rng),
                            reason="retryable: " + ("fail over" if over else "same agent"))
        if severity is Severity.DEGRADABLE:
            return Decision(Action.DEGRADE, reason="degradable: finish with the partial result")
        return Decision(Action.ABORT, reason="fatal: abort and cancel sub-requests")


#: The final state each ending action leads to.
FINAL_STATE = {Action.DEGRADE: TaskState.DEGRADED, Action.ABORT: TaskState.FAILED,
               Action.FAIL: TaskState.FAILED}

# TaskState is defined with the other records that cross processes; the state machine speaks it.
__all__ = ["FINAL_STATE", "TERMINAL", "Action", "Decision", "SeverityPolicy", "TaskPolicy",
           "TaskState", "transition"]
