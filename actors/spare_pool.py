"""The registry's warm spares: empty hosts waiting for an agent's restart, sized to the failures.

An empty dedicated host offers itself, with its node, shape and the deployment's sizing
(``spares``, ``max_spares``), again with each heartbeat (so a restarted registry learns it anew);
a restart claims one of the shape it needs, heard from lately, on the node it asks for if one is
there, else on any node. A host taken, given agents, retired or gone is a spare no more.

The registry sees every claim of the cluster, taken or not (a cold start), so it decides how
many spares each node keeps of each shape (:mod:`policies.spares`): whoever claimed, or starts a
deployment's first agents, asks it how many to start (:meth:`SparePool.top_up`), and it counts
those as starting until they offer themselves; a spare beyond what the recent claims want is
told to retire when it offers itself again, once claims have stopped for a while.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from policies.routing import heartbeat_expired
from policies.spares import SpareSizing, to_retire, to_start
from reach.ports.registry import SpareStats

#: A spare asked for and not offered within this long is counted as starting no more (its
#: start failed, or its node died): another may be started in its place.
START_WITHIN_S = 30.0
#: How many start times (asked for to offered) are kept for the statistics.
START_TIMES_KEPT = 100

Place = tuple[str, str]  # (node, shape)


@dataclass(frozen=True, slots=True)
class _Start:
    """A spare a top-up asked for, not offered yet."""

    place: Place
    asked_at: float


class SparePool:
    """The spares offered (host name -> (node, shape)), the claims and the spares starting.

    Args:
        now: When this pool's bookkeeping begins (monotonic seconds): no spare retires before
            it has seen no claim for a quiet period.
    """

    def __init__(self, now: float) -> None:
        self.offered: dict[str, Place] = {}
        # Invariant: a host in taken or retired is never in offered (its late offers are not
        # taken again: it is being given an agent, or it is ending).
        self.taken: set[str] = set()
        self.retired: set[str] = set()
        self.starting: list[_Start] = []
        self.claims: dict[Place, deque[float]] = {}
        self.sizing: dict[Place, SpareSizing] = {}
        self.since = now
        self.counts = {"taken": 0, "missed": 0, "started": 0, "retired": 0}
        self.start_s: deque[float] = deque(maxlen=START_TIMES_KEPT)

    def offer(self, host: str, node: str, shape: str, now: float,
              bounds: Sequence[int] = ()) -> bool:
        """Adds (or renews) a host's offer; False when it is to retire instead (the pool holds
        more spares than the recent claims want, and they have stopped for a while).
        ``bounds``: the deployment's ``[spares, max_spares]`` the host was started with, which
        size its place's pool (none: the pool keeps the sizing it has)."""
        if host in self.taken:
            return True  # an offer that crossed the claim that took it
        if host in self.retired:
            return False
        place = (node, shape)
        if len(bounds) >= 2:
            self.sizing[place] = SpareSizing(int(bounds[0]), int(bounds[1]))
        if host not in self.offered:
            self._arrived(place, now)
        self.offered[host] = place
        rule = self.sizing.get(place)
        if rule is not None and to_retire(self._have(place, now), self._claims(place, now), now,
                                          rule, since=self.since) > 0:
            del self.offered[host]
            self.retired.add(host)
            self.counts["retired"] += 1
            return False
        return True

    def claim(self, shape: str, node: str | None, heard: Mapping[str, float], interval_s: float,
              now: float) -> str | None:
        """Takes a spare of ``shape`` heard from lately (``heard``: when each host was last heard
        from; hosts are heard every ``interval_s``): on ``node`` if one is there, else on any
        node. Its name, or None (the claim is counted either way)."""
        self.claims.setdefault((node or "", shape), deque()).append(now)
        # Two intervals: a live spare is heard every interval plus its own round trips, so one
        # interval would turn it away for a few milliseconds of every beat.
        fits = [h for h, (_, s) in self.offered.items()
                if s == shape and not heartbeat_expired(heard.get(h, 0.0), now, interval_s, 2)]
        if not fits:
            self.counts["missed"] += 1
            return None
        here = [h for h in fits if self.offered[h][0] == node]
        taken = (here or fits)[0]
        del self.offered[taken]
        self.taken.add(taken)
        self.counts["taken"] += 1
        return taken

    def top_up(self, shape: str, node: str, spares: int, max_spares: int, now: float) -> int:
        """How many spares of ``shape`` to start on ``node`` now, for the claims made there
        lately (``spares`` and ``max_spares``: the deployment's sizing); they count as starting
        from now on."""
        place = (node, shape)
        sizing = self.sizing[place] = SpareSizing(spares, max_spares)
        count = to_start(self._have(place, now), self._claims(place, now), now, sizing)
        self.starting.extend(_Start(place, now) for _ in range(count))
        self.counts["started"] += count
        return count

    def drop(self, host: str) -> None:
        """Withdraws a host's offer, if it made one (it holds agents now)."""
        self.offered.pop(host, None)

    def forget(self, host: str) -> None:
        """Forgets a host that is gone."""
        self.drop(host)
        self.taken.discard(host)
        self.retired.discard(host)

    def by_place(self) -> dict[str, list[str]]:
        """The spares, as ``{"<node> <shape>": [host names]}`` (hosts sorted by name)."""
        out: dict[str, list[str]] = {}
        for host, (node, shape) in sorted(self.offered.items()):
            out.setdefault(f"{node} {shape}", []).append(host)
        return out

    def stats(self, now: float) -> SpareStats:
        """The spares offered and starting, the claims taken and missed, the spares started and
        retired, and how long the recent ones took to start (median, seconds)."""
        self._expire(now)
        times = sorted(self.start_s)
        return SpareStats(offered=len(self.offered), starting=len(self.starting),
                          taken=self.counts["taken"], missed=self.counts["missed"],
                          started=self.counts["started"], retired=self.counts["retired"],
                          start_p50_s=times[len(times) // 2] if times else None)

    def _arrived(self, place: Place, now: float) -> None:
        """A new spare offers itself: the oldest one starting for its place (else for its shape
        on any node: its node may have been another than asked) is one no more."""
        self._expire(now)
        mine = [s for s in self.starting if s.place == place] or [
            s for s in self.starting if s.place[1] == place[1]]
        if mine:
            self.starting.remove(mine[0])
            self.start_s.append(now - mine[0].asked_at)

    def _expire(self, now: float) -> None:
        self.starting = [s for s in self.starting if now - s.asked_at < START_WITHIN_S]

    def _have(self, place: Place, now: float) -> int:
        """The spares of a place offered and starting."""
        self._expire(now)
        return (sum(1 for p in self.offered.values() if p == place)
                + sum(1 for s in self.starting if s.place == place))

    def _claims(self, place: Place, now: float) -> deque[float]:
        """The claims made for a place within the longer of its two periods (older ones are
        dropped: they count for neither)."""
        rule = self.sizing.get(place, SpareSizing())
        kept = self.claims.get(place, deque())
        while kept and now - kept[0] > max(rule.window_s, rule.quiet_s):
            kept.popleft()
        return kept
