"""Running an ordinary :class:`reach.Agent` subclass as a remote agent, over the WebSocket wire.

:func:`serve_agent` dials the gateway with ``websockets`` and has a
:class:`~reach.remote.agent_runner.RemoteAgentRunner` speak the wire (:mod:`reach.remote.wire`)
on the connection: it says hello, hands each request to the agent's handler and sends back what
it answers, and lets handlers call other agents through their
:class:`~reach.remote.remote_context.RemoteContext` (by ID, by capability, notifications). A
broken connection is dialled again (a reconnect within the gateway's grace period is the agent's
restart); requests the agent was handling when the connection broke are answered on the next
connection.

Nothing here imports Ray. Example::

    await serve_agent("wss://gateway.example:8000", OrderAgent, "order-remote-1",
                      token="partner.9f2c...", secret=bytes.fromhex("..."))
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake

from reach._runtime.trace_setup import install
from reach._runtime.tracer import TRACING
from reach.agent import Agent
from reach.errors import ConnectionEnded
from reach.remote.agent_runner import Connection, RemoteAgentRunner, declaration_of
from reach.remote.remote_context import RemoteContext
from reach.remote.wire import CONNECT_PATH, FINAL_CODES
from reach.tracing import Tracing, tracing_from

log = logging.getLogger("reach.remote")


class _Socket:
    """``websockets``' client connection as a :class:`Connection`."""

    def __init__(self, ws: Any) -> None:
        self._ws = ws

    async def send(self, text: str) -> None:
        try:
            await self._ws.send(text)
        except ConnectionClosed as exc:
            raise _ended(exc) from None

    async def recv(self) -> str:
        try:
            data = await self._ws.recv()
        except ConnectionClosed as exc:
            raise _ended(exc) from None
        return data if isinstance(data, str) else data.decode("utf-8")

    async def close(self, code: int = 1000, reason: str = "") -> None:
        await self._ws.close(code, reason)


def _ended(exc: Any) -> ConnectionEnded:
    rcvd = getattr(exc, "rcvd", None)
    code = rcvd.code if rcvd is not None else 1006
    reason = rcvd.reason if rcvd is not None else "connection lost"
    return ConnectionEnded(f"the connection closed ({code}): {reason}",
                           details={"close": code, "reason": reason})


def connect_url(gateway: str) -> str:
    """The channel's URL from a gateway's: ``http(s)`` becomes ``ws(s)``, and the path is added
    when the URL has none."""
    url = gateway.rstrip("/")
    for plain, secure in (("http://", "ws://"), ("https://", "wss://")):
        if url.startswith(plain):
            url = url.replace(plain, secure, 1)
    _, _, rest = url.partition("://")
    return url if "/" in rest else f"{url}{CONNECT_PATH}"


async def serve_agent(gateway: str, cls: type[Agent], agent_id: str, *, token: str | None,
                      secret: bytes | None, args: tuple[Any, ...] = (),
                      kwargs: dict[str, Any] | None = None, reconnect: bool = True,
                      stop: asyncio.Event | None = None,
                      on_connected: Callable[[RemoteAgentRunner], None] | None = None,
                      tracing: Tracing | bool | None = None) -> int:
    """Runs ``cls(*args, **kwargs)`` as the remote agent ``agent_id`` through a gateway, until
    ``stop`` is set (then it says goodbye) or the gateway closes with a final code.

    A broken connection is dialled again with backoff (0.05 s doubling to 2 s): the gateway takes
    it as the agent's restart when it comes within its grace period.

    With ``tracing`` (a :class:`~reach.tracing.Tracing`, ``True``, or by default the
    ``OTEL_*`` environment variables naming an endpoint), each handler run is a span continuing
    its request's trace and each request it makes a child span, exported by OTLP/HTTP (outside
    the cluster there is no trace store to send to).

    Returns:
        The last close code.

    Raises:
        AuthError: the gateway refused the token or the hello's signature.
        ConfigError: ``tracing`` is asked for and the SDK is not installed (``reach[otel]``).
    """
    traced = tracing_from(tracing)
    if traced is not None and TRACING.tracer is None:
        install(replace(traced, store=False), agent_id, None)
    agent = cls(*args, **(kwargs or {}))
    runner = RemoteAgentRunner(agent, agent_id, secret)
    await agent.on_start()
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    url, delay, code = connect_url(gateway), 0.05, 1006
    stopping = stop or asyncio.Event()
    try:
        while not stopping.is_set():
            try:
                # No per-message deflate: envelopes are small JSON, and compressing each
                # frame cost a fifth of the client's and the gateway's time per message.
                async with connect(url, additional_headers=headers, max_size=None,
                                   open_timeout=10, ping_interval=20, compression=None) as ws:
                    delay = 0.05
                    code = await _serve_until(runner, _Socket(ws), stopping, on_connected)
            except (OSError, InvalidHandshake, TimeoutError) as exc:
                log.warning("%s could not reach %s: %s", agent_id, url, exc)
                code = 1006
            if code in FINAL_CODES or not reconnect:
                return code
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), delay)
            delay = min(delay * 2, 2.0)
        return code
    finally:
        await agent.on_stop()


async def _serve_until(runner: RemoteAgentRunner, conn: Connection, stop: asyncio.Event,
                       on_connected: Callable[[RemoteAgentRunner], None] | None) -> int:
    serving = asyncio.ensure_future(runner.run(conn))
    stopped = asyncio.ensure_future(stop.wait())
    connected = asyncio.ensure_future(runner.wait_connected())
    try:
        if on_connected is not None:
            done, _ = await asyncio.wait({serving, connected}, return_when=asyncio.FIRST_COMPLETED)
            if connected in done:
                on_connected(runner)
        done, _ = await asyncio.wait({serving, stopped}, return_when=asyncio.FIRST_COMPLETED)
        if serving in done:
            return int(serving.result())
        await runner.goodbye("stopped")
        return int(await serving)
    finally:
        for task in (stopped, connected):
            task.cancel()


__all__ = ["Connection", "ConnectionEnded", "RemoteAgentRunner", "RemoteContext", "connect_url",
           "declaration_of", "serve_agent"]
