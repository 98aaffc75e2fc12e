"""The bridge between a gateway replica's WebSocket connections and its remote host (see
``channel.py``): one long poll for every connection able to write, one ``put`` in flight for
what every connection read; an envelope the call cannot carry is refused alone."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any, Protocol

from reach.errors import CodecError, ReachError
from reach.remote.ports import RemoteHostPort
from reach.remote.wire import error_frame

log = logging.getLogger("reach.remote.channel")

#: What a connection's writer gets when the remote host is gone.
GONE = "\x00gone"


class Link(Protocol):
    """What the bridge knows of a connection."""

    agent_id: str
    conn: str
    frames: asyncio.Queue[str | None]
    """Frames the poll took for it (None: the connection is over; :data:`GONE`: the host is)."""
    errors: asyncio.Queue[dict[str, Any]]
    """``error`` frames for it."""


class Bridge:
    """The replica's side of its remote host: one long poll (``take``) for every connection
    able to write, and one ``put`` in flight for what every connection read (the envelopes
    read meanwhile go together in the next), so that the Ray calls per message fall as the
    load grows, whatever the number of agents.

    Invariant: a connection is in ``ready`` while it has nothing to write; the poll's frame for
    it is written before it is ready again (so a slow socket leaves its envelopes queued in the
    remote host, whose bounded queue refuses senders past it).
    """

    def __init__(self, host: RemoteHostPort, put_backlog: int) -> None:
        self.host = host
        self.put_backlog = put_backlog
        self.ready: dict[str, Link] = {}
        self._polled: set[str] = set()
        self._poll: asyncio.Task[None] | None = None
        self._news = asyncio.Event()
        self._inbox: list[tuple[Link, list[dict[str, Any]]]] = []
        self._backlog = 0
        self._drain: asyncio.Task[None] | None = None
        self._drained = asyncio.Event()
        self._drained.set()

    # -- to the agents ---------------------------------------------------------------------------

    def ready_to_write(self, conn: Link) -> None:
        """The connection has written what it was given: poll for it again."""
        self.ready[conn.agent_id] = conn
        if self._poll is None or self._poll.done():
            self._poll = asyncio.ensure_future(self._poll_forever())
        elif conn.agent_id not in self._polled:
            self._news.set()

    def leave(self, conn: Link) -> None:
        if self.ready.get(conn.agent_id) is conn:
            del self.ready[conn.agent_id]

    async def _poll_forever(self) -> None:
        while self.ready:
            ready = dict(self.ready)
            self._polled = set(ready)
            self._news.clear()
            call = asyncio.ensure_future(self._take(ready))
            news = asyncio.ensure_future(self._news.wait())
            done, _ = await asyncio.wait({call, news}, return_when=asyncio.FIRST_COMPLETED)
            if call not in done:  # a connection became ready meanwhile: end this poll
                await _quietly(self.host.poke())
            news.cancel()
            frames = await call
            for agent_id, text in frames.items():
                conn = ready[agent_id]
                if self.ready.get(agent_id) is conn:
                    del self.ready[agent_id]
                conn.frames.put_nowait(text)
            await asyncio.sleep(0)  # writers that finish at once are ready for the next poll
        self._polled = set()

    async def _take(self, ready: dict[str, Link]) -> dict[str, str | None]:
        try:
            return await self.host.take({a: c.conn for a, c in ready.items()})
        except ReachError as exc:  # the remote host is gone: every connection ends
            log.warning("the remote host failed: %s", exc)
            return dict.fromkeys(ready, GONE)

    # -- from the agents -------------------------------------------------------------------------

    async def put(self, conn: Link, items: list[dict[str, Any]]) -> None:
        """Queues envelopes a connection read; waits while the backlog is full."""
        self._inbox.append((conn, items))
        self._backlog += len(items)
        if self._drain is None or self._drain.done():
            self._drained.clear()
            self._drain = asyncio.ensure_future(self._put_all())
        while self._backlog > self.put_backlog:
            await self._drained.wait()

    async def flushed(self) -> None:
        """Returns once everything read so far is handed over."""
        await self._drained.wait()

    async def _put_all(self) -> None:
        try:
            while self._inbox:
                batch, self._inbox = self._inbox, []
                self._backlog -= sum(len(items) for _, items in batch)
                await self._hand_over(batch)
        finally:
            self._drained.set()

    async def _hand_over(self, batch: list[tuple[Link, list[dict[str, Any]]]]) -> None:
        """Puts a batch; if the call cannot carry it (an envelope that does not pickle), puts
        it again connection by connection, then envelope by envelope, so that only what cannot
        travel is refused (each with an ``error`` frame to its sender) and the rest goes on."""
        try:
            refused = await self.host.put([(c.agent_id, c.conn, items) for c, items in batch])
        except ReachError as exc:  # the remote host is gone: every connection ends
            log.warning("the remote host failed: %s", exc)
            for conn, _ in batch:
                conn.frames.put_nowait(GONE)
            return
        except Exception as exc:  # pickling, recursion...: sent apart, below
            if len(batch) == 1 and len(batch[0][1]) == 1:
                conn, (item,) = batch[0]
                _refuse_item(conn, item, exc)
                return
            parts = [[entry] for entry in batch] if len(batch) > 1 else \
                [[(batch[0][0], [item])] for item in batch[0][1]]
            for part in parts:  # in order: one agent's envelopes keep theirs
                await self._hand_over(part)
            return
        by_agent = {c.agent_id: c for c, _ in batch}
        for agent_id, errors in refused.items():
            for error in errors:
                by_agent[agent_id].errors.put_nowait(error)


def _refuse_item(conn: Link, item: dict[str, Any], exc: Exception) -> None:
    msg_id = item.get("msg_id")
    log.warning("refused an envelope of %s that cannot travel: %s: %s", conn.agent_id,
                type(exc).__name__, exc)
    hint = ": nest it less deeply" if isinstance(exc, RecursionError) else ""
    conn.errors.put_nowait(error_frame(
        msg_id if isinstance(msg_id, str) else None, CodecError.code,
        f"the envelope cannot travel into the cluster ({type(exc).__name__}: "
        f"{str(exc)[:200]}){hint}"))


async def _quietly(call: Awaitable[Any]) -> None:
    try:
        await call
    except ReachError as exc:
        log.warning("the remote host did not answer a poke: %s", exc)


__all__ = ["GONE", "Bridge", "Link"]
