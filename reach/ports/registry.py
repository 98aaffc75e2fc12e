"""The port of the registry: who is where, with which capabilities, and whether they are alive."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Protocol, TypedDict

from reach.records import AgentRecord, DeadLetter

#: A signed call's signature as it travels: ``(timestamp, nonce, MAC)`` as
#: :func:`reach.security.guard.signed_call` makes it; None when signing is off.
CallSignature = tuple[float, bytes, bytes] | None


class AclRuleDoc(TypedDict):
    """One rule of an ACL document."""

    callers: list[str]
    capabilities: list[str]
    allow: bool


class AclDoc(TypedDict):
    """An ACL as the registry keeps it (:func:`reach.security.guard.acl_to_doc`)."""

    default_allow: bool
    rules: list[AclRuleDoc]


class SpareStats(TypedDict):
    """The registry's warm spares: offered and starting now; claims that took one and claims
    that found none (their restarts started a new process); spares started on its word and
    retired; the median time a recent one took from being asked for to being offered."""

    offered: int
    starting: int
    taken: int
    missed: int
    started: int
    retired: int
    start_p50_s: float | None


class RegistryStats(TypedDict):
    """The registry's counts and resident memory (for tools and benchmarks)."""

    incarnation: int
    agents: int
    tags: int
    hosts: int
    rss_bytes: int
    refused: int
    signed: bool
    nonces: int
    dead_letters: int
    spares: SpareStats


class RegistryPort(Protocol):
    """The registry: who is where, with which capabilities, and whether they are alive.

    Calls that change it are signed by their caller (``principal`` or ``host``, ``data``,
    ``sig``: see :func:`reach.security.guard.signed_call`); ``data`` holds the call's arguments.

    Every call names what it is about, so that a client-side router can implement this port
    over several registry actors (shards, each owning the agent IDs that hash to it). Such a
    router, built in the caller's process, would route each call so:

    - by one agent ID, to its shard: :meth:`lookup`;
    - by the agent IDs in the signed arguments, split per shard, each part signed anew by the
      router with the caller's guard (it runs in the signer's process), the answers merged back
      in the arguments' order: :meth:`register_many` (``[records, exclusive]``),
      :meth:`deregister` (``[agent_ids, host]``), :meth:`mark` (``[agent_ids, status]``),
      :meth:`heartbeat` (``{agent_id: load}``: the unknown agents of every shard, the smallest
      interval, the ACL's version from its home shard), :meth:`report_kills` (the reports,
      each by its agent), :meth:`forget_kills` (the answers, each by its agent);
    - to every shard, merging the answers: :meth:`discover` (the union, ranked again with the
      same policy), :meth:`agents` (sorted by agent ID), :meth:`hosts` (the union),
      :meth:`dead_letters` (the last ``limit`` by time), :meth:`stats` (summed),
      :meth:`configure` (the same settings everywhere);
    - to one home shard, for what is the deployment's rather than an agent's: the ACL
      (:meth:`set_acl`, :meth:`acl`), :meth:`check_key`, the hello nonces
      (:meth:`claim_nonce`), the warm spares (:meth:`offer_spare`, :meth:`claim_spare`,
      :meth:`spares`) and the dead letters' record (:meth:`dead_letter`).
    """

    def lookup(self, agent_id: str, newer_than: int = -1,
               wait_s: float = 0.0) -> Awaitable[AgentRecord | None]:
        """One agent's record; None if unknown; status ``recovering`` if it may yet appear.
        With ``wait_s``, waits (a long poll) while it restarts or its epoch is not above
        ``newer_than``, answering the moment its new incarnation registers."""
        ...

    def discover(self, capability: str, text: str | None = None, limit: int | None = None,
                 ) -> Awaitable[tuple[list[AgentRecord], list[str]]]:
        """Online holders of a capability, best first, and close tags when there are none."""
        ...

    def agents(self) -> Awaitable[list[AgentRecord]]:
        """Every record, sorted by agent ID."""
        ...

    def hosts(self) -> Awaitable[list[str]]:
        """Names of the hosts alive by their heartbeats."""
        ...

    def register_many(self, host: str, data: bytes, sig: CallSignature,
                      ) -> Awaitable[list[int]]:
        """Registers agents of a host (signed ``[records, exclusive]``); their epochs."""
        ...

    def deregister(self, principal: str, data: bytes, sig: CallSignature) -> Awaitable[int]:
        """Removes agents of a host (signed ``[agent_ids, host]``); how many."""
        ...

    def heartbeat(self, host: str, data: bytes, sig: CallSignature,
                  ) -> Awaitable[tuple[list[str], float, int]]:
        """A host's signed loads (``{agent_id: load}``); the agents unknown here, the
        interval, the ACL's version."""
        ...

    def mark(self, principal: str, data: bytes, sig: CallSignature) -> Awaitable[None]:
        """Sets agents' status (signed ``[agent_ids, status]``, by a supervisor or driver)."""
        ...

    def set_acl(self, principal: str, data: bytes, sig: CallSignature) -> Awaitable[int]:
        """Replaces the ACL (its :class:`AclDoc`, signed by a driver); its version."""
        ...

    def acl(self) -> Awaitable[tuple[int, AclDoc | None]]:
        """The ACL's version and document (None: allow all)."""
        ...

    def check_key(self, principal: str, data: bytes, sig: CallSignature) -> Awaitable[None]:
        """Verifies a driver's signature (AuthError ``bad_signature`` when its keyring is not
        the cluster's)."""
        ...

    def configure(self, interval_s: float, misses: int) -> Awaitable[None]:
        """Changes the heartbeat interval and miss count."""
        ...

    def report_kills(self, principal: str, data: bytes, sig: CallSignature,
                     ) -> Awaitable[list[tuple[int, bool]]]:
        """Deaths of agents' incarnations with requests in their hands (signed list of
        ``[agent_id, epoch, fingerprint, request_id, sender, trace_id, schema]``, by the process
        that waited for the replies): for each, the incarnations its request killed lately and
        whether it is now quarantined (``poison``) for the agent."""
        ...

    def forget_kills(self, principal: str, data: bytes, sig: CallSignature) -> Awaitable[int]:
        """Requests answered by an incarnation of their agent after a death with the same
        content in hands (signed list of ``[agent_id, epoch, fingerprint]``, by the process
        that got the replies): the kills of that content in the agent's earlier incarnations
        are forgotten, a quarantine stays; how many contents had kills forgotten (callers need
        not await it)."""
        ...

    def dead_letter(self, letters: list[DeadLetter]) -> Awaitable[None]:
        """Records undeliverable messages (callers need not await it)."""
        ...

    def dead_letters(self, limit: int = 1000) -> Awaitable[list[DeadLetter]]:
        """The most recent dead letters, oldest first."""
        ...

    def stats(self) -> Awaitable[RegistryStats]:
        """Counts and memory (for tools and benchmarks)."""
        ...

    def offer_spare(self, principal: str, data: bytes, sig: CallSignature) -> Awaitable[bool]:
        """An empty host offers itself as a warm spare (signed ``[node, shape, spares,
        max_spares]`` by the host); False: it is to retire instead (end its process)."""
        ...

    def claim_spare(self, shape: str, node: str | None) -> Awaitable[str | None]:
        """Takes a live spare of ``shape``, on ``node`` if there is one there, else on any node;
        its name, or None (the claim counts towards the pool's size either way)."""
        ...

    def top_up_spares(self, shape: str, node: str, spares: int,
                      max_spares: int) -> Awaitable[int]:
        """How many spares of ``shape`` the caller is to start on ``node`` now, for the claims
        made there lately (counted as starting from now on)."""
        ...

    def claim_nonce(self, principal: str, data: bytes, sig: CallSignature) -> Awaitable[bool]:
        """Claims a hello nonce for every gateway replica (signed ``[nonce, expires_at]`` by a
        remote agents' host): True the first time, False when it is held already (a replay);
        AgentUnavailable (``nonce_limit``) when the registry holds as many as it may."""
        ...

    def spares(self) -> Awaitable[dict[str, list[str]]]:
        """The spares offered, as ``{"<node> <shape>": [host names]}``."""
        ...


__all__ = ["AclDoc", "AclRuleDoc", "CallSignature", "RegistryPort", "RegistryStats",
           "SpareStats"]
