"""How a supervisor brings its agent children up and takes them down on the cluster.

An agent child is spawned with its epoch past its last incarnation's (which the supervisor
remembers even when the registry, restarted, does not); a previous incarnation still live (an
orphan of the supervisor's own previous incarnation, which died) is evicted first. A remote child
is not started but awaited: it connects through a gateway, as an incarnation newer than its last,
while callers' requests wait for it (it is marked restarting). Evicting a child stops it on its
host and deregisters it, and ends the host if it was one of its own left with no agent (a warm
spare a pool took holds others). The registry calls are signed by the supervisor.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any

from reach import clock
from reach._runtime.spawner import Spawner
from reach.errors import AgentAlreadyExists, AgentUnavailable, ReachError
from reach.ports.cluster import Cluster
from reach.ports.registry import RegistryPort
from reach.records import AgentRecord, AgentStatus
from reach.security.guard import Guard, signed_call
from reach.specs import ChildSpec, RemoteChild

log = logging.getLogger("reach.supervisor")

#: Longest long poll of the registry while a remote child is awaited, and the pause between
#: lookups when the registry has no record to wait on.
REMOTE_WAIT_S = 5.0
REMOTE_POLL_S = 0.2


class AgentChildren:
    """Starts, awaits and evicts the agent children of one supervisor.

    Args:
        name: The supervisor's name (the principal its registry calls are signed as).
        cluster: Where the hosts are.
        registry: The registry.
        spawner: What starts agents on hosts.
        guard: Signs the registry calls (None: signing is off).
    """

    def __init__(self, name: str, cluster: Cluster, registry: RegistryPort, spawner: Spawner,
                 guard: Guard | None) -> None:
        self.name = name
        self.cluster = cluster
        self.registry = registry
        self.spawner = spawner
        self.guard = guard
        self._background: set[asyncio.Task[None]] = set()

    async def spawn(self, spec: ChildSpec, last: int | None, dead: str | None) -> AgentRecord:
        """Starts an agent child; its record.

        Args:
            spec: The child.
            last: The epoch of its last incarnation (None: its first start).
            dead: The host its last incarnation died with (its restart goes elsewhere).
        """
        epochs = None if last is None else {spec.agent_id: last + 1}
        try:
            # A restart takes a warm spare host when one of its shape is ready, or, packed,
            # goes to its pool's other hosts (to a spare the pool takes when none is left).
            records = await self.spawner.spawn(spec.agent, [spec.agent_id], spec.placement,
                                               spec.args, spec.kwargs, epochs=epochs,
                                               warm=last is not None,
                                               gone=() if dead is None else (dead,),
                                               priority=spec.priority)
        except AgentAlreadyExists:
            orphan = await self.registry.lookup(spec.agent_id)
            if orphan is None or not orphan.host:
                raise
            log.warning("%s replaces the previous incarnation of %s on %s", self.name,
                        spec.agent_id, orphan.host)
            await self.evict(spec.agent_id, orphan.host, spec.shutdown_timeout_s)
            epochs = {spec.agent_id: max(orphan.epoch, last or 0) + 1}
            records = await self.spawner.spawn(spec.agent, [spec.agent_id], spec.placement,
                                               spec.args, spec.kwargs, epochs=epochs,
                                               priority=spec.priority)
        if last is None and spec.placement.spare_key() is not None:
            # A spare of its shape waits on its node, for its restarts (in the background).
            topping = asyncio.get_running_loop().create_task(
                self.spawner.keep_spares(spec.placement, records[0].node, (spec.agent,)))
            self._background.add(topping)
            topping.add_done_callback(self._background.discard)
        return records[0]

    async def await_remote(self, spec: RemoteChild, last: int) -> AgentRecord:
        """Waits for a remote child to connect, as an incarnation newer than ``last`` (its last
        one's epoch, -1 if none); callers' requests wait for it meanwhile (it is marked
        restarting).

        Raises:
            AgentUnavailable: it did not connect within ``connect_within_s``.
        """
        agent_id = spec.agent_id
        deadline = clock.monotonic() + spec.connect_within_s
        rec = await self.registry.lookup(agent_id)
        if not _connected(rec, last):
            # Only the incarnation known to be gone (or none): a newer one is never marked.
            gone = max(last, rec.epoch if rec is not None and rec.host else -1)
            await self.mark([agent_id], AgentStatus.RESTARTING, {agent_id: gone})
        while not _connected(rec, last):
            left = deadline - clock.monotonic()
            if left <= 0:
                if last < 0:  # nobody waits for it any longer: callers are told at once
                    await within(self.mark([agent_id], AgentStatus.OFFLINE), 5.0)
                raise AgentUnavailable(
                    f"remote agent {agent_id!r} did not connect within "
                    f"{spec.connect_within_s:g} s",
                    suggestion="start it (reach connect --gateway URL module:Class), or give "
                               "it longer with RemoteChild(connect_within_s=...)",
                    details={"agent_id": agent_id})
            if rec is None or rec.status is AgentStatus.OFFLINE:
                await asyncio.sleep(min(REMOTE_POLL_S, left))  # nothing to long-poll on
            rec = await self.registry.lookup(agent_id, last, min(left, REMOTE_WAIT_S))
        assert rec is not None
        return rec

    async def evict(self, agent_id: str, host_name: str, timeout_s: float) -> None:
        """Stops an agent on its host and deregisters it (a dead host could not: deregistering
        is idempotent); a host of its own is ended once it holds no agent
        (:meth:`Spawner.release`)."""
        try:
            host = self.cluster.host(host_name)
            await within(host.remove_agents([agent_id], timeout_s), timeout_s + 1)
            await within(self.spawner.release(host, timeout_s), timeout_s + 1)
        except ReachError as exc:  # its host is gone already
            log.info("host of %s is gone: %s", agent_id, exc)
        data, sig = signed_call(self.guard, self.name, [[agent_id], host_name])
        await within(self.registry.deregister(self.name, data, sig), timeout_s)

    def mark(self, agent_ids: list[str], status: AgentStatus,
             up_to: dict[str, int] | None = None) -> Awaitable[None]:
        """The registry call that sets the status of children (signed by the supervisor);
        with ``up_to``, only incarnations no newer than these epochs are marked."""
        data, sig = signed_call(self.guard, self.name, [agent_ids, status.value, up_to or {}])
        return self.registry.mark(self.name, data, sig)


def _connected(rec: AgentRecord | None, last: int) -> bool:
    """Whether a record is of a connected incarnation newer than ``last``."""
    return (rec is not None and rec.status is AgentStatus.ONLINE and bool(rec.host)
            and rec.epoch > last)


async def _awaited(call: Any) -> Any:
    return await call


async def within(call: Any, timeout_s: float) -> Any:
    """Awaits a call for at most ``timeout_s``; past that the caller kills (or moves on)."""
    try:
        return await asyncio.wait_for(_awaited(call), timeout_s)
    except (TimeoutError, ReachError) as exc:
        log.warning("gave up waiting: %s", exc)
        return None
