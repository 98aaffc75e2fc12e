"""The Inbox actor: where replies to a driver land until the driver collects them.

A driver cannot receive Ray calls, so each driver has one inbox on its node. Hosts deliver reply
frames to it like to any endpoint; the driver keeps one ``take`` call open, which returns every
frame queued so far (replies come back batched). The inbox never decodes a frame.
"""

from __future__ import annotations

import asyncio


class Inbox:
    """A queue of frames for one driver."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self._ready: asyncio.Event | None = None

    def _event(self) -> asyncio.Event:
        if self._ready is None:
            self._ready = asyncio.Event()
        return self._ready

    async def deliver(self, frame: bytes, reply_to: str) -> tuple[list[str], None]:
        """Queues a frame for the driver; nothing is ever "not here" and nothing is replied."""
        self.frames.append(frame)
        self._event().set()
        return [], None

    async def take(self) -> list[bytes]:
        """Waits until at least one frame is queued, then returns all of them."""
        ready = self._event()
        await ready.wait()
        frames, self.frames = self.frames, []
        ready.clear()
        return frames

    async def watch(self) -> None:
        """Never returns while the inbox lives (see Transport's liveness watch)."""
        await asyncio.Event().wait()
