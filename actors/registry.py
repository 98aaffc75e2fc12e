"""The Registry actor: who is where, with which capabilities, and whether they are alive.

It is a named, detached actor that Ray restarts when its process dies; it then starts empty and
rebuilds its table within one heartbeat interval, because every host whose heartbeat is answered
with "unknown" agents re-registers them. It is never in the message path: clients resolve IDs and
capabilities here and cache the answers.

It also keeps what every process must see the same: the deployment's ACL, the warm spare hosts
(:mod:`actors.spare_pool`), the remote agents' hello nonces (:mod:`actors.hello_nonces`) and the
poison messages quarantined (:mod:`actors.poison_ward`).
The records and their capability index are its table (:mod:`actors.agent_table`); who may make
which of its calls, its gate (:mod:`actors.registry_gate`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from collections import deque
from typing import Any

from actors._mem import rss_bytes
from actors.agent_table import AgentTable
from actors.hello_nonces import HelloNonces
from actors.poison_ward import PoisonWard
from actors.registry_gate import RegistryGate
from actors.spare_pool import SparePool
from policies.poison import POISON_AFTER
from policies.priorities import aligned_priorities
from policies.routing import heartbeat_expired, next_epoch
from reach import clock
from reach._runtime.metrics import metrics
from reach._runtime.names import REGISTRY_NAME
from reach._runtime.trace_setup import setup
from reach._runtime.trail import AuditTrail
from reach.errors import AgentAlreadyExists
from reach.ports.cluster import Cluster
from reach.records import AgentRecord, AgentStatus, DeadLetter
from reach.security.guard import acl_from_doc

ONLINE, OFFLINE = AgentStatus.ONLINE, AgentStatus.OFFLINE
RECOVERING, RESTARTING = AgentStatus.RECOVERING, AgentStatus.RESTARTING


class Registry:
    """Agent records, capability index and heartbeat expiry.

    Args:
        cluster: Where the other processes are (and the deployment's security settings).
        interval_s: Heartbeat interval hosts are told to keep.
        misses: Heartbeats a host may miss before its agents are marked offline.
        poison_after: Incarnations of an agent a request may kill before it is quarantined
            for that agent (:mod:`actors.poison_ward`).
    """

    def __init__(self, cluster: Cluster, interval_s: float = 10.0, misses: int = 3,
                 poison_after: int = POISON_AFTER) -> None:
        setup(cluster, REGISTRY_NAME)
        self.interval_s = interval_s
        self.misses = misses
        self.records = AgentTable()
        self.last_seen: dict[str, float] = {}
        self.dead_letters_: deque[DeadLetter] = deque(maxlen=10_000)
        self._expiry: asyncio.Task[None] | None = None
        self.incarnation = os.urandom(8).hex()  # new after every restart
        # After a restart the table is empty until hosts re-register: until then an unknown ID
        # may well exist, so it is answered as "recovering" (retryable), not as unknown.
        restarted = cluster.restarted()
        self.recovering_until = clock.monotonic() + interval_s * misses if restarted else 0.0
        self.trail = AuditTrail(cluster)
        self.gate = RegistryGate(cluster.guard(), self.trail)
        # The deployment's ACL (as acl_to_doc writes it); hosts fetch it when the version moves.
        self.acl_doc: dict[str, Any] | None = None
        self.acl_version = 0
        self._statuses: set[AgentStatus] = {ONLINE}
        # Warm spares, offered by empty hosts, taken by claims, sized to the claims' rate.
        self.spare_pool = SparePool(clock.monotonic())
        self.nonces = HelloNonces()
        self.poison = PoisonWard(cluster, self.trail, poison_after)

    def _start(self) -> None:
        if self._expiry is None:
            self._expiry = asyncio.get_running_loop().create_task(self._expire_loop())

    async def configure(self, interval_s: float, misses: int) -> None:
        """Changes the heartbeat interval and miss count (hosts pick it up on their next beat)."""
        self.interval_s, self.misses = interval_s, misses

    async def register_many(self, host: str, data: bytes, sig: Any) -> list[int]:
        """Registers agents (forcing them online) and returns their epochs.

        ``data`` is the msgpack of ``[entries, exclusive]`` signed by ``host`` (see
        :func:`reach.security.guard.signed_call`); a host registers only agents on itself. With
        ``exclusive``, an ID live on another host is refused and nothing is registered. An
        entry's optional ``priorities`` (one per capability, in their order) are its
        capabilities' priorities; without them, all are 0.

        Raises:
            AuthError: the signature does not verify, or an entry names another host.
            AgentAlreadyExists: an ID is already live elsewhere (exclusive only).
        """
        entries, exclusive = self.gate.open(host, data, sig, "register")
        self.gate.registers_its_own(host, entries)
        self._start()
        # A host given agents is a spare no more, even if an offer it sent before crossed the
        # claim that took it (or it would be handed out again, agents and all).
        self.spare_pool.drop(host)
        if exclusive:
            for e in entries:
                old = self.records.get(e["agent_id"])
                if old is not None and old.status is ONLINE and old.host != e["host"]:
                    raise AgentAlreadyExists(
                        f"agent {e['agent_id']!r} is already live on host {old.host}",
                        suggestion="stop it first, or choose another ID",
                        details={"agent_id": e["agent_id"], "host": old.host},
                    )
        epochs = []
        now = clock.monotonic()
        for e in entries:
            old = self.records.get(e["agent_id"])
            # A host re-registering what it already holds keeps the epoch; a new start grows it.
            same = old is not None and old.host == e["host"] and not exclusive
            epoch = next_epoch(None if old is None else old.epoch, same, e.get("epoch", 0))
            caps = tuple(e["capabilities"])
            rec = AgentRecord(e["agent_id"], caps, e["description"], e["host"], e["node"],
                              ONLINE, 0, epoch, aligned_priorities(caps, e.get("priorities", ())))
            self.records.register(rec)
            self.last_seen[rec.host] = now
            epochs.append(epoch)
        # A new incarnation of an agent with poison quarantined: its host learns of it before
        # it adds the agent (it adds it once this call returns).
        poisoned = [e["agent_id"] for e in entries if self.poison.holds(e["agent_id"])]
        if poisoned:
            await asyncio.gather(*(self.poison.tell(a, host) for a in poisoned))
        return epochs

    async def deregister(self, principal: str, data: bytes, sig: Any) -> int:
        """Removes agents registered by a host; returns how many were removed.

        ``data`` is ``[agent_ids, host]``, signed by that host or by a supervisor or driver
        (which deregister the agents of a host that died).

        Raises:
            AuthError: the signature does not verify, or another host signed it.
        """
        agent_ids, host = self.gate.open(principal, data, sig, "deregister")
        self.gate.may_deregister(principal, host)
        removed = 0
        for agent_id in agent_ids:
            rec = self.records.get(agent_id)
            if rec is not None and rec.host == host:
                self.records.remove(agent_id)
                removed += 1
        return removed

    async def heartbeat(self, host: str, data: bytes, sig: Any) -> tuple[list[str], float, int]:
        """Records that ``host`` is alive with these agents and loads (``data``: the loads by
        agent ID, signed by ``host``).

        Returns the agents this registry does not know (the host re-registers them), the
        heartbeat interval to keep, and the ACL's version (the host fetches a newer one).

        Raises:
            AuthError: the signature does not verify.
        """
        loads = self.gate.open(host, data, sig, "heartbeat")
        self._start()
        self.last_seen[host] = clock.monotonic()
        unknown = []
        for agent_id, load in loads.items():
            rec = self.records.get(agent_id)
            if rec is None or rec.host != host:
                unknown.append(agent_id)
                continue
            if rec.load != load or rec.status is not ONLINE:
                self.records.put(dataclasses.replace(rec, load=load, status=ONLINE))
        return unknown, self.interval_s, self.acl_version

    async def offer_spare(self, principal: str, data: bytes, sig: Any) -> bool:
        """An empty host offers itself as a warm spare (``data``: ``[node, shape, spares,
        max_spares]``, the last two the deployment's sizing it was started with, signed by that
        host; offered again with each of its heartbeats, so a restarted registry learns it).
        Returns False when the host is to retire instead (end its process): the pool holds more
        spares than the recent claims want, and claims have stopped for a while.

        Raises:
            AuthError: the signature does not verify.
        """
        node, shape, *bounds = self.gate.open(principal, data, sig, "offer_spare")
        self._start()
        now = self.last_seen[principal] = clock.monotonic()
        if any(rec.host == principal for rec in self.records.values()):
            return True  # an offer that crossed its own claim: the host holds agents now
        return self.spare_pool.offer(principal, str(node), str(shape), now, bounds)

    async def claim_spare(self, shape: str, node: str | None) -> str | None:
        """Takes a spare of ``shape`` whose heartbeat is fresh: on ``node`` if one is there,
        else on any node (a spare elsewhere serves when a node is gone). Its name, or None.
        Either way the claim counts towards the size of ``node``'s pool of ``shape``."""
        return self.spare_pool.claim(shape, node, self.last_seen, self.interval_s,
                                     clock.monotonic())

    async def top_up_spares(self, shape: str, node: str, spares: int, max_spares: int) -> int:
        """How many spares of ``shape`` the caller is to start on ``node`` now: ``spares``, plus
        one per claim made there in the last window, at most ``max_spares``, less those offered
        and starting (counted as starting from now on, until they offer themselves)."""
        return self.spare_pool.top_up(shape, node, spares, max_spares, clock.monotonic())

    async def claim_nonce(self, principal: str, data: bytes, sig: Any) -> bool:
        """Claims a remote agent's hello nonce for every gateway replica at once (``data``:
        ``[nonce, expires_at]``, signed by a remote agents' host; ``expires_at`` on the wall
        clock, at most :data:`~actors.hello_nonces.NONCE_TTL_MAX_S` away). True the first
        time, False for a nonce held already: a replayed hello.

        Nonces are dropped once expired, and at most ``nonces.limit`` are held. They are lost
        when the registry restarts: from then on the hello's time window alone bounds a replay.

        Raises:
            AuthError: the signature does not verify, or the signer is not a remote host.
            AgentUnavailable: ``nonces.limit`` nonces are held and none has expired
                (``details["reason"]``: ``nonce_limit``); retryable, as they expire.
        """
        nonce, expires_at = self.gate.open(principal, data, sig, "claim_nonce")
        self.gate.may_claim_nonces(principal)
        return self.nonces.claim(str(nonce), expires_at, clock.now())

    async def spares(self) -> dict[str, list[str]]:
        """The spares offered, as ``{"<node> <shape>": [host names]}``."""
        return self.spare_pool.by_place()

    async def check_key(self, principal: str, data: bytes, sig: Any) -> None:
        """Verifies a driver's signature, so that a driver with another deployment's keyring
        learns it when it starts.

        Raises:
            AuthError: the signature does not verify (or is missing while signing is on).
        """
        self.gate.open(principal, data, sig, "check_key")

    async def set_acl(self, principal: str, data: bytes, sig: Any) -> int:
        """Replaces the deployment's ACL (``data``: its document, signed by a driver); hosts
        apply it by their next heartbeat. Returns its version.

        Raises:
            AuthError: the signature does not verify, or the caller is not a driver.
        """
        doc = self.gate.open(principal, data, sig, "set_acl")
        self.gate.may_set_acl(principal)
        acl_from_doc(doc)  # refuse a malformed one here, not in every host
        self.acl_doc, self.acl_version = doc, self.acl_version + 1
        self.trail.record(principal, REGISTRY_NAME, capability="registry.set_acl",
                          msg_type="set_acl", outcome=f"ok: version {self.acl_version}")
        return self.acl_version

    async def acl(self) -> tuple[int, dict[str, Any] | None]:
        """The ACL's version and document (None: the default, allow all)."""
        return self.acl_version, self.acl_doc

    async def _expire_loop(self) -> None:
        while True:
            await asyncio.sleep(min(self.interval_s, 1.0))
            self.expire(clock.monotonic())
            self._report()

    def _report(self) -> None:
        """Publishes the registry's size by status (every status seen so far, zeros included)."""
        by_status = dict.fromkeys(self._statuses, 0)
        for rec in self.records.values():
            by_status[rec.status] = by_status.get(rec.status, 0) + 1
        self._statuses.update(by_status)
        for status, count in by_status.items():
            metrics.gauge("reach_registry_agents", count, status=status.value)

    def expire(self, now: float) -> list[str]:
        """Marks offline the agents of hosts that missed their heartbeats; returns their IDs."""
        dead = {h for h, seen in self.last_seen.items()
                if heartbeat_expired(seen, now, self.interval_s, self.misses)}
        gone = []
        for rec in list(self.records.values()):
            if rec.host in dead and rec.status not in (OFFLINE, RESTARTING):
                self.records.put(dataclasses.replace(rec, status=OFFLINE))
                gone.append(rec.agent_id)
        holding = {rec.host for rec in self.records.values()}
        for host in dead - holding:  # a dead host that holds nothing is forgotten
            del self.last_seen[host]
            self.spare_pool.forget(host)
        return gone

    async def mark(self, principal: str, data: bytes, sig: Any) -> None:
        """Sets the status of agents (``data``: ``[agent_ids, status, up_to]``, signed by the
        supervisor or driver that marks them, e.g. ``restarting``; ``up_to``, optional, the
        newest epoch of each agent the mark is about). An unknown agent marked ``restarting``
        gets a placeholder record until it registers. A host may mark its own agents online or
        offline (an agent reporting that the remote agent it stands for stopped answering).

        Raises:
            AuthError: the signature does not verify, or the signer is not a supervisor or driver
                (nor, for online and offline, the agents' host).
        """
        agent_ids, status, *rest = self.gate.open(principal, data, sig, "mark")
        up_to: dict[str, int] = rest[0] if rest else {}
        to = AgentStatus(status)
        self.gate.may_mark(principal, agent_ids, to, self.records)
        for agent_id in agent_ids:
            rec = self.records.get(agent_id)
            if rec is not None and rec.epoch > up_to.get(agent_id, rec.epoch):
                continue  # a newer incarnation registered already: the mark is not about it
            if rec is None:
                if to is not RESTARTING:
                    continue
                # Unknown here (this registry restarted, and lost the agent with its node): a
                # placeholder, so that callers wait for the restart instead of being told that
                # no such agent exists (a fatal error) until it registers again.
                rec = AgentRecord(agent_id)
            self.records.put(dataclasses.replace(rec, status=to))

    async def hosts(self) -> list[str]:
        """Names of the hosts alive by their heartbeats, most recent last."""
        now = clock.monotonic()
        alive = [h for h, seen in self.last_seen.items()
                 if not heartbeat_expired(seen, now, self.interval_s, self.misses)]
        return sorted(alive, key=self.last_seen.__getitem__)

    async def report_kills(self, principal: str, data: bytes, sig: Any,
                           ) -> list[tuple[int, bool]]:
        """Deaths of incarnations with requests in their hands, as the processes that waited
        for the replies saw them (``data``: a list of ``[agent_id, epoch, fingerprint,
        request_id, sender, trace_id, schema]``, signed by such a process).

        A request that is poison is kept as a dead letter and audited, and the host of its
        agent's live incarnation is told to refuse its content, before this call returns.
        Returns, for each report, the incarnations its request killed lately and whether it
        is quarantined.

        Raises:
            AuthError: the signature does not verify.
        """
        reports = self.gate.open(principal, data, sig, "report_kills")
        verdicts, letters, fresh = self.poison.judge(reports)
        if letters:
            await self.dead_letter(letters)
        hosts = {a: rec.host for a in fresh if (rec := self.records.get(a)) is not None}
        await asyncio.gather(*(self.poison.tell(a, h) for a, h in hosts.items()))
        return verdicts

    async def forget_kills(self, principal: str, data: bytes, sig: Any) -> int:
        """Requests answered by an incarnation of their agent (``data``: a list of
        ``[agent_id, epoch, fingerprint]``, signed by the process that got the replies) after
        that process saw a death with the same content in hands: the kills of that content in
        the agent's earlier incarnations are forgotten (a quarantine stays). Returns how many
        contents had kills forgotten.

        Raises:
            AuthError: the signature does not verify.
        """
        return self.poison.forget(self.gate.open(principal, data, sig, "forget_kills"))

    async def dead_letter(self, letters: list[DeadLetter]) -> None:
        """Records messages that could not be delivered, with their reasons (bounded)."""
        self.dead_letters_.extend(letters)
        for letter in letters:
            metrics.count("reach_dead_letters", 1, letter.code)

    async def dead_letters(self, limit: int = 1000) -> list[DeadLetter]:
        """The most recent dead letters, oldest first."""
        return list(self.dead_letters_)[-limit:]

    def _record(self, agent_id: str) -> AgentRecord | None:
        rec = self.records.get(agent_id)
        if rec is None and clock.monotonic() < self.recovering_until:
            return AgentRecord(agent_id, status=RECOVERING)
        return rec

    async def lookup(self, agent_id: str, newer_than: int = -1,
                     wait_s: float = 0.0) -> AgentRecord | None:
        """The record of one agent; None if unknown; status "recovering" if it may yet appear.

        With ``wait_s``, a long poll: the answer waits (up to ``wait_s``) while the agent is
        restarting or its epoch is not above ``newer_than`` (the incarnation a caller found
        dead), and comes the moment its new incarnation registers: no polling delay.
        """
        deadline = clock.monotonic() + wait_s
        while True:
            rec = self._record(agent_id)
            settled = (rec is None or rec.status is OFFLINE
                       or (rec.status is not RESTARTING and rec.epoch > newer_than))
            left = deadline - clock.monotonic()
            if settled or left <= 0:
                return rec
            await self.records.changed(agent_id, left)

    async def discover(self, capability: str, text: str | None = None, limit: int | None = None,
                       ) -> tuple[list[AgentRecord], list[str]]:
        """Online holders of a capability (best first, at most ``limit``) and close tags."""
        return self.records.discover(capability, text, limit)

    async def time_discover(self, queries: list[str], repeat: int) -> list[float]:
        """Milliseconds this registry spends per discovery, for each query and repeat (bench)."""
        times = []
        for _ in range(repeat):
            for query in queries:
                t0 = time.perf_counter()
                await self.discover(query, None, 64)
                times.append((time.perf_counter() - t0) * 1000)
        return times

    async def agents(self) -> list[AgentRecord]:
        """Every record, sorted by agent ID."""
        return [self.records[k] for k in sorted(self.records)]

    async def size(self) -> int:
        """Number of registered agents."""
        return len(self.records)

    async def stats(self) -> dict[str, Any]:
        """Counts, and this process's resident memory in bytes."""
        return {"incarnation": self.incarnation, "agents": len(self.records),
                "tags": len(self.records.by_tag),
                "hosts": len(self.last_seen), "rss_bytes": rss_bytes(),
                "refused": self.gate.refused, "signed": self.gate.guard is not None,
                "nonces": len(self.nonces),
                "dead_letters": len(self.dead_letters_),
                "spares": self.spare_pool.stats(clock.monotonic())}
