"""A process's way to the session store's sessions: their port, with appends coalesced.

Many small appends from one process become few store calls: while one ``append_many`` call is in
flight, every append made meanwhile joins the next one (as the transport does for envelopes), and
the store commits each call's writes together.
"""

from __future__ import annotations

import asyncio

from reach.errors import ErrorInfo, ReachError, error_from_info
from reach.ports.cluster import Cluster
from reach.ports.sessions import NewMessage, SessionsPort


class StoreClient:
    """The session store's sessions as one process uses them (created on first use, by
    :attr:`Link.store`).

    Args:
        cluster: Where the store is.
        port: The sessions' port to use (default: the deployment's).
    """

    def __init__(self, cluster: Cluster, port: SessionsPort | None = None) -> None:
        self._cluster = cluster
        self._port = port
        self._queue: list[tuple[str, list[NewMessage], asyncio.Future[list[int]]]] = []
        self._busy = False

    @property
    def port(self) -> SessionsPort:
        """The sessions' port.

        Raises:
            SessionNotFound: no session store runs.
        """
        if self._port is None:
            self._port = self._cluster.sessions()
        return self._port

    async def append(self, session_id: str, messages: list[NewMessage]) -> list[int]:
        """Appends once committed; returns the sequence numbers.

        Raises:
            SessionNotFound: no such session (or another store error, typed).
        """
        port = self.port
        future: asyncio.Future[list[int]] = asyncio.get_running_loop().create_future()
        self._queue.append((session_id, messages, future))
        if not self._busy:
            self._busy = True
            asyncio.get_running_loop().create_task(self._drain(port))
        return await future

    async def _drain(self, port: SessionsPort) -> None:
        try:
            while self._queue:
                batch, self._queue = self._queue, []
                try:
                    results = await port.append_many([(s, m) for s, m, _ in batch])
                except ReachError as error:
                    for *_, future in batch:
                        if not future.done():
                            future.set_exception(error)
                    continue
                for (*_, future), result in zip(batch, results, strict=True):
                    if future.done():
                        continue
                    if isinstance(result, list):
                        future.set_result(result)
                    else:
                        future.set_exception(error_from_info(ErrorInfo.model_validate(result)))
                await asyncio.sleep(0)  # let woken appenders join the next call
        finally:
            self._busy = False


__all__ = ["StoreClient"]
