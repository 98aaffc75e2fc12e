"""The port of the registry: who is where, with which capabilities, and whether they are alive."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, Protocol

from reach.records import AgentRecord, DeadLetter


class RegistryPort(Protocol):
    """The registry: who is where, with which capabilities, and whether they are alive.

    Calls that change it are signed by their caller (``principal``, ``data``, ``sig``: see
    :func:`reach.security.guard.signed_call`).
    """

    def lookup(self, agent_id: str, newer_than: int = -1,
               wait_s: float = 0.0) -> Awaitable[AgentRecord | None]:
        """One agent's record; None if unknown; status ``recovering`` if it may yet appear.
        With ``wait_s``, waits (a long poll) while it restarts or its epoch is not above
        ``newer_than``, answering the moment its new incarnation registers."""
        ...

    def discover(self, capability: str, text: str | None, limit: int | None,
                 ) -> Awaitable[tuple[list[AgentRecord], list[str]]]:
        """Online holders of a capability, best first, and close tags when there are none."""
        ...

    def agents(self) -> Awaitable[list[AgentRecord]]:
        """Every record, sorted by agent ID."""
        ...

    def hosts(self) -> Awaitable[list[str]]:
        """Names of the hosts alive by their heartbeats."""
        ...

    def register_many(self, principal: str, data: bytes, sig: Any) -> Awaitable[list[int]]:
        """Registers agents (signed ``[records, exclusive]``); their epochs."""
        ...

    def deregister(self, principal: str, data: bytes, sig: Any) -> Awaitable[int]:
        """Removes agents of a host (signed ``[agent_ids, host]``); how many."""
        ...

    def heartbeat(self, principal: str, data: bytes, sig: Any,
                  ) -> Awaitable[tuple[list[str], float, int]]:
        """A host's signed loads; the agents unknown here, the interval, the ACL's version."""
        ...

    def mark(self, principal: str, data: bytes, sig: Any) -> Awaitable[None]:
        """Sets agents' status (signed ``[agent_ids, status]``, by a supervisor or driver)."""
        ...

    def set_acl(self, principal: str, data: bytes, sig: Any) -> Awaitable[int]:
        """Replaces the ACL (signed by a driver); its version."""
        ...

    def acl(self) -> Awaitable[tuple[int, dict[str, Any] | None]]:
        """The ACL's version and document (None: allow all)."""
        ...

    def check_key(self, principal: str, data: bytes, sig: Any) -> Awaitable[None]:
        """Verifies a driver's signature (AuthError ``bad_signature`` when its keyring is not
        the cluster's)."""
        ...

    def configure(self, interval_s: float, misses: int) -> Awaitable[None]:
        """Changes the heartbeat interval and miss count."""
        ...

    def dead_letter(self, letters: list[DeadLetter]) -> Awaitable[None]:
        """Records undeliverable messages (callers need not await it)."""
        ...

    def dead_letters(self, limit: int) -> Awaitable[list[DeadLetter]]:
        """The most recent dead letters, oldest first."""
        ...

    def stats(self) -> Awaitable[dict[str, Any]]:
        """Counts and memory (for tools and benchmarks)."""
        ...

    def offer_spare(self, principal: str, data: bytes, sig: Any) -> Awaitable[None]:
        """An empty host offers itself as a warm spare (signed ``[node, shape]`` by the host)."""
        ...

    def claim_spare(self, shape: str, node: str | None) -> Awaitable[str | None]:
        """Takes a live spare of ``shape``, on ``node`` if there is one there, else on any node;
        its name, or None."""
        ...

    def claim_nonce(self, principal: str, data: bytes, sig: Any) -> Awaitable[bool]:
        """Claims a hello nonce for every gateway replica (signed ``[nonce, expires_at]`` by a
        remote agents' host): True the first time, False when it is held already (a replay);
        AgentUnavailable (``nonce_limit``) when the registry holds as many as it may."""
        ...

    def spares(self) -> Awaitable[dict[str, list[str]]]:
        """The spares offered, as ``{"<node> <shape>": [host names]}``."""
        ...


__all__ = ["RegistryPort"]
