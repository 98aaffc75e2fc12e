"""A WebSocket to an ASGI application in the test's own event loop (virtual time included):
the channel is driven exactly as a server would drive it, with no server and no thread."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from starlette.types import ASGIApp

from reach.remote.client import ConnectionEnded


class AsgiSocket:
    """One client socket to ``app`` (a :class:`reach.remote.client.Connection`)."""

    def __init__(self, app: ASGIApp, path: str, headers: dict[str, str] | None = None, *,
                 buffer: int = 0) -> None:
        # ``buffer``: how many messages the app may send before this side reads them (0: any
        # number); past it the app's send waits, as a server's does on a peer that reads nothing.
        self._to_app: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._from_app: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=buffer)
        self.closed: tuple[int, str] | None = None
        scope = {"type": "websocket", "asgi": {"version": "3.0"}, "scheme": "ws",
                 "path": path, "raw_path": path.encode(), "root_path": "", "query_string": b"",
                 "headers": [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()],
                 "server": ("gateway", 80), "client": ("agent", 1234), "subprotocols": []}
        self._to_app.put_nowait({"type": "websocket.connect"})
        self.task = asyncio.get_running_loop().create_task(
            app(scope, self._to_app.get, self._from_app.put))

    async def send(self, text: str) -> None:
        if self.closed is not None:
            raise ConnectionEnded("closed", details={"close": self.closed[0],
                                                    "reason": self.closed[1]})
        await self._to_app.put({"type": "websocket.receive", "text": text})

    @property
    def unread(self) -> int:
        """How many messages sent to the app it has not read yet."""
        return self._to_app.qsize()

    async def send_bytes(self, data: bytes) -> None:
        await self._to_app.put({"type": "websocket.receive", "bytes": data})

    async def recv(self) -> str:
        while True:
            if self.closed is not None:
                raise ConnectionEnded(f"closed {self.closed[0]}",
                                      details={"close": self.closed[0], "reason": self.closed[1]})
            message = await self._from_app.get()
            if message["type"] == "websocket.send":
                return str(message["text"])
            if message["type"] == "websocket.close":
                self.closed = (int(message.get("code", 1000)), str(message.get("reason", "")))
                await self._to_app.put({"type": "websocket.disconnect",
                                        "code": self.closed[0]})

    async def recv_json(self) -> dict[str, Any]:
        frame: dict[str, Any] = json.loads(await self.recv())
        return frame

    async def close(self, code: int = 1000, reason: str = "") -> None:
        if self.closed is None:
            self.closed = (code, reason)
            await self._to_app.put({"type": "websocket.disconnect", "code": code})

    async def closed_with(self) -> tuple[int, str]:
        """Reads until the server closes; the close code and reason."""
        while self.closed is None:
            message = await self._from_app.get()
            if message["type"] == "websocket.close":
                self.closed = (int(message.get("code", 1000)), str(message.get("reason", "")))
                await self._to_app.put({"type": "websocket.disconnect",
                                        "code": self.closed[0]})
        return self.closed

    async def drop(self) -> None:
        """The network breaks: the server sees a disconnect (1006), the client nothing more."""
        self.closed = (1006, "dropped")
        await self._to_app.put({"type": "websocket.disconnect", "code": 1006})
