"""The message graph of the trace store: who sent to whom, counted from the handler runs held.

Pure, like the index it belongs to (:mod:`actors.trace_index`): a handler run's server span
(``handle ...``) that names its sender (``reach.sender``) and its agent (``reach.agent_id``) is
counted in the second it started, by pair. A query sums the whole seconds of its period and reads
the spans of its first second one by one, so it costs the period's seconds and pairs, not its
messages: a minute of a busy cluster is sixty small tables.
"""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass, field

from reach.spans import Attr, SpanKind, SpanName, SpanRecord, SpanStatus, TraceEdge

_S = 1_000_000_000
_HANDLE = str(SpanName.HANDLE)
_SENDER, _AGENT = str(Attr.SENDER), str(Attr.AGENT_ID)
_ERROR, _SERVER = SpanStatus.ERROR, SpanKind.SERVER

Pair = tuple[str, str]


def pair_of(span: SpanRecord) -> Pair | None:
    """(sender, agent) of a handler run that names both; None for any other span."""
    if span.kind != _SERVER or span.name.partition(" ")[0] != _HANDLE:
        return None
    attrs = span.attributes
    sender, agent = attrs.get(_SENDER), attrs.get(_AGENT)
    if sender is None or agent is None:
        return None
    return str(sender), str(agent)


@dataclass(slots=True)
class _Second:
    """The handler runs that started in one second: by pair ``[count, errors]``, and in the
    order they arrived."""

    pairs: dict[Pair, list[int]] = field(default_factory=dict)
    runs: deque[SpanRecord] = field(default_factory=deque)


class MessageGraph:
    """Handler runs counted by the second they started and by (sender, agent)."""

    def __init__(self) -> None:
        # Invariant: _seconds has a second exactly while it counts a run, and _order holds
        # its keys, sorted; every count is that of the second's runs.
        self._seconds: dict[int, _Second] = {}
        self._order: list[int] = []

    def __len__(self) -> int:
        return sum(len(s.runs) for s in self._seconds.values())

    def add(self, span: SpanRecord) -> None:
        """Counts ``span`` if it is a handler run naming its sender and agent."""
        pair = pair_of(span)
        if pair is None:
            return
        key = span.start_ns // _S
        second = self._seconds.get(key)
        if second is None:
            second = self._seconds[key] = _Second()
            if not self._order or self._order[-1] < key:
                self._order.append(key)
            else:
                bisect.insort(self._order, key)
        tally = second.pairs.get(pair)
        if tally is None:
            tally = second.pairs[pair] = [0, 0]
        tally[0] += 1
        tally[1] += span.status == _ERROR
        second.runs.append(span)

    def drop(self, span: SpanRecord) -> None:
        """Uncounts ``span``, which must be the oldest to arrive of its second's runs (as the
        index drops the oldest spans first)."""
        pair = pair_of(span)
        if pair is None:
            return
        key = span.start_ns // _S
        second = self._seconds[key]
        gone = second.runs.popleft()
        assert gone is span, "a second's runs are dropped in the order they arrived"
        tally = second.pairs[pair]
        tally[0] -= 1
        tally[1] -= span.status == _ERROR
        if not tally[0]:
            del second.pairs[pair]
        if not second.runs:
            del self._seconds[key]
            del self._order[bisect.bisect_left(self._order, key)]

    def edges(self, since_ns: int, now_ns: int) -> list[TraceEdge]:
        """Who sent to whom in the runs started since ``since_ns`` (``now_ns`` being now), by
        pair, heaviest first (then by sender and agent); ``per_s`` over the period."""
        totals: dict[Pair, list[int]] = {}
        first = since_ns // _S
        at = bisect.bisect_left(self._order, first)
        if at < len(self._order) and self._order[at] == first:  # read one by one
            for span in self._seconds[first].runs:
                if span.start_ns >= since_ns:
                    pair = pair_of(span)
                    assert pair is not None
                    tally = totals.setdefault(pair, [0, 0])
                    tally[0] += 1
                    tally[1] += span.status == _ERROR
            at += 1
        for key in self._order[at:]:
            for pair, (count, errors) in self._seconds[key].pairs.items():
                total = totals.get(pair)
                if total is None:
                    totals[pair] = [count, errors]
                else:
                    total[0] += count
                    total[1] += errors
        period_s = max(now_ns - since_ns, 1) / _S
        edges = [TraceEdge(src, dst, n, err, n / period_s)
                 for (src, dst), (n, err) in totals.items()]
        edges.sort(key=lambda e: (-e.count, e.source, e.target))
        return edges


__all__ = ["MessageGraph", "Pair", "pair_of"]
