"""Remote agents: 20 agents outside the cluster, each a Python-client process on the WebSocket
channel, beside the same 20 agents packed in the cluster.

- remote: the driver's reach client sends by agent ID; each request goes to the agents' host
  (the RemoteHost actor of the gateway replica), over the replica's long poll and WebSocket to
  the agent's process (``python -m reach.remote``, the same as ``reach connect``, running
  ``reach.bench.agents:EchoAgent``), and its reply comes back the same way. The replica is a
  process of its own (this module with ``--channel``: uvicorn serving ``reach.remote.channel``,
  as a Ray Serve replica would), joined to the same Ray;
- packed: the same agent class spawned in a pool of 2 hosts (``reach.Packed``).

K callers (100 by default) each keep one request outstanding. Security is reach's default
(signed envelopes, audited calls, a bearer token and signed hellos on the channel). Prints msg/s
and p50/p95/p99 of each (and each one's rate every few seconds as it runs); checks the goal
(remote >= 400 msg/s with p95 <= 80 ms); writes ``remote_agent.json`` into the results folder
(:mod:`reach.bench.results`). Run: ``python -m reach.bench.remote_agent [--requests N]
[--clients K] [--agents A] [--quick] [--out DIR]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

import uvicorn
from starlette.applications import Starlette

import reach
from reach.bench.agents import Ask, EchoAgent, Said
from reach.bench.anchors import gcs_address
from reach.bench.callers import drive, free_port
from reach.bench.progress import PROGRESS_S
from reach.bench.quiet import settle
from reach.bench.results import add_out, write
from reach.ports.hosts import CallLimits
from reach.remote.channel import ChannelOptions, channel_routes
from reach.remote.host import start_remote_host
from reach.remote.wire import agent_secret
from reach.security.keys import Keyring
from reach.web.auth import token_for
from reach.web.options import GatewayOptions

TEXT = "你好，我的订单 A-1024 什么时候到？"
GOAL_MSGS_PER_S = 400
GOAL_P95_MS = 80.0
REMOTE_HOST = "reach.remote.bench"


# -- measuring ----------------------------------------------------------------------------------

async def measured(name: str, rt: reach.Runtime, ids: list[str], total: int,
                   clients: int) -> dict[str, Any]:
    """Waits for a quiet machine, warms up, then measures requests to ``ids``; says the figures."""

    async def send(i: int) -> int:
        reply = await rt.client.request(ids[i % len(ids)], Ask(n=i, text=TEXT), returns=Said)
        return reply.value.n

    await settle()
    await drive(send, min(total, clients * 4), clients)  # warm-up
    figures = await drive(send, total, clients, name)
    print(f"{name:<8} {figures['msgs_per_s']:>7.0f} msg/s   p50 {figures['p50_ms']:>6.1f} ms   "
          f"p95 {figures['p95_ms']:>6.1f} ms   p99 {figures['p99_ms']:>6.1f} ms"
          + (f"   ERRORS {figures['error_kinds']}" if figures["errors"] else ""), flush=True)
    return figures


# -- the gateway replica's part: the channel on uvicorn, in a process of its own -----------------

def serve_channel(port: int, address: str) -> None:
    """Joins the cluster, starts the RemoteHost and serves the channel until killed."""
    rt = reach.init(address=address, log_to_driver=False)
    host = start_remote_host(rt.cluster, REMOTE_HOST, CallLimits(), 10.0, 1000)
    app = Starlette(routes=channel_routes(rt.cluster, GatewayOptions(), host, ChannelOptions()))
    print("ready", flush=True)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off",
                ws_max_size=2 << 20)


async def wait_port(port: int, proc: subprocess.Popen[bytes], within_s: float = 120) -> None:
    """Waits until something listens on ``port`` (the channel process, ``proc``)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the channel process exited ({proc.returncode})")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            await asyncio.sleep(0.2)
    raise SystemExit(f"nothing listens on {port} after {within_s} s")


async def wait_online(rt: reach.Runtime, ids: list[str], within_s: float = 180) -> None:
    """Waits until every remote agent of ``ids`` is registered on the remote host, saying how
    many are every few seconds."""
    deadline = time.monotonic() + within_s
    registry = rt.cluster.registry()
    said = time.monotonic()
    while time.monotonic() < deadline:
        records = await asyncio.gather(*(registry.lookup(i) for i in ids))
        online = sum(1 for r in records if r is not None and r.host == REMOTE_HOST)
        if online == len(ids):
            return
        if time.monotonic() - said >= PROGRESS_S:
            print(f"  {online}/{len(ids)} remote agents connected", flush=True)
            said = time.monotonic()
        await asyncio.sleep(0.5)
    raise SystemExit(f"the remote agents did not all connect within {within_s} s")


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Starts the channel and the remote agents, measures them and the packed ones."""
    rt = reach.init(address=args.address, log_to_driver=False)
    await rt.agents()  # reach.init returns before its registry is up
    address = gcs_address()
    keyring_path = rt.cluster.security.keyring
    assert keyring_path is not None
    keyring = Keyring.load(keyring_path)
    port = free_port()
    env = {**os.environ, "REACH_KEYRING": keyring_path}
    channel = subprocess.Popen([sys.executable, "-m", "reach.bench.remote_agent", "--channel",
                                str(port), "--address", address], env=env)
    agents: list[subprocess.Popen[bytes]] = []
    ids = [f"remote-echo-{i}" for i in range(args.agents)]
    results: dict[str, Any] = {"agents": args.agents, "clients": args.clients,
                               "requests": args.requests, "cpus": os.cpu_count(),
                               "agent_nice": args.agent_nice}
    try:
        await wait_port(port, channel)
        token = token_for(keyring, "bench")
        for agent_id in ids:
            agents.append(subprocess.Popen(
                [sys.executable, "-m", "reach.remote", "--gateway", f"ws://127.0.0.1:{port}",
                 "reach.bench.agents:EchoAgent", "--id", agent_id, "--token", token,
                 "--secret", agent_secret(keyring.master, agent_id).hex()],
                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                preexec_fn=lambda: os.nice(args.agent_nice)))  # noqa: PLW1509 - one system call
        await wait_online(rt, ids)
        print(f"{args.agents} remote agents (Python-client processes) and the same agents "
              f"packed in the cluster; {args.clients} callers, {args.requests} requests each",
              flush=True)
        results["remote"] = await measured("remote", rt, ids, args.requests, args.clients)
        packed = [f"packed-echo-{i}" for i in range(args.agents)]
        await rt.spawn_many(EchoAgent, packed, placement=reach.Packed(pool="bench-rm", size=2))
        results["packed"] = await measured("packed", rt, packed, args.requests, args.clients)
    finally:
        for proc in agents:
            proc.terminate()  # each says goodbye
        for proc in agents:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
        channel.terminate()
        channel.wait(timeout=20)
        await rt.close()
    remote = results["remote"]
    results["goal"] = {"msgs_per_s": GOAL_MSGS_PER_S, "p95_ms": GOAL_P95_MS,
                       "met": remote["msgs_per_s"] >= GOAL_MSGS_PER_S
                       and remote["p95_ms"] <= GOAL_P95_MS and remote["errors"] == 0}
    print(f"goal (remote >= {GOAL_MSGS_PER_S} msg/s, p95 <= {GOAL_P95_MS:.0f} ms) "
          f"{'met' if results['goal']['met'] else 'NOT met'}")
    return results


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the remote-agent benchmark (or, with ``--channel``, the channel's process) and writes
    its figures; the exit status."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--agents", type=int, default=20)
    parser.add_argument("--address", default=None)
    parser.add_argument("--agent-nice", type=int, default=15,
                        help="niceness of the agents' processes (Ray's workers run at 15 here: "
                             "the agents, on this machine, compete with the cluster as peers)")
    parser.add_argument("--quick", action="store_true",
                        help="2,000 requests each; figures to the quick/ subfolder")
    parser.add_argument("--channel", type=int, default=None, help=argparse.SUPPRESS)
    add_out(parser)
    args = parser.parse_args(argv)
    if args.channel is not None:
        serve_channel(args.channel, args.address)
        return 0
    if args.quick:
        args.requests = 2000
    write(args, "remote_agent", asyncio.run(measure(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
