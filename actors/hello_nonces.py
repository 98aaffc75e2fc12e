"""The hello nonces the registry holds for every gateway replica: a replayed hello is refused.

A remote agent's hello carries a nonce it never reuses; whichever replica the hello reaches
claims the nonce here, once, through the registry (the one process all replicas share). A nonce
is held until its hello's time window has passed (a replay after that fails the window check
instead), and at most :data:`NONCE_LIMIT` are held at once.
"""

from __future__ import annotations

import heapq

from reach._runtime.metrics import metrics
from reach.errors import AgentUnavailable

#: Hello nonces held at most, each until it expires (about 21 MB; with the default 300 s window,
#: so 600 s each, room for some 160 hellos a second without pause).
NONCE_LIMIT = 100_000
#: The longest a nonce is held, whatever its caller asks (seconds).
NONCE_TTL_MAX_S = 3600.0


class HelloNonces:
    """The nonces claimed, each with its expiry (on the wall clock).

    Attributes:
        held: Nonce -> when it expires.
        limit: How many may be held at once.
    """

    def __init__(self, limit: int = NONCE_LIMIT) -> None:
        self.held: dict[str, float] = {}
        # Invariant: the heap holds exactly the items of held, ordered by expiry.
        self._expiry: list[tuple[float, str]] = []
        self.limit = limit

    def __len__(self) -> int:
        return len(self.held)

    def claim(self, nonce: str, expires_at: float, now: float) -> bool:
        """Claims ``nonce`` until ``expires_at`` (at most :data:`NONCE_TTL_MAX_S` from ``now``):
        True the first time, False for a nonce held already (a replayed hello). Expired nonces
        are dropped first.

        Raises:
            AgentUnavailable: ``limit`` nonces are held and none has expired
                (``details["reason"]``: ``nonce_limit``); retryable, as they expire.
        """
        while self._expiry and self._expiry[0][0] <= now:
            _, old = heapq.heappop(self._expiry)
            del self.held[old]
        if nonce in self.held:
            return False
        if len(self.held) >= self.limit:
            metrics.count("reach_auth_refusals", 1, "nonce_limit")
            raise AgentUnavailable(
                f"the registry holds {len(self.held)} hello nonces, its limit: too many hellos "
                "within their time window", suggestion="connect again later",
                details={"reason": "nonce_limit", "limit": self.limit})
        until = min(float(expires_at), now + NONCE_TTL_MAX_S)
        self.held[nonce] = until
        heapq.heappush(self._expiry, (until, nonce))
        return True
