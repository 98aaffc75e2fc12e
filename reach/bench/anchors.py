"""The plain-Ray anchors the benchmarks compare reach with, and the benchmarks' few direct uses
of Ray: the one module of ``reach.bench`` that imports Ray.

An anchor is what a user without reach would write: plain async Ray actors (the seed scenario's
and the I/O-bound scenario's raw contestants), an actor restarted by Ray itself (the restart
benchmark's), a trivial Ray Serve application (the gateway benchmark's). The rest of
``reach.bench`` reaches Ray through reach's own API.
"""

from __future__ import annotations

import asyncio
import os
import secrets
from typing import Any

import ray
from ray import serve
from starlette.requests import Request

from reach.bench.agents import CALL_S, crash_now


def ray_actor(cls: type, **options: Any) -> Any:
    """``ray.remote(**options)(cls)``, typed as what it is used as here: an actor class whose
    handles' methods have ``.remote`` (Ray's own stubs know neither every option nor that)."""
    remote: Any = ray.remote
    return remote(**options)(cls) if options else remote(cls)


class RawActor:
    """The seed scenario's anchor: a plain async Ray actor doing what ItemEcho does."""

    async def echo(self, item: dict[str, Any]) -> dict[str, Any]:
        """The item, its quantity doubled."""
        return {"sku": item["sku"], "text": item["text"], "qty": item["qty"] * 2}


#: :class:`RawActor` as a Ray actor class.
raw_actor = ray_actor(RawActor)


class RawAgent:
    """The I/O-bound scenario's anchor: a plain async Ray actor doing what SlowAgent does."""

    async def handle(self, prompt: dict[str, Any]) -> dict[str, Any]:
        """The prompt in capitals, after :data:`CALL_S`."""
        await asyncio.sleep(CALL_S)
        return {"n": prompt["n"], "text": prompt["text"].upper()}


#: :class:`RawAgent` as a Ray actor class, as many requests at once as come.
raw_agent = ray_actor(RawAgent, max_concurrency=10_000)


class RayVictim:
    """Ray's own restart, the anchor: the same two methods on a plain async actor."""

    def __init__(self) -> None:
        self.token = secrets.token_hex(8)

    async def ping(self) -> tuple[int, str]:
        """This incarnation's (pid, token)."""
        return os.getpid(), self.token

    async def crash(self, mark: str) -> None:
        """Ends this process."""
        crash_now(mark)


#: :class:`RayVictim` as a Ray actor class that Ray restarts after every death.
ray_victim = ray_actor(RayVictim, max_restarts=-1)


def connect(address: str | None) -> None:
    """Joins (or starts) a Ray as a plain driver, with no reach runtime: raw Ray's rounds."""
    ray.init(address=address, log_to_driver=False)


def disconnect() -> None:
    """Leaves the Ray :func:`connect` joined."""
    ray.shutdown()


def kill(actor: Any) -> None:
    """Ends a plain Ray actor (no restart)."""
    ray.kill(actor, no_restart=True)


def gcs_address() -> str:
    """The address of the Ray this driver is connected to, for drivers started after it."""
    return str(ray.get_runtime_context().gcs_address)


class _Echo:
    """Says back the JSON body it is sent."""

    async def __call__(self, request: Request) -> Any:
        return await request.json()


def start_serve_echo() -> None:
    """A trivial Ray Serve application at /bench-echo on the running proxy (the gateway's
    anchor: what Serve's HTTP path costs with no A2A and no reach behind it)."""
    deployment: Any = serve.deployment  # its stubs do not know that the class gains .bind
    echo = deployment(max_ongoing_requests=1000, ray_actor_options={"num_cpus": 0})(_Echo)
    serve.run(echo.bind(), name="bench-echo", route_prefix="/bench-echo")
