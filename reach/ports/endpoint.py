"""The port every reach process is: it takes frames of envelopes and can be watched for death."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Protocol

#: What ``deliver`` returns: the IDs of requests for agents not there (re-route them), and a
#: frame of the replies that were ready at once (or None).
Delivered = tuple[list[str], bytes | None]


class Endpoint(Protocol):
    """Anything that takes frames of envelopes: a host, a driver's inbox, a supervisor, the store.

    Attributes:
        name: Its name, where replies to it are sent.
    """

    name: str

    def deliver(self, frame: bytes, reply_to: str) -> Awaitable[Delivered]:
        """Hands over a frame of envelopes (see :data:`Delivered`)."""
        ...

    def watch(self) -> Awaitable[None]:
        """Returns when the endpoint stops; fails (AgentUnavailable) the moment it dies."""
        ...


__all__ = ["Delivered", "Endpoint"]
