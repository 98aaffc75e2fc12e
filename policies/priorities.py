"""Capability priorities: which holder of a capability is its primary and which its backups.

An agent declares a priority per capability (``capabilities = {"refund.issue": 0,
"refund.status": 1}``), or is given one when it is spawned or supervised (``priority=``: checked
as it is given, by :func:`check_priority`, and resolved where the agent starts, against its own
capabilities, by :func:`resolve_priorities`): 0 is the primary (:data:`PRIMARY`), 1, 2... its
backups, tried in that order. Records carry them in
the order of the capabilities (:func:`aligned_priorities`), empty when all are primaries, so that
an agent without priorities costs nothing more. How discovery and sends use them is
:mod:`policies.discovery`'s. Everything here is pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from reach.errors import ConfigError

#: The priority of a capability nobody gave one: the primary's. Backups are 1, 2...
PRIMARY = 0


def check_priorities(tags: Sequence[str], given: int | Mapping[str, int]) -> dict[str, int]:
    """The priorities ``given`` for an agent's capability tags, checked.

    Args:
        tags: The agent's capability tags.
        given: One priority for all of them, or a priority per tag (a mapping may leave tags
            out).

    Returns:
        The priority of each tag ``given`` names (of every tag, for one priority).

    Raises:
        ConfigError: a priority is not an int of at least 0 (a bool is not one), or a mapping
            names a tag the agent does not hold.
    """
    if not isinstance(given, Mapping):
        return {tag: _checked(tag, given) for tag in tags}
    unknown = [tag for tag in given if tag not in tags]
    if unknown:
        raise ConfigError(
            f"a priority is given for {unknown[0]!r}, which is not one of the agent's "
            f"capabilities ({', '.join(tags) or 'none'})",
            suggestion="give priorities only to the capabilities the agent declares",
            details={"setting": "priority", "capability": str(unknown[0])})
    return {tag: _checked(tag, value) for tag, value in given.items()}


def check_priority(given: int | Mapping[str, int], tags: Sequence[str] = ()) -> None:
    """Checks a priority given to an agent before it starts: every value, and the tags a mapping
    names against the ``tags`` its class declares (when it declares none, its instances hold
    their own tags: those are checked where it starts, by :func:`resolve_priorities`).

    Raises:
        ConfigError: as :func:`check_priorities`.
    """
    if isinstance(given, Mapping):
        check_priorities(tags or tuple(given), given)
    else:
        _checked("", given)


def _checked(tag: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < PRIMARY:
        what = f"capability {tag!r}" if tag else "every capability"
        raise ConfigError(
            f"the priority of {what} must be an int of at least 0 (0 the primary, 1, 2... "
            f"backups), not {value!r}",
            details={"setting": "priority", "capability": tag, "priority": repr(value)})
    return value


def resolve_priorities(tags: Sequence[str], declared: Mapping[str, int],
                       override: int | Mapping[str, int] | None = None) -> dict[str, int]:
    """The priority of each of an agent's tags: as ``declared`` (:data:`PRIMARY` for a tag it
    leaves out), then as ``override`` says (see :func:`check_priorities`).

    Raises:
        ConfigError: ``override`` is not valid for ``tags``.
    """
    resolved = {tag: declared.get(tag, PRIMARY) for tag in tags}
    if override is not None:
        resolved.update(check_priorities(tags, override))
    return resolved


def aligned_priorities(tags: Sequence[str], priorities: Mapping[str, int] | Sequence[object],
                       ) -> tuple[int, ...]:
    """Priorities in the order of ``tags``, as records carry them: ``()`` when all are
    :data:`PRIMARY`.

    ``priorities`` is a mapping by tag (a tag it leaves out is a primary), or what came in a
    registration: a sequence in the order of ``tags``, taken only when it is one non-negative
    int for each tag (anything else is read as no priorities).
    """
    if isinstance(priorities, Mapping):
        out = tuple(priorities.get(tag, PRIMARY) for tag in tags)
    elif len(priorities) == len(tags) and all(
            isinstance(p, int) and not isinstance(p, bool) and p >= PRIMARY for p in priorities):
        out = tuple(p for p in priorities if isinstance(p, int))
    else:
        return ()
    return out if any(out) else ()


__all__ = ["PRIMARY", "aligned_priorities", "check_priorities", "check_priority",
           "resolve_priorities"]
