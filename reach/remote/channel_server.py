"""The channel's frame limit kept by the WebSocket server itself, before a frame is buffered.

uvicorn (what Serve and ``reach gateway`` serve the gateway with) reads a whole WebSocket message
into memory before the application sees it, up to its ``ws_max_size`` (16 MiB by default), and
closes a larger one with 1009, which the application never hears of. The channel refuses frames
over ``max_frame_bytes`` (1 MiB) with 4413, but only once uvicorn has read them. So the server
is given the channel's limit (:func:`uvicorn_settings`): the ``websockets`` parser then refuses a
frame as soon as its header announces a payload over the limit (or its fragments add up past it,
or its compressed form inflates past it), having buffered at most the limit. Its close is made
the channel's: 4413 ``frame_size`` instead of 1009, 4400 ``utf8`` instead of 1007 for text that
is not UTF-8, and the application can tell (:data:`REFUSAL`), so that the refusal is audited.

Memory a connection can hold in the server, whatever the peer sends: one frame being read (at
most ``max_frame_bytes``, plus a read chunk of 64 KiB), one message handed to the application and
not read yet (at most ``max_frame_bytes``; reading is paused until the application takes it), and
its decoded text (at most ``max_frame_bytes`` characters): about ``3 * max_frame_bytes``, 3 MiB
by default, against 48 MiB with uvicorn's defaults.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.config import Config
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from uvicorn.server import ServerState
from websockets.frames import CloseCode as WsCloseCode
from websockets.http11 import Request
from websockets.server import ServerProtocol

from reach.remote.wire import CloseCode

#: Key, in the ASGI scope's ``extensions``, of what the server refused on this connection: a
#: dict, empty until it closes the connection for a frame (then ``code``, ``rule``: ``frame_size``
#: or ``utf8``, and ``words``). In the scope, not in the disconnect message: Ray Serve cancels
#: the application once the client is gone, and a cancelled application can still read it.
#: Only the server writes it: a peer's own close never does.
REFUSAL = "reach.refusal"

# The parser's own closes, and the channel's for the same causes.
_AS_CHANNEL = {WsCloseCode.MESSAGE_TOO_BIG: (CloseCode.TOO_LARGE, "frame_size"),
               WsCloseCode.INVALID_DATA: (CloseCode.MALFORMED, "utf8")}


class _ChannelServerProtocol(ServerProtocol):
    """websockets' server side, failing a connection with the channel's close codes."""

    def fail(self, code: WsCloseCode | int, reason: str = "") -> None:
        super().fail(*_as_channel(code, reason))

    def send_close(self, code: WsCloseCode | int | None = None, reason: str = "") -> None:
        # uvicorn's own close of a text frame it cannot decode (1007) comes this way
        if code is None:
            super().send_close(code, reason)
        else:
            super().send_close(*_as_channel(code, reason))


def _as_channel(code: WsCloseCode | int, reason: str) -> tuple[int, str]:
    mapped = _AS_CHANNEL.get(int(code))  # type: ignore[call-overload] # IntEnum keys
    if mapped is None:
        return int(code), reason
    channel_code, rule = mapped
    words = reason or "the frame is not UTF-8 text"  # uvicorn's 1007 gives no reason
    return int(channel_code), f"{rule}: {words}".encode()[:123].decode("utf-8", errors="ignore")


class ChannelWebSocketProtocol(WebSocketsSansIOProtocol):
    """uvicorn's WebSocket protocol (its default, on ``websockets``' parser) with the channel's
    closes, which the application can tell (:data:`REFUSAL`)."""

    def __init__(self, config: Config, server_state: ServerState, app_state: dict[str, Any],
                 _loop: asyncio.AbstractEventLoop | None = None) -> None:
        super().__init__(config, server_state, app_state, _loop)
        # The parser uvicorn made, with its settings (limit, extensions) as they are: only how
        # it fails changes (the subclass adds no state).
        self.conn.__class__ = _ChannelServerProtocol
        self.refusal: dict[str, Any] = {}

    def handle_connect(self, event: Request) -> None:
        """As uvicorn's; the application's scope gets :data:`REFUSAL`."""
        super().handle_connect(event)
        scope = getattr(self, "scope", None)  # none when the handshake was refused
        if scope is not None:
            scope.setdefault("extensions", {})[REFUSAL] = self.refusal

    def handle_parser_exception(self) -> None:
        """As uvicorn's; a refusal of the channel's is kept in :data:`REFUSAL` first."""
        sent = self.conn.close_sent
        if sent is not None and sent.code in (int(c) for c, _ in _AS_CHANNEL.values()):
            rule, _, words = sent.reason.partition(": ")
            self.refusal.update(code=sent.code, rule=rule, words=words or rule)
        super().handle_parser_exception()


def uvicorn_settings(max_frame_bytes: int) -> dict[str, Any]:
    """The ``uvicorn.Config`` settings that make the server keep the channel's frame limit."""
    return {"ws": ChannelWebSocketProtocol, "ws_max_size": max_frame_bytes}


__all__ = ["REFUSAL", "ChannelWebSocketProtocol", "uvicorn_settings"]
