"""Capability discovery: which agents hold a capability, and which of them to send to.

A query matches a tag in one of three tiers (:class:`MatchKind`), best first: exactly; by
hierarchy (``order`` and ``order.*`` match ``order.query``, never ``orders``, and a query never
matches its parent); or either of those after :func:`normalize_tag` (``Order-Query`` finds
``order.query``). :func:`find_holders` returns only the best non-empty tier, least loaded first
or best described first; :func:`pick_least_loaded` chooses the k to send to, spreading equal
loads round-robin through a ``tiebreak`` counter that the caller owns. Everything here is pure.
"""

from __future__ import annotations

import difflib
import functools
import heapq
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Protocol, TypeVar

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
    """

    agent_id: str
    capabilities: tuple[str, ...]
    description: str = ""
    online: bool = True
    load: int = 0


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
        The matching candidates, least loaded first (after the text score when ``text`` is given),
        ties by agent ID; ``[]`` when none matches.
    """
    tiers: dict[MatchKind, list[Candidate]] = {}
    for candidate in candidates:
        if candidate.online and (kind := _best_kind(query, candidate)) is not None:
            tiers.setdefault(kind, []).append(candidate)
    if not tiers:
        return []
    tier = tiers[min(tiers)]
    key: Callable[[Candidate], tuple[Any, ...]]
    if text is None:
        key = _by_load
    else:
        key = lambda c: (-description_score(text, c.description), c.load, c.agent_id)  # noqa: E731
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


__all__ = [
    "Candidate",
    "Loaded",
    "MatchKind",
    "close_matches",
    "description_score",
    "find_holders",
    "match_kind",
    "normalize_tag",
    "pick_least_loaded",
]
