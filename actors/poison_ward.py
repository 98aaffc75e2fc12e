"""The registry's poison messages: kills counted, quarantines kept and told to hosts.

Processes that waited on a request when its agent's process died report the death (see
:mod:`reach._runtime.poison`); the ward counts the reports by :mod:`policies.poison`'s rules,
keeps each request that turns out poison as a dead letter with reason ``poison``, audits it,
and tells the host of the agent's live incarnation (or the host registering a new one) which
request contents to refuse from now on. The same processes report when a later incarnation
answers a request of a content they reported: the ward forgets that content's earlier kills,
so that a request sent often (a health probe, a status query) is not taken for poison because
it was in hands at two unrelated deaths.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from policies.poison import KillLedger
from reach import clock
from reach._runtime.poison import poison_error
from reach._runtime.trail import AuditTrail
from reach.errors import ReachError
from reach.ports.cluster import Cluster
from reach.records import DeadLetter

log = logging.getLogger("reach.registry")

#: Longest the registry waits for a host to take a quarantine (seconds).
TELL_S = 2.0


class PoisonWard:
    """Kills and quarantines of requests, per agent (lost when the registry restarts, as its
    dead letters are).

    Args:
        cluster: Where the hosts are.
        trail: The registry's audit buffer.
        poison_after: Incarnations of an agent a request may kill before it is quarantined.

    Raises:
        ConfigError: ``poison_after`` is below 1.
    """

    def __init__(self, cluster: Cluster, trail: AuditTrail, poison_after: int) -> None:
        self._cluster = cluster
        self._trail = trail
        self.ledger = KillLedger(poison_after)

    def judge(self, reports: Sequence[Sequence[Any]],
              ) -> tuple[list[tuple[int, bool]], list[DeadLetter], set[str]]:
        """Counts reported kills (each ``[agent_id, epoch, fingerprint, request_id, sender,
        trace_id, schema]``) and audits the poison among them.

        Returns, for each report, the kills of its request and whether it is quarantined; the
        dead letters of the poison requests; the agents with something newly quarantined.
        """
        now = clock.monotonic()
        verdicts: list[tuple[int, bool]] = []
        letters: list[DeadLetter] = []
        fresh: set[str] = set()
        for agent_id, epoch, print_, request_id, sender, trace_id, schema in reports:
            verdict = self.ledger.note(str(agent_id), str(print_), int(epoch), now)
            verdicts.append((verdict.kills, verdict.quarantined))
            if not verdict.quarantined:
                continue
            if verdict.fresh:
                fresh.add(agent_id)
            error = poison_error(agent_id, request_id, verdict.kills, print_)
            letters.append(DeadLetter(request_id, "request", sender, agent_id, trace_id or None,
                                      error.code, error.message, clock.now(), verdict.kills))
            self._trail.record(sender, agent_id, capability=schema, msg_type="poison",
                               trace_id=trace_id or None,
                               outcome=f"poison: killed {verdict.kills} incarnations, "
                                       "quarantined")
        return verdicts, letters, fresh

    def forget(self, answers: Sequence[Sequence[Any]]) -> int:
        """Forgets the kills of requests answered since (each ``[agent_id, epoch,
        fingerprint]``: the incarnation that answered); returns how many had kills forgotten."""
        now = clock.monotonic()
        return sum(self.ledger.answered(str(agent_id), str(print_), int(epoch), now)
                   for agent_id, epoch, print_ in answers)

    def holds(self, agent_id: str) -> bool:
        """Whether anything is quarantined for ``agent_id`` (a dict lookup)."""
        return self.ledger.holds(agent_id)

    async def tell(self, agent_id: str, host: str) -> None:
        """Tells ``host`` what is quarantined for ``agent_id`` (a host that is gone has nothing
        to refuse; one that does not answer in TELL_S is logged)."""
        now = clock.monotonic()
        prints = {p: (q.kills, q.until - now)
                  for p, q in self.ledger.quarantined(agent_id, now).items()}
        if not prints or not host:
            return
        try:
            await asyncio.wait_for(self._cluster.host(host).quarantine(agent_id, prints), TELL_S)
        except (ReachError, TimeoutError) as exc:
            log.info("could not tell host %s of the quarantine of %s: %s", host, agent_id, exc)

    def __len__(self) -> int:
        """How many request contents are quarantined, all agents together."""
        return len(self.ledger)


__all__ = ["TELL_S", "PoisonWard"]
