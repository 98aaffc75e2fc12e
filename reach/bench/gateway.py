"""reach from outside: A2A ``SendMessage`` through the gateway, beside the direct reach client.

20 agents packed in a pool of 2 hosts answer a small JSON payload with Chinese text; K callers
(100 by default) each keep one request outstanding, one after the other, on the same agents
(and first, one caller alone, 500 requests, for the cost of a call unqueued):

- direct:      the reach client of this driver, ``rt.client.request`` by agent ID;
- gateway:     A2A 1.0 ``SendMessage`` (JSON-RPC binding) over HTTP to ``/agents/<id>``, through
               Ray Serve's ingress and the gateway's replicas, with a bearer token: K keep-alive
               connections from this process (a lean asyncio client, reach.bench.httpload:
               httpx's pool would be the bottleneck);
- serve_echo:  the anchor: a trivial Ray Serve deployment on the same proxy that echoes the JSON
               body (what Serve's HTTP path costs with no A2A and no reach behind it);
- outbound:    a reach agent's view of a remote A2A agent: ``rt.client.request`` to the proxy
               agent ``rt.connect_a2a`` registered for an A2A server (the SDK's own server
               parts, in a process of its own), beside
- a2a_direct:  the same A2A server called directly over HTTP.

Everything shares this machine's cores (the HTTP clients too, as a load generator on the same
box would). Security is reach's default (signed envelopes, audited calls). Prints msg/s and
p50/p95/p99 for each (and each one's rate every few seconds as it runs), the gateway's added
latency (its p50 minus direct's) and the outbound proxy's; checks the goal (gateway >= 1,000
msg/s with p95 <= 80 ms); writes ``gateway.json`` into the results folder
(:mod:`reach.bench.results`). Run: ``python -m reach.bench.gateway [--requests N] [--clients K]
[--replicas R] [--address ADDR] [--quick] [--out DIR]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import httpx

import reach
from reach.bench.agents import Ask, EchoAgent, Said
from reach.bench.anchors import start_serve_echo
from reach.bench.callers import drive, free_port
from reach.bench.httpload import Connection
from reach.bench.quiet import settle
from reach.bench.results import add_out, write
from reach.security.keys import Keyring
from reach.web.auth import token_for

AGENTS = 20
TEXT = "你好，我的订单 A-1024 什么时候到？"
GOAL_MSGS_PER_S = 1000
GOAL_P95_MS = 80.0


def find_n(doc: Any) -> int | None:
    """The ``n`` of an answer anywhere in a JSON-RPC result (a task's artifact, a message)."""
    if isinstance(doc, dict):
        if isinstance(doc.get("n"), (int, float)) and "text" in doc:
            return int(doc["n"])
        items = list(doc.values())
    elif isinstance(doc, list):
        items = doc
    else:
        return None
    for item in items:
        found = find_n(item)
        if found is not None:
            return found
    return None


def send_message(i: int) -> dict[str, Any]:
    """An A2A 1.0 SendMessage JSON-RPC request whose data part is an ``Ask``."""
    return {"jsonrpc": "2.0", "id": i, "method": "SendMessage",
            "params": {"message": {"messageId": uuid.uuid4().hex, "role": "ROLE_USER",
                                   "parts": [{"data": {"n": i, "text": TEXT}}]}}}


# -- measuring ----------------------------------------------------------------------------------

async def measured(name: str, send: Callable[[int], Awaitable[int]], total: int,
                   clients: int) -> dict[str, Any]:
    """Waits for a quiet machine, warms up, then measures ``send`` with ``clients`` callers;
    says the figures."""
    await settle()
    await drive(send, min(total, clients * 4), clients)  # warm-up
    figures = await drive(send, total, clients, name)
    show(name, figures)
    return figures


def show(name: str, r: dict[str, Any]) -> None:
    """Prints one contestant's figures."""
    print(f"{name:<14} {r['msgs_per_s']:>7.0f} msg/s   p50 {r['p50_ms']:>6.1f} ms   "
          f"p95 {r['p95_ms']:>6.1f} ms   p99 {r['p99_ms']:>6.1f} ms"
          + (f"   ERRORS {r['error_kinds']}" if r["errors"] else ""), flush=True)


class Connections:
    """K keep-alive connections to ``base``, one per caller (caller ``i % K`` uses its own);
    every request says it speaks A2A 1.0 (the version header)."""

    def __init__(self, base: str, clients: int, headers: dict[str, str] | None = None) -> None:
        head = {"A2A-Version": "1.0", **(headers or {})}
        self.free = [Connection(base, head) for _ in range(clients)]

    async def post(self, path: str, doc: Any) -> Any:
        """POSTs ``doc`` on a free connection; the decoded answer."""
        conn = self.free.pop()
        try:
            return await conn.post_json(path, doc)
        finally:
            self.free.append(conn)

    def close(self) -> None:
        """Closes every connection."""
        for conn in self.free:
            conn.close()


# -- contestants --------------------------------------------------------------------------------

async def run_direct(rt: reach.Runtime, ids: list[str], total: int, clients: int
                     ) -> dict[str, Any]:
    """The direct reach client's turn."""
    name = "direct" if clients > 1 else "direct_alone"

    async def send(i: int) -> int:
        reply = await rt.client.request(ids[i % AGENTS], Ask(n=i, text=TEXT), returns=Said)
        return reply.value.n

    return await measured(name, send, total, clients)


def answer(body: Any) -> int:
    """The ``n`` answered in a JSON-RPC response (raises on an error response)."""
    if "error" in body:
        raise RuntimeError(f"JSON-RPC error: {body['error']}")
    n = find_n(body.get("result"))
    if n is None:
        raise RuntimeError(f"no answer in {str(body)[:300]}")
    return n


async def run_gateway(url: str, token: str, ids: list[str], total: int, clients: int
                      ) -> dict[str, Any]:
    """The gateway's turn: A2A SendMessage over HTTP, with a bearer token."""
    http = Connections(url, clients, {"Authorization": f"Bearer {token}"})
    try:
        async def send(i: int) -> int:
            return answer(await http.post(f"/agents/{ids[i % AGENTS]}", send_message(i)))

        return await measured("gateway" if clients > 1 else "gateway_alone", send, total,
                              clients)
    finally:
        http.close()


async def run_serve_echo(url: str, total: int, clients: int) -> dict[str, Any]:
    """The anchor's turn: a trivial Serve echo on the same proxy."""
    http = Connections(url, clients)
    try:
        async def send(i: int) -> int:
            body = await http.post("/bench-echo", send_message(i))
            return int(body["params"]["message"]["parts"][0]["data"]["n"])

        return await measured("serve_echo", send, total, clients)
    finally:
        http.close()


A2A_SERVER = '''
import sys, uvicorn
from starlette.applications import Starlette
from a2a.server.agent_execution import AgentExecutor
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import a2a_pb2 as pb
from google.protobuf.json_format import MessageToDict, ParseDict

port = int(sys.argv[1])
url = f"http://127.0.0.1:{port}"

class Echo(AgentExecutor):
    async def execute(self, context, event_queue):
        data = MessageToDict(context.message.parts[0].data)
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        part = pb.Part()
        ParseDict(data, part.data)
        await updater.add_artifact([part])
        await updater.complete()

    async def cancel(self, context, event_queue):
        raise RuntimeError("nothing to cancel")

card = pb.AgentCard(
    name="bench-echo", description="Says back what it was told.", version="1.0",
    supported_interfaces=[pb.AgentInterface(url=url, protocol_binding="JSONRPC",
                                            protocol_version="1.0")],
    capabilities=pb.AgentCapabilities(streaming=False),
    default_input_modes=["application/json"], default_output_modes=["application/json"],
    skills=[pb.AgentSkill(id="bench.echo", name="echo", description="echo",
                          tags=["bench.echo"])])
handler = DefaultRequestHandler(Echo(), InMemoryTaskStore(), card)
app = Starlette(routes=[*create_agent_card_routes(card), *create_jsonrpc_routes(handler, "/")])
uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
'''


async def start_a2a_server() -> tuple[subprocess.Popen[bytes], str]:
    """Starts the SDK's own A2A echo server in a process of its own; the process and its URL."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", A2A_SERVER, str(port)])
    url = f"http://127.0.0.1:{port}"
    async with httpx.AsyncClient() as http:
        for _ in range(200):
            try:
                if (await http.get(f"{url}/.well-known/agent-card.json")).status_code == 200:
                    return proc, url
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.1)
    proc.kill()
    raise RuntimeError("the A2A server did not start")


async def run_outbound(rt: reach.Runtime, total: int, clients: int) -> dict[str, Any]:
    """The outbound proxy's turn, then the same A2A server called directly."""
    proc, url = await start_a2a_server()
    try:
        record = await rt.connect_a2a(url)
        out: dict[str, Any] = {}

        async def via_proxy(i: int) -> int:
            reply = await rt.client.request(record.agent_id, {"data": {"n": i, "text": TEXT}},
                                            "a2a.message@1.0")
            n = find_n(reply.value.model_dump(mode="json"))
            if n is None:
                raise RuntimeError(f"no answer in {reply.value}")
            return n

        out["outbound"] = await measured("outbound", via_proxy, total, clients)
        http = Connections(url, clients)
        try:
            async def direct(i: int) -> int:
                return answer(await http.post("/", send_message(i)))

            out["a2a_direct"] = await measured("a2a_direct", direct, total, clients)
        finally:
            http.close()
        return out
    finally:
        proc.terminate()
        proc.wait()


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Every contestant in turn; their figures."""
    rt = reach.init(address=args.address, log_to_driver=False)
    await rt.agents()  # reach.init returns before its registry is up
    ids = [f"echo-{i}" for i in range(AGENTS)]
    await rt.spawn_many(EchoAgent, ids, placement=reach.Packed(pool="bench-gw", size=2))
    port = free_port()
    url = rt.start_gateway(port=port, replicas=args.replicas)
    keyring = rt.cluster.security.keyring
    assert keyring is not None
    token = token_for(Keyring.load(keyring), "bench")
    start_serve_echo()
    print(f"{AGENTS} agents (packed), {args.clients} callers, {args.requests} requests each; "
          f"gateway {url} with {args.replicas} replica(s)", flush=True)
    results: dict[str, Any] = {"agents": AGENTS, "clients": args.clients,
                               "replicas": args.replicas, "cpus": os.cpu_count()}
    try:
        # One caller, one request at a time: what a call through the gateway costs, unqueued.
        alone = min(args.requests, 500)
        results["direct_alone"] = await run_direct(rt, ids, alone, 1)
        results["gateway_alone"] = await run_gateway(url, token, ids, alone, 1)
        results["direct"] = await run_direct(rt, ids, args.requests, args.clients)
        results["gateway"] = await run_gateway(url, token, ids, args.requests, args.clients)
        results["serve_echo"] = await run_serve_echo(url, args.requests, args.clients)
        if not args.no_outbound:
            results.update(await run_outbound(rt, args.requests, args.clients))
    finally:
        rt.stop_gateway()
        await rt.close()
    gw, direct = results["gateway"], results["direct"]
    results["gateway_added_p50_ms"] = round(gw["p50_ms"] - direct["p50_ms"], 1)
    results["gateway_added_alone_p50_ms"] = round(
        results["gateway_alone"]["p50_ms"] - results["direct_alone"]["p50_ms"], 1)
    results["goal"] = {"msgs_per_s": GOAL_MSGS_PER_S, "p95_ms": GOAL_P95_MS,
                       "met": gw["msgs_per_s"] >= GOAL_MSGS_PER_S and gw["p95_ms"] <= GOAL_P95_MS}
    print(f"one caller alone: the gateway adds {results['gateway_added_alone_p50_ms']} ms at p50 "
          "over the direct client")
    print(f"gateway adds {results['gateway_added_p50_ms']} ms at p50 over the direct client; "
          f"goal (>= {GOAL_MSGS_PER_S} msg/s, p95 <= {GOAL_P95_MS:.0f} ms) "
          f"{'met' if results['goal']['met'] else 'NOT met'}")
    if "outbound" in results:
        results["outbound_added_p50_ms"] = round(
            results["outbound"]["p50_ms"] - results["a2a_direct"]["p50_ms"], 1)
        print(f"the outbound proxy adds {results['outbound_added_p50_ms']} ms at p50 over "
              "calling the A2A server directly")
    return results


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the gateway benchmark and writes its figures; the exit status."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument("--address", default=None)
    parser.add_argument("--no-outbound", action="store_true", help="skip the outbound proxy")
    parser.add_argument("--quick", action="store_true",
                        help="2,000 requests each; figures to the quick/ subfolder")
    add_out(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.requests = 2000
    write(args, "gateway", asyncio.run(measure(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
