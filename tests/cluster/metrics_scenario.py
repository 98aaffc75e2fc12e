"""Runs traffic on a local Ray that exports metrics, then prints what its Prometheus endpoint shows
of reach's metrics (one JSON object on the last line). Used by test_metrics.py."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import sys
import time
import urllib.request
from collections.abc import Awaitable, Callable
from typing import Any

import ray
from pydantic import BaseModel

import reach
from reach._runtime.metrics import metrics


@reach.schema("metrics.ping@1.0")
class Ping(BaseModel):
    n: int


class Pong(reach.Agent):
    capabilities = ("metrics.pong",)

    @reach.handler(Ping, returns=Ping)
    async def pong(self, ctx: reach.Context, p: Ping) -> Ping:
        if p.n < 0:
            raise reach.AgentNotFound("a refusal, on purpose", details={"n": p.n})
        return Ping(n=p.n + 1)


#: Tasks submitted through the supervisor, and its actor name (as the tasks gauge labels it).
TASKS = 5
SUPERVISOR = "reach.sup.metrics-sup"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        body: str = resp.read().decode("utf-8")
        return body


def reach_lines(text: str) -> dict[str, float]:
    """Sums each reach metric's samples by name and labels, as Prometheus shows them."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        m = re.match(r"^(ray_reach_[a-z_]+)(\{[^}]*\})? ([0-9.eE+-]+)$", line)
        if m:
            labels = ",".join(sorted(
                p for p in (m.group(2) or "{}")[1:-1].split(",")
                if p and not p.startswith(("Component=", "NodeAddress=", "SessionName=",
                                           "Version=", "WorkerId=", "JobId=", "otel_"))))
            key = f"{m.group(1)}{{{labels}}}"
            found[key] = found.get(key, 0.0) + float(m.group(3))
    return found


async def traffic(rt: Any) -> None:
    await rt.spawn_many(Pong, [f"pong-{i}" for i in range(4)], placement=reach.Packed(size=1))
    client, registry = rt.client, rt.cluster.registry()
    for i in range(200):
        await client.request(f"pong-{i % 4}", Ping(n=i))
    await asyncio.gather(*(client.request(f"pong-{i % 4}", Ping(n=i)) for i in range(300)))
    for _ in range(3):
        with contextlib.suppress(reach.AgentNotFound):
            await client.request("pong-0", Ping(n=-1))
    # A supervised agent whose process is killed once: a restart; then tasks through it.
    sup = await rt.supervise(reach.SupervisorSpec("metrics-sup", children=[
        reach.ChildSpec(Pong, "sup-pong")]))
    first = await registry.lookup("sup-pong")
    assert first is not None
    ray.kill(rt.cluster.host(first.host).handle)

    async def restarted() -> bool:
        rec = await registry.lookup("sup-pong")
        return rec is not None and rec.online and rec.epoch > first.epoch

    await until(restarted, "sup-pong was not restarted")
    for i in range(TASKS):
        await (await sup.submit("sup-pong", Ping(n=i))).result()
    # An agent whose host dies without a supervisor: what is sent to it becomes a dead letter.
    doomed = await rt.spawn(Pong, "doomed")
    host = rt.cluster.host(doomed.host)
    ray.kill(host.handle)

    async def dead() -> bool:
        try:
            await host.count()
        except reach.AgentUnavailable:
            return True
        return False

    await until(dead, "the doomed host did not die")
    for _ in range(3):
        with contextlib.suppress(reach.ReachError):
            await rt.client.notify("doomed", Ping(n=1))
    await rt.close()  # they fail once they leave: let them, before this loop ends


async def until(check: Callable[[], Awaitable[bool]], what: str, timeout_s: float = 60.0) -> None:
    """Polls ``check`` until it is true; raises after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not await check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} within {timeout_s:.0f} s")
        await asyncio.sleep(0.1)


def main() -> int:
    port = free_port()
    # "local": a Ray of its own, even if another one runs on this machine.
    rt = reach.init("local", _metrics_export_port=port, include_dashboard=False,
                    log_to_driver=False)
    asyncio.run(traffic(rt))
    metrics.flush()  # this driver's counters (hosts flush their own each second)
    wanted = ("ray_reach_messages", "ray_reach_requests", "ray_reach_request_latency_seconds",
              "ray_reach_batch_envelopes", "ray_reach_registry_agents", "ray_reach_dead_letters",
              "ray_reach_restarts", "ray_reach_tasks")
    deadline = time.monotonic() + 90
    found: dict[str, float] = {}
    while time.monotonic() < deadline:
        try:
            found = reach_lines(scrape(port))
        except OSError:
            found = {}
        # Every metric is there, and the tasks gauge has its final value (gauges are exported
        # every few seconds: an earlier scrape may still show the tasks running).
        done = found.get(f'ray_reach_tasks{{state="completed",supervisor="{SUPERVISOR}"}}')
        if all(any(k.startswith(w) for k in found) for w in wanted) and done == TASKS:
            break
        time.sleep(2)
    print(json.dumps(found, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
