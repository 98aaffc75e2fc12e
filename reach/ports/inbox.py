"""The port of a driver's reply inbox."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Protocol

from reach.ports.endpoint import Endpoint


class InboxPort(Endpoint, Protocol):
    """Where replies to a driver land (a driver cannot take calls itself)."""

    def take(self) -> Awaitable[list[bytes]]:
        """Waits for at least one frame, then returns every frame queued."""
        ...


__all__ = ["InboxPort"]
