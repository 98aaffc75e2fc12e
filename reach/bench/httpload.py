"""A lean HTTP/1.1 load generator for the benchmarks: K keep-alive connections on asyncio
streams, each with one request outstanding (as ``wrk`` would drive them).

httpx's pool costs more CPU per request than the servers measured here (on 2 cores, 100
connections through httpx top out near 250 requests/s against a bare Starlette echo): the
benchmarks would measure their own client. This one parses only what it needs: the status line,
``Content-Length`` or chunked transfer encoding, and the body.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import urlsplit


class HttpError(Exception):
    """A response that is not 200, with its status and body."""

    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(f"HTTP {status}: {body[:200]!r}")
        self.status = status
        self.body = body


class Connection:
    """One keep-alive connection to ``base`` (``http://host:port``)."""

    def __init__(self, base: str, headers: dict[str, str] | None = None) -> None:
        parts = urlsplit(base)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        self._head = f"Host: {self.host}:{self.port}\r\n{extra}"
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def post_json(self, path: str, doc: Any) -> Any:
        """POSTs ``doc`` as JSON; returns the decoded JSON body (raises HttpError unless 200)."""
        body = json.dumps(doc, ensure_ascii=False).encode()
        request = (f"POST {path} HTTP/1.1\r\n{self._head}Content-Type: application/json\r\n"
                   f"Content-Length: {len(body)}\r\n\r\n").encode() + body
        for attempt in range(2):  # a keep-alive connection the server closed: open it again
            if self._writer is None:
                self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
            assert self._reader is not None
            try:
                self._writer.write(request)
                status, payload = await self._response(self._reader)
                break
            except (ConnectionError, asyncio.IncompleteReadError):
                self.close()
                if attempt:
                    raise
        if status != 200:
            raise HttpError(status, payload)
        return json.loads(payload)

    @staticmethod
    async def _response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        length, chunked = 0, False
        for line in lines[1:]:
            name, _, value = line.partition(":")
            name = name.strip().lower()
            if name == "content-length":
                length = int(value.strip())
            elif name == "transfer-encoding" and "chunked" in value.lower():
                chunked = True
        if not chunked:
            return status, await reader.readexactly(length)
        body = bytearray()
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0].strip(), 16)
            if size == 0:
                await reader.readuntil(b"\r\n")  # the empty trailer
                return status, bytes(body)
            body += await reader.readexactly(size)
            await reader.readexactly(2)

    def close(self) -> None:
        """Closes the connection (the next request opens it again)."""
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None
