"""A process's way to talk: its cluster, transport and directory, its local loads, its way to
the session store, and its reports of agents that died with its requests in their hands (and of
the answers that clear them). Every process that sends (a driver, a host, a supervisor, a
gateway replica, the session store) holds one :class:`Link`; what leaves through it goes by a
:class:`~reach._runtime.courier.Courier`.
"""

from __future__ import annotations

import itertools
import random
from collections import Counter
from collections.abc import Sequence

from policies.discovery import pick_holders
from reach._runtime.directory import Directory
from reach._runtime.poison import KillReporter
from reach._runtime.store import StoreClient
from reach._runtime.transport import Transport
from reach.ports.cluster import Cluster
from reach.ports.hosts import CallLimits
from reach.records import AgentRecord


class Link:
    """What a process needs to talk: the cluster, its transport and directory, its local loads,
    and its way to the session store.

    Args:
        cluster: Where the processes are.
        transport: This process's transport.
        directory: This process's directory.
        limits: Hop limit and default timeout.
        rng: Random generator for the jitter of resends (seeded in tests).
    """

    def __init__(self, cluster: Cluster, transport: Transport, directory: Directory,
                 limits: CallLimits | None = None, rng: random.Random | None = None) -> None:
        self.cluster = cluster
        self.transport = transport
        self.directory = directory
        self.limits = limits or CallLimits()
        self.rng = rng or random.Random()
        # Requests in flight from this process, by receiver (least-loaded picks count them).
        self.inflight: Counter[str] = Counter()
        self._rotation = itertools.count()
        self.store = StoreClient(cluster)
        # Reports the deaths of agents with this process's requests in their hands, and the
        # answers of their later incarnations to requests of the same contents.
        self.kills = KillReporter(directory.registry, transport.codec.guard, transport.endpoint)

    @property
    def max_hops(self) -> int:
        """Longest call chain accepted."""
        return self.limits.max_hops

    @property
    def default_timeout_ms(self) -> int:
        """Timeout of requests that give none."""
        return self.limits.default_timeout_ms

    def next_tiebreak(self) -> int:
        """A counter that spreads equal-load picks round-robin."""
        return next(self._rotation)

    def pick(self, capability: str, holders: Sequence[AgentRecord], k: int = 1,
             ) -> list[AgentRecord]:
        """The ``k`` holders of ``capability`` to send to: from the best priority with a live
        holder (one online and not found gone from its host here), the least loaded within it
        (by their registry load plus this process's requests in flight to them), equal loads
        taken round-robin; see :func:`policies.discovery.pick_holders`."""
        return pick_holders(capability, holders, k, local_load=self.inflight,
                            tiebreak=self.next_tiebreak(),
                            gone=self.directory.gone_among(holders))


__all__ = ["Link"]
