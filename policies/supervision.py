"""Supervision decisions, after Erlang/OTP: who restarts, whether it may, and after how long.

- :class:`RestartType`, :func:`should_restart`: whether a child that ended is restarted.
- :class:`Strategy`, :func:`to_restart`: which children restart along with a failed one.
- :class:`Intensity`, :func:`record_restart`: how many restarts a supervisor allows before it
  gives up.
- :class:`Backoff`, :func:`backoff_delay`: the delay before a restart (defined in
  :mod:`policies.backoff`, re-exported here).
- :class:`ChildHealth`: one child's own restarts in a row, which alone decide its backoff (a
  sibling's failures never slow its restart; a run of :data:`DEFAULT_RESET_S` forgives them).
- :class:`ChildExit`, :class:`RestartPlan`, :func:`plan_restart`: the whole decision for a batch
  of exits, which the supervisor actor only carries out (:data:`SIBLING_RESTARTED` is the reason
  it gives for a child swept along by a sibling's failure).

Everything here is pure: the clock's reading and the random generator are passed in.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from policies.backoff import Backoff, backoff_delay

__all__ = [
    "DEFAULT_RESET_S",
    "SIBLING_RESTARTED",
    "Backoff",
    "ChildExit",
    "ChildHealth",
    "Intensity",
    "RestartPlan",
    "RestartType",
    "Strategy",
    "backoff_delay",
    "plan_restart",
    "record_restart",
    "should_restart",
    "to_restart",
]

#: The reason given for a child restarted only because a sibling failed.
SIBLING_RESTARTED = "sibling restarted"

#: How long a child must run after a restart for its backoff to start again from an immediate
#: restart (as Kubernetes forgets a crash loop after a period of good running).
DEFAULT_RESET_S = 10.0
#: How many failures in a row, after the first, a child is restarted at once before it backs
#: off: a second failure within the reset period may be bad luck; a third is a crash loop.
FORGIVEN_REPEATS = 1


class RestartType(StrEnum):
    """When a child is restarted after it ends."""

    PERMANENT = "permanent"
    """Always restarted."""
    TRANSIENT = "transient"
    """Restarted only after an abnormal exit (a crash, a kill)."""
    TEMPORARY = "temporary"
    """Never restarted."""


class Strategy(StrEnum):
    """Which children restart when one of them fails."""

    ONE_FOR_ONE = "one_for_one"
    """Only the failed child."""
    ONE_FOR_ALL = "one_for_all"
    """Every child."""
    REST_FOR_ONE = "rest_for_one"
    """The failed child and every child started after it."""


@dataclass(frozen=True)
class Intensity:
    """At most ``max_restarts`` restarts within ``period_s`` seconds (OTP's default: 1 in 5 s)."""

    max_restarts: int = 1
    period_s: float = 5.0


def should_restart(restart: RestartType, abnormal: bool) -> bool:
    """Whether a child of this restart type is restarted after an exit (abnormal or normal).

    ``restart`` may also be the type's string value (as read from a config file).
    """
    kind = RestartType(restart)
    if kind is RestartType.PERMANENT:
        return True
    return kind is RestartType.TRANSIENT and abnormal


def to_restart(strategy: Strategy, started: Sequence[str], failed: str) -> list[str]:
    """The children to restart, in start order, when ``failed`` fails.

    Args:
        strategy: The supervisor's strategy.
        started: Child IDs in the order they were started.
        failed: The child that failed; a child not in ``started`` (already gone) restarts nothing.
    """
    if failed not in started:
        return []
    kind = Strategy(strategy)
    if kind is Strategy.ONE_FOR_ONE:
        return [failed]
    if kind is Strategy.ONE_FOR_ALL:
        return list(started)
    return list(started[started.index(failed):])


def record_restart(history: Sequence[float], now: float, intensity: Intensity, count: int = 1
                   ) -> tuple[tuple[float, ...], bool]:
    """Adds ``count`` restarts at ``now`` to the history and tells whether the intensity is
    exceeded.

    Returns:
        The restarts still inside the period (those at ``now`` included), and True when there
        are more of them than ``intensity.max_restarts``: the supervisor must give up and
        escalate.
    """
    kept = (*(t for t in history if now - t < intensity.period_s), *(now,) * count)
    return kept, len(kept) > intensity.max_restarts


@dataclass(frozen=True)
class ChildExit:
    """One child's exit, as its supervisor detected it."""

    child_id: str
    normal: bool
    """True when the child ended on its own (returned or was stopped), False for a crash or kill."""
    reason: str
    at: float
    """Monotonic seconds when the exit was detected."""
    host: str | None = None
    """The host whose death ended it (None: it ended on its own, its host alive). Children of
    one batch that name the same host died together: their death is nobody's own fault."""
    node: str | None = None
    """The node whose loss may have ended it along with its host, as its supervisor could tell
    (its host was unreachable rather than seen to die, or the node is known dead); None: its
    host died alone. Children of one batch that name the same node are one failure."""


@dataclass(frozen=True)
class ChildHealth:
    """One child's own record of restarts, which alone decides its backoff.

    Attributes:
        streak: Its restarts in a row, each after a run shorter than the reset period (0: it has
            run well since its last restart, or never failed).
        since: When its current incarnation started (monotonic seconds).
    """

    streak: int = 0
    since: float = float("-inf")

    def started(self, at: float) -> ChildHealth:
        """The same record, for an incarnation started at ``at``."""
        return ChildHealth(self.streak, at)


@dataclass(frozen=True)
class RestartPlan:
    """What a supervisor does about a batch of exits; it carries the plan out in field order.

    Invariants: ``ended`` and ``restart`` are disjoint; ``stop`` is a subset of ``restart`` and
    holds no child that exited in the batch; ``reasons`` has exactly the keys of ``restart``;
    when ``give_up`` is True, ``stop`` and ``restart`` are empty.
    """

    ended: tuple[str, ...]
    """Exited children whose restart type says they end: dropped, not restarted (input order)."""
    stop: tuple[str, ...]
    """Live siblings to stop before the restarts, in reverse start order."""
    restart: tuple[str, ...]
    """Children to start again after ``delay_s``, in start order, the failed ones included."""
    delay_s: float
    """The longest of ``delays`` (0 when nothing restarts): how long the batch waits when its
    children restart together (one_for_all, rest_for_one)."""
    history: tuple[float, ...]
    """The restart history to keep: :func:`record_restart`'s result, or the one given."""
    give_up: bool
    """The intensity is exceeded: stop every child in reverse start order and escalate."""
    reasons: Mapping[str, str]
    """Why each child in ``restart`` restarts: its exit's reason, or :data:`SIBLING_RESTARTED`."""
    delays: Mapping[str, float] = field(default_factory=dict)
    """The backoff of each child in ``restart``, from its own streak (0: at once); a child
    swept along by a sibling restarts with no delay of its own."""
    health: Mapping[str, ChildHealth] = field(default_factory=dict)
    """The new record of each child of the batch that failed and restarts (the others keep
    theirs)."""


def plan_restart(
    exits: Sequence[ChildExit],
    *,
    started: Sequence[str],
    restart_types: Mapping[str, RestartType],
    strategy: Strategy,
    intensity: Intensity,
    backoff: Backoff,
    history: Sequence[float],
    now: float,
    rng: random.Random,
    external: Collection[str] = (),
    health: Mapping[str, ChildHealth] | None = None,
    reset_s: float = DEFAULT_RESET_S,
) -> RestartPlan:
    """Decides what a supervisor does about a batch of exits detected together.

    Each failure of the batch counts as one restart against the intensity, which is the
    supervisor's, as in OTP, however many children it restarts: the children that died with one
    host are one failure, and so are those that died with one lost node (:attr:`ChildExit.node`);
    any other exit is a failure of its own, however close to another it was detected (two
    processes killed apart are two failures). How long each child waits is its own affair: a
    child that ran for ``reset_s`` since its last restart is restarted at once; one that failed
    again sooner backs off by its own streak of such restarts (``backoff``, attempt 0 at its
    second failure in a row), whatever its siblings did. Children that died together with their
    host (or lost node) are restarted at once and their streaks stay as they were: which of them
    killed it cannot be told, and holding the others back for it would make innocent host-mates
    wait (a crash loop among them is stopped by the intensity).

    Args:
        exits: The exits of the batch, in the order they were detected.
        started: The live children (those in ``exits`` included) in start order.
        restart_types: Each child's restart type.
        strategy: The supervisor's strategy.
        intensity: How many restarts the supervisor allows within its period.
        backoff: The backoff of a child that fails again within ``reset_s`` of its restart.
        history: The times of the earlier restarts still inside the period.
        now: The monotonic clock's reading.
        rng: The source of the backoff's jitter (drawn from only when children restart).
        external: Children the supervisor did not start and cannot (agents that dial in): a
            sibling's failure neither stops nor restarts them; their own exit restarts them
            (the supervisor awaits them) as their restart type says.
        health: Each child's record (a child with none has never been restarted).
        reset_s: How long a child must run after a restart to be restarted at once again.

    Returns:
        The plan. An exit of a child not in ``started`` restarts nothing (it is in ``ended`` when
        its restart type says it ends, else nowhere).

    Raises:
        KeyError: An exit names a child that has no entry in ``restart_types``.
    """
    ended, live, to_start = _sweep(exits, started, restart_types, strategy)
    exited: dict[str, str] = {}
    for e in exits:
        exited.setdefault(e.child_id, e.reason)  # a child that exited twice: its first reason
    # Only live children restart: a later exit of the batch may have ended one the sweep
    # meant to restart, and a batch that restarts nothing is no restart at all.
    restart = tuple(c for c in live if c in to_start and (c in exited or c not in external))
    if not restart:
        return RestartPlan(ended=ended, stop=(), restart=(), delay_s=0.0,
                           history=tuple(history), give_up=False, reasons={})
    failures = _failures([e for e in exits if e.child_id in started
                          and should_restart(restart_types[e.child_id], not e.normal)])
    new_history, exceeded = record_restart(history, now, intensity, failures)
    if exceeded:
        return RestartPlan(ended=ended, stop=(), restart=(), delay_s=0.0,
                           history=new_history, give_up=True, reasons={})
    records = health or {}
    together = _died_together(exits)
    delays: dict[str, float] = {}
    healths: dict[str, ChildHealth] = {}
    for child_id in restart:
        exit_ = next((e for e in exits if e.child_id == child_id), None)
        if exit_ is None:  # swept along by a sibling's failure: not its own
            delays[child_id] = 0.0
            continue
        record = records.get(child_id, ChildHealth())
        streak = 0 if exit_.at - record.since >= reset_s else record.streak
        if child_id in together:
            delays[child_id] = 0.0
            healths[child_id] = ChildHealth(streak, record.since)
            continue
        # Its first failure after running well restarts at once, as in OTP, and so does its
        # first repeat (a child failing twice in a reset period may be unlucky, not looping);
        # from its third failure in a row it backs off, jittered (drawn in start order, so that
        # a seed gives the same plan).
        delays[child_id] = (0.0 if streak <= FORGIVEN_REPEATS
                            else backoff_delay(streak - 1 - FORGIVEN_REPEATS, backoff, rng))
        healths[child_id] = ChildHealth(streak + 1, record.since)
    return RestartPlan(
        ended=ended,
        stop=tuple(c for c in reversed(restart) if c not in exited),
        restart=restart,
        delay_s=max(delays.values()),
        history=new_history,
        give_up=False,
        reasons={c: exited.get(c, SIBLING_RESTARTED) for c in restart},
        delays=delays,
        health=healths,
    )


def _failure(e: ChildExit) -> tuple[str, str]:
    """The failure an exit is part of: its lost node's, else its dead host's, else its own."""
    if e.node is not None:
        return "node", e.node
    if e.host is not None:
        return "host", e.host
    return "child", e.child_id


def _failures(exits: Sequence[ChildExit]) -> int:
    """How many failures some exits are (a child that exited twice in the batch fails once)."""
    return len({_failure(e) for e in exits})


def _died_together(exits: Sequence[ChildExit]) -> set[str]:
    """The children of a batch that died with a host, or a lost node, that another child of
    the batch died with too."""
    by_place: dict[tuple[str, str], set[str]] = {}
    for e in exits:
        if e.host is not None:
            by_place.setdefault(_failure(e), set()).add(e.child_id)
    return {c for group in by_place.values() if len(group) > 1 for c in group}


def _sweep(exits: Sequence[ChildExit], started: Sequence[str],
           restart_types: Mapping[str, RestartType], strategy: Strategy
           ) -> tuple[tuple[str, ...], list[str], set[str]]:
    """The children that end, the live ones left in start order, and those the exits restart.

    The set may name a child that a later exit of the batch ended; the caller keeps only the
    live ones.
    """
    ended: list[str] = []
    live = list(started)
    to_start: set[str] = set()
    for e in exits:
        if not should_restart(restart_types[e.child_id], abnormal=not e.normal):
            if e.child_id not in ended:
                ended.append(e.child_id)
            if e.child_id in live:
                live.remove(e.child_id)
            continue
        to_start.update(to_restart(strategy, live, e.child_id))
    return tuple(ended), live, to_start
