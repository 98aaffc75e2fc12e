"""Pure rules of the message path: loop refusal, shrinking deadlines, heartbeat expiry, epochs."""

from __future__ import annotations

from reach.errors import LoopDetected, RequestTimeout

#: Longest call chain accepted by default (agents on the path, the sender included).
DEFAULT_MAX_HOPS = 16


def check_hops(hops: tuple[str, ...], receiver: str, max_hops: int = DEFAULT_MAX_HOPS) -> None:
    """Refuses a delivery that would close a cycle or make the chain too long.

    Args:
        hops: Agent IDs the call chain has passed through, oldest first (sender last).
        receiver: The agent about to receive the message.
        max_hops: Longest chain accepted.

    Raises:
        LoopDetected: ``receiver`` is already on the chain, or the chain is longer than
            ``max_hops``.
    """
    if receiver in hops:
        path = " -> ".join((*hops, receiver))
        raise LoopDetected(
            f"call chain {path} returns to {receiver!r}",
            suggestion="break the cycle: an agent should not call back into its own caller chain",
            details={"receiver": receiver, "path": path},
        )
    if len(hops) >= max_hops:
        raise LoopDetected(
            f"call chain to {receiver!r} is {len(hops) + 1} agents long, more than the maximum "
            f"of {max_hops}",
            suggestion="raise max_hops if such long chains are intended",
            details={"receiver": receiver, "length": len(hops) + 1, "max_hops": max_hops},
        )


def child_timeout_ms(parent_deadline: float | None, now: float, requested_ms: int | None,
                     default_ms: int) -> int:
    """The timeout of a request made while handling another: never past the parent's deadline.

    Args:
        parent_deadline: Deadline of the request being handled (epoch seconds), if any.
        now: The current time (epoch seconds).
        requested_ms: The timeout the caller asked for, if any.
        default_ms: The timeout used when neither bounds it.

    Raises:
        RequestTimeout: the parent's deadline has already passed.
    """
    wanted = requested_ms if requested_ms is not None else default_ms
    if parent_deadline is None:
        return wanted
    left = int((parent_deadline - now) * 1000)
    if left <= 0:
        raise RequestTimeout(
            f"the deadline of the request being handled passed {-left} ms ago; no time is left "
            "for a sub-request",
            details={"overdue_ms": -left},
        )
    return min(wanted, left)


def heartbeat_expired(last_seen: float, now: float, interval_s: float, misses: int) -> bool:
    """Tells whether a host that last heartbeat at ``last_seen`` has missed ``misses`` beats."""
    return now - last_seen > interval_s * misses


def next_epoch(current: int | None, same_host: bool, hint: int = 0) -> int:
    """The epoch of a registration.

    A re-registration from the same host keeps its epoch (registration is idempotent); a new
    incarnation (first registration, or another host) gets a larger one. ``hint`` is the epoch the
    host last knew, so that a registry that lost its table (after a restart) never goes backwards.
    """
    if current is None:
        return max(hint, 1)
    if same_host:
        return max(current, hint)
    return max(current + 1, hint)
