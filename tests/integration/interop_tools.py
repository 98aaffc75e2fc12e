"""The A2A programs of interop/js (on the official JavaScript SDK, @a2a-js/sdk) as the tests run
them: their npm packages installed from the committed lock file, the Node refund agent in a
process of its own, and one run of the Node client.

A test using them is marked :data:`node_tools.needs_node`.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
from node_tools import NODE, NPM
from ray_helpers import free_port

#: The folder of the JavaScript programs and their package.json and lock file.
JS = Path(__file__).resolve().parents[2] / "interop" / "js"


def install_packages() -> Path:
    """interop/js/node_modules, installed from the lock file (``npm ci``) when missing."""
    installed = JS / "node_modules" / "@a2a-js" / "sdk" / "package.json"
    if not installed.exists():
        assert NPM is not None
        done = subprocess.run([NPM, "ci", "--no-audit", "--no-fund"], cwd=JS, check=False,
                              capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            pytest.fail(f"npm ci failed in {JS} (exit {done.returncode}):\n"
                        f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return JS / "node_modules"


class NodeRemote:
    """The Node refund agent in a process of its own, on a fixed port (kept across restarts).

    ``seen`` collects what it logged of each message it took (the reach trace ID too), and
    ``received`` the ``traceparent`` header of each JSON-RPC call (None for a call without one).
    """

    def __init__(self) -> None:
        self.port = free_port()
        self.seen: list[dict[str, Any]] = []
        self.received: list[str | None] = []
        self._proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        assert NODE is not None
        proc = self._proc = await asyncio.create_subprocess_exec(
            NODE, str(JS / "refund_agent.mjs"), "--port", str(self.port), cwd=JS,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        listening = asyncio.get_running_loop().create_future()
        self._reader = asyncio.get_running_loop().create_task(self._read(proc, listening))
        await asyncio.wait_for(listening, 30)

    async def _read(self, proc: asyncio.subprocess.Process, listening: asyncio.Future[int],
                    ) -> None:
        assert proc.stdout is not None
        lines = []
        async for raw in proc.stdout:
            line = raw.decode("utf-8", "replace").strip()
            lines.append(line)
            try:
                said = json.loads(line)
            except ValueError:
                continue
            if "listening" in said and not listening.done():
                listening.set_result(said["listening"])
            elif "seen" in said:
                self.seen.append(said["seen"])
            elif "received" in said:
                self.received.append(said["received"]["traceparent"])
        if not listening.done():
            listening.set_exception(RuntimeError("the Node agent exited before listening:\n"
                                                 + "\n".join(lines[-20:])))

    async def kill(self) -> None:
        """SIGKILL, as a crash would."""
        if self._proc is not None and self._proc.returncode is None:
            self._proc.send_signal(signal.SIGKILL)
            await self._proc.wait()
        if self._reader is not None:
            await self._reader
        self._proc = self._reader = None


async def node_client(*args: str) -> dict[str, Any]:
    """Runs call_gateway.mjs (the SDK's client) with ``args``; what it printed."""
    assert NODE is not None
    proc = await asyncio.create_subprocess_exec(
        NODE, str(JS / "call_gateway.mjs"), *args, cwd=JS,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, f"{out.decode()}\n{err.decode()}"
    result: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return result
