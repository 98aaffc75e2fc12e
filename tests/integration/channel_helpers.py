"""A gateway replica's channel for the integration tests, and a remote agent's process: the
channel served by uvicorn in a thread of the test process, configured as reach configures a
replica's server (its frame limit kept by the server), its RemoteHost a Ray actor."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from ray_helpers import free_port

from reach.ports.hosts import CallLimits
from reach.remote.channel import ChannelOptions, channel_routes
from reach.remote.channel_server import uvicorn_settings
from reach.remote.host import start_remote_host
from reach.remote.wire import (
    DEFAULT_MAX_FRAME_BYTES,
    Declaration,
    agent_secret,
    frame_text,
    make_hello,
)
from reach.web.auth import token_for
from reach.web.options import GatewayOptions

ROOT = Path(__file__).resolve().parents[2]
#: The remote host of the tests' replica.
HOST = "reach.remote.test-replica"
GRACE_S = 20.0


class Channel:
    """The channel on uvicorn in a thread of its own (the gateway replica's part), and its
    RemoteHost on Ray.

    Args:
        rt: The session's runtime (signing on).
        host: The remote host's name (one per replica).
        token_name: Whose bearer token the tests connect with.
    """

    def __init__(self, rt: Any, host: str = HOST, token_name: str = "remote-tests") -> None:
        import uvicorn
        from starlette.applications import Starlette

        self.rt = rt
        guard = rt.cluster.guard()
        assert guard is not None, "the integration runtime signs"
        self.master = guard.keyring.master
        self.token = token_for(guard.keyring, token_name)
        self.host = start_remote_host(rt.cluster, host, CallLimits(), GRACE_S, 1000)
        app = Starlette(routes=channel_routes(rt.cluster, GatewayOptions(), self.host,
                                              ChannelOptions(grace_s=GRACE_S)))
        self.port = free_port()
        self.url = f"ws://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(
            app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="off",
            **uvicorn_settings(DEFAULT_MAX_FRAME_BYTES)))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()

    def secret(self, agent_id: str) -> str:
        """The agent's signing secret, as hex."""
        return agent_secret(self.master, agent_id).hex()

    def hello(self, agent_id: str, capabilities: tuple[str, ...] = ("probe.any",)) -> str:
        """A fresh, signed hello frame for ``agent_id``."""
        return frame_text(make_hello(agent_id, Declaration(capabilities=capabilities),
                                     agent_secret(self.master, agent_id),
                                     now_ms=round(time.time() * 1000),
                                     nonce=os.urandom(16).hex()))

    def close(self) -> None:
        """Stops the server and the remote host."""
        self.server.should_exit = True
        self.thread.join(timeout=10)
        with contextlib.suppress(Exception):
            self.rt.cluster.kill(self.host)


class Process:
    """A remote agent's process; ``events`` collects the JSON lines it prints."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.argv = argv
        self.env = env
        self.events: list[dict[str, Any]] = []
        self.proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None

    async def start(self) -> Process:
        self.proc = await asyncio.create_subprocess_exec(
            *self.argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            env={**os.environ, **(self.env or {})}, cwd=ROOT)
        self._reader = asyncio.ensure_future(self._read())
        return self

    async def _read(self) -> None:
        assert self.proc is not None
        assert self.proc.stdout is not None
        async for line in self.proc.stdout:
            with contextlib.suppress(ValueError):
                self.events.append(json.loads(line))

    def welcomes(self) -> list[dict[str, Any]]:
        return [e["welcome"] for e in self.events if "welcome" in e]

    async def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()

    async def stop(self) -> int:
        assert self.proc is not None
        if self.proc.returncode is None:
            self.proc.terminate()
        return await asyncio.wait_for(self.proc.wait(), 20)
