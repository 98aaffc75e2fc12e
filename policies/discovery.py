"""Capability discovery: which agents hold a capability, and which of them to send to.

A query matches a tag in one of three tiers (:class:`MatchKind`), best first: exactly; by
hierarchy (``order`` and ``order.*`` match ``order.query``, never ``orders``, and a query never
matches its parent); or either of those after :func:`normalize_tag` (``Order-Query`` finds
``order.query``). :func:`find_holders` returns only the best non-empty tier, least loaded first
or best described first; :func:`pick_least_loaded` chooses the k to send to, spreading equal
loads round-robin through a ``tiebreak`` counter that the caller owns.

A holder may hold a capability at a priority (:data:`PRIMARY`, 0, or a backup's 1, 2...):
discovery lists the best priority first, and :func:`pick_holders` sends to the best priority that
has a live holder, least loaded within it, falling to the next only when none of the better ones
is live. Holders that declare no priorities are all primaries, and are picked as
:func:`pick_least_loaded` picks them. Everything here is pure.
"""

from __future__ import annotations

import difflib
import functools
import heapq
import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Protocol, TypeVar

from policies.priorities import PRIMARY

_SEPARATORS = re.compile(r"[._\-\s/:]+")
_WILDCARD = re.compile(r"(.*?)[._\-\s/:]+\*")
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ffff"
# One CJK character, or a run of word characters that are neither CJK nor "_" (so that
# snake_case identifiers in a description count as separate words).
_TOKEN = re.compile(rf"[{_CJK}]|[^\W_{_CJK}]+")
_STOP_WORDS = frozenset(
    {"the", "a", "an", "of", "to", "and", "or", "is", "for", "in", "on", "my"}
    | {"what", "where", "when", "how"}
)
_CLOSE_CUTOFF = 0.5


class MatchKind(IntEnum):
    """How a query matched a capability tag; a lower value is a better match."""

    EXACT = 0
    """The tag equals the query."""
    HIERARCHY = 1
    """The tag is the query or lies under it: ``order`` and ``order.*`` match ``order.query``."""
    NORMALIZED = 2
    """An exact or hierarchy match once both sides are put through :func:`normalize_tag`."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """An agent as discovery sees it.

    Attributes:
        agent_id: The agent's ID.
        capabilities: The capability tags the agent holds.
        description: Free text about what the agent does, used to rank by a text query.
        online: Whether the registry considers the agent online; offline agents never match.
        load: In-flight requests as last reported to the registry.
        priorities: The priority of each capability, in the order of ``capabilities``; empty
            when all are :data:`PRIMARY`.
    """

    agent_id: str
    capabilities: tuple[str, ...]
    description: str = ""
    online: bool = True
    load: int = 0
    priorities: tuple[int, ...] = ()


def normalize_tag(tag: str) -> str:
    """Returns the canonical form of a capability tag.

    Lowercases and strips the tag, turns each run of separators (``.``, ``_``, ``-``, ``/``,
    ``:`` and whitespace) into a single ``.``, and drops leading and trailing dots. A trailing
    wildcard (``.*``, or ``*`` after any separator, e.g. ``order_*``) is kept as ``.*`` after the
    normalised part: ``"Order_Query.*"`` becomes ``"order.query.*"``.

    Args:
        tag: A capability tag or query.

    Returns:
        The normalised tag; ``""`` for a tag made only of separators.
    """
    text = tag.strip().lower()
    wildcard = _WILDCARD.fullmatch(text)
    if wildcard is not None:
        base = _normalize_plain(wildcard.group(1))
        return f"{base}.*" if base else "*"
    return _normalize_plain(text)


def _normalize_plain(text: str) -> str:
    return _SEPARATORS.sub(".", text).strip(".")


def _under(query: str, tag: str) -> bool:
    """Whether ``tag`` is ``query`` (``order`` or ``order.*``) or lies beneath it."""
    base = query.removesuffix(".*")
    return bool(base) and (tag == base or tag.startswith(base + "."))


@functools.lru_cache(maxsize=1 << 16)
def match_kind(query: str, tag: str) -> MatchKind | None:
    """Returns the best way ``query`` matches ``tag``.

    A blank query matches nothing.

    Args:
        query: The capability asked for, possibly ending in ``.*``.
        tag: A capability tag an agent holds.

    Returns:
        The lowest :class:`MatchKind` that applies, or ``None`` when the query does not match.

    Memoised: a registry asks the same (query, tag) pairs over and over.
    """
    if not query.strip():
        return None
    if query == tag:
        return MatchKind.EXACT
    if _under(query, tag):
        return MatchKind.HIERARCHY
    if _under(normalize_tag(query), normalize_tag(tag)):
        return MatchKind.NORMALIZED
    return None


def _best_kind(query: str, candidate: Candidate) -> MatchKind | None:
    kinds = [k for tag in candidate.capabilities if (k := match_kind(query, tag)) is not None]
    return min(kinds, default=None)


def find_holders(
    query: str, candidates: Iterable[Candidate], *, text: str | None = None,
    limit: int | None = None,
) -> list[Candidate]:
    """Returns the online candidates holding a capability, in the best match tier only.

    If any online candidate matches exactly, only exact matches are returned; otherwise only
    hierarchy matches; otherwise only normalised matches.

    Args:
        query: The capability asked for.
        candidates: The agents to choose from.
        text: An optional natural-language request. When given, the tier is ordered by
            :func:`description_score` (best first), then load, then agent ID.
        limit: Return at most this many (the best ones).

    Returns:
        The matching candidates, the best priority first (:func:`holder_priority`), then least
        loaded first (after the text score when ``text`` is given), ties by agent ID; ``[]``
        when none matches.
    """
    tiers: dict[MatchKind, list[Candidate]] = {}
    ranked = False
    for candidate in candidates:
        if candidate.online and (kind := _best_kind(query, candidate)) is not None:
            tiers.setdefault(kind, []).append(candidate)
            ranked = ranked or bool(candidate.priorities)
    if not tiers:
        return []
    tier = tiers[min(tiers)]
    key: Callable[[Candidate], tuple[Any, ...]]
    if text is None:
        key = _by_load
    else:
        key = lambda c: (-description_score(text, c.description), c.load, c.agent_id)  # noqa: E731
    if ranked:  # the best priority first, then as without priorities
        plain = key
        key = lambda c: (holder_priority(query, c), *plain(c))  # noqa: E731
    if limit is not None and limit < len(tier):
        return heapq.nsmallest(limit, tier, key=key)
    return sorted(tier, key=key)


def _by_load(c: Candidate) -> tuple[Any, ...]:
    return (c.load, c.agent_id)


def _tokens(text: str) -> set[str]:
    return set(_TOKEN.findall(text.lower()))


def description_score(text: str, description: str) -> float:
    """Scores how well a description answers a natural-language query, by shared words.

    Both texts are lowercased and split into words (Unicode-aware); Chinese and Japanese
    characters, written without spaces, count one character per token. A few English stop words
    are ignored in the query.

    Args:
        text: The query.
        description: An agent's description.

    Returns:
        The fraction, in [0, 1], of the query's distinct tokens found in the description;
        0.0 when the query has no tokens left.
    """
    wanted = _tokens(text) - _STOP_WORDS
    if not wanted:
        return 0.0
    return len(wanted & _tokens(description)) / len(wanted)


def close_matches(query: str, tags: Iterable[str], n: int = 3) -> list[str]:
    """Returns up to ``n`` known tags that look like ``query``, for a "did you mean" hint.

    Tags are compared in normalised form with :class:`difflib.SequenceMatcher` (the measure
    :func:`difflib.get_close_matches` uses, with a cutoff of 0.5).

    Args:
        query: The capability that found no holder.
        tags: The capability tags that exist.
        n: The most suggestions to return.

    Returns:
        Original tags, without repeats, most similar first; equal scores in alphabetical order
        of the normalised tag, then of the original.
    """
    if n <= 0:
        return []
    wanted = normalize_tag(query)
    by_form: dict[str, set[str]] = {}
    for tag in tags:
        by_form.setdefault(normalize_tag(tag), set()).add(tag)
    scored: list[tuple[float, str]] = []
    for form in by_form:
        ratio = difflib.SequenceMatcher(None, form, wanted).ratio()
        if ratio >= _CLOSE_CUTOFF:
            scored.append((-ratio, form))
    scored.sort()
    return [tag for _, form in scored for tag in sorted(by_form[form])][:n]


class Loaded(Protocol):
    """Anything with an agent ID and a load (a :class:`Candidate`, a registry record)."""

    @property
    def agent_id(self) -> str:
        """The agent's ID."""
        ...

    @property
    def load(self) -> int:
        """Its in-flight requests, as last reported."""
        ...


L = TypeVar("L", bound=Loaded)


def pick_least_loaded(
    candidates: Sequence[L],
    k: int,
    *,
    local_load: Mapping[str, int] | None = None,
    tiebreak: int = 0,
) -> list[L]:
    """Returns the ``k`` least loaded candidates, spreading equal loads round-robin.

    An agent's load is ``c.load`` plus the caller's own in-flight count to it from
    ``local_load``, which is fresher than the registry's figure. Among equal loads, with the
    candidates sorted by agent ID, the one at index ``i`` comes at position
    ``(i - tiebreak) mod n``: a caller that adds one to ``tiebreak`` on every call visits equally
    loaded agents in turn.

    Args:
        candidates: The agents to choose from (anything with ``agent_id`` and ``load``).
        k: How many to pick.
        local_load: The caller's in-flight requests per agent ID.
        tiebreak: A counter the caller advances between calls.

    Returns:
        Up to ``k`` candidates, least loaded first; ``[]`` when ``k <= 0``, all of them (ordered)
        when ``k`` is at least their number.
    """
    if k <= 0 or not candidates:
        return []
    extra = local_load or {}
    by_id = sorted(candidates, key=_agent_id)
    n = len(by_id)

    def rank(i: int) -> tuple[int, int]:
        c = by_id[i]
        return c.load + extra.get(c.agent_id, 0), (i - tiebreak) % n

    if k == 1:  # the common case, on every send by capability: one pass, no sort
        return [by_id[min(range(n), key=rank)]]
    return [by_id[i] for i in sorted(range(n), key=rank)[:k]]


def _agent_id(c: Loaded) -> str:
    return c.agent_id


class Holder(Loaded, Protocol):
    """A holder as :func:`pick_holders` sees it (a :class:`Candidate`, a registry record)."""

    @property
    def capabilities(self) -> tuple[str, ...]:
        """Its capability tags."""
        ...

    @property
    def priorities(self) -> tuple[int, ...]:
        """The priority of each tag, in their order; empty when all are the primary's."""
        ...

    @property
    def online(self) -> bool:
        """Whether the registry considered it online."""
        ...


H = TypeVar("H", bound=Holder)


def holder_priority(query: str, holder: Holder) -> int:
    """The priority at which ``holder`` holds what ``query`` asks for.

    That is the lowest priority among its tags that match ``query`` best (``refund`` matches
    ``refund.issue`` at 0 and ``refund.status`` at 1: 0); :data:`PRIMARY` for a holder that
    declares no priorities, or none of whose tags matches.
    """
    if not holder.priorities:
        return PRIMARY
    best: MatchKind | None = None
    low = PRIMARY
    for tag, priority in zip(holder.capabilities, holder.priorities, strict=False):
        kind = match_kind(query, tag)
        if kind is None:
            continue
        if best is None or kind < best:
            best, low = kind, priority
        elif kind == best:
            low = min(low, priority)
    return low


def pick_holders(
    query: str,
    holders: Sequence[H],
    k: int,
    *,
    local_load: Mapping[str, int] | None = None,
    tiebreak: int = 0,
    gone: Collection[str] = (),
) -> list[H]:
    """Returns the ``k`` holders of ``query`` to send to: the best priority first.

    Holders are grouped by :func:`holder_priority`. A group is live when one of its holders is
    online and not in ``gone``. The picks fill from the live groups, lowest priority number
    first, then from the others (holders that may be restarting: a request to one waits for it,
    as it would with no priorities at all), each group's holders taken as
    :func:`pick_least_loaded` takes them. So a backup is sent to only when no better holder is
    live, or when the better ones are fewer than ``k``. Holders of one priority (those that
    declare none are all primaries) are picked exactly as :func:`pick_least_loaded` picks them.

    Args:
        query: The capability asked for.
        holders: Its holders (anything with ``agent_id``, ``load``, ``capabilities``,
            ``priorities`` and ``online``).
        k: How many to pick.
        local_load: The caller's in-flight requests per agent ID.
        tiebreak: A counter the caller advances between calls.
        gone: Agent IDs whose incarnation among ``holders`` the caller found gone from its host
            (a dead host), not yet known to the registry.

    Returns:
        Up to ``k`` holders, in the order to use them; ``[]`` when ``k <= 0``.
    """
    if k <= 0 or not holders:
        return []
    if not any(h.priorities for h in holders):
        return pick_least_loaded(holders, k, local_load=local_load, tiebreak=tiebreak)
    groups: dict[int, list[H]] = {}
    for h in holders:
        groups.setdefault(holder_priority(query, h), []).append(h)

    def dead(priority: int) -> bool:
        return not any(h.online and h.agent_id not in gone for h in groups[priority])

    picked: list[H] = []
    for priority in sorted(groups, key=lambda p: (dead(p), p)):
        picked += pick_least_loaded(groups[priority], k - len(picked), local_load=local_load,
                                    tiebreak=tiebreak)
        if len(picked) >= k:
            break
    return picked


__all__ = [
    "Candidate",
    "Holder",
    "Loaded",
    "MatchKind",
    "close_matches",
    "description_score",
    "find_holders",
    "holder_priority",
    "match_kind",
    "normalize_tag",
    "pick_holders",
    "pick_least_loaded",
]
