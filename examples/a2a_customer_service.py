"""Customer service reached from outside over A2A 1.0, with a Node agent as its refund desk.

Two ways across the edge of a reach cluster, both on the A2A protocol's official SDKs:

- **in**: the script acts as an outside A2A client (the Python ``a2a-sdk``: card resolver, client
  factory, bearer-token interceptor) and asks the customer-service router ``router-1`` its
  questions through reach's A2A gateway;
- **out**: refunds are handled by a remote A2A agent, the Node one in ``interop/js`` (written on
  ``@a2a-js/sdk``), which ``rt.connect_a2a`` makes a reach agent.

The router and its order and logistics agents are those of the demo
(:mod:`reach.tools.customer_service`), unchanged; answers are deterministic (no model calls). For
each question the script prints who answered and the reach trace ID the gateway returned in the
task's metadata. It runs on a Ray of its own, started for the run and stopped at the end (the
Node agent and the client run on this machine too)::

    python examples/a2a_customer_service.py

It needs ``node`` and ``npm`` (Node 20 or later; ``npm ci`` installs the SDK into
``interop/js/node_modules`` on first use); without them it says so and exits with 0 ("skipped").
It ends with ``answered N/N`` and exits with 0 only when every question was answered by the right
agent: the refunds by the Node agent.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import shutil
import socket
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
from a2a.client import (
    A2ACardResolver,
    AuthInterceptor,
    ClientCallContext,
    ClientConfig,
    ClientFactory,
    CredentialService,
)
from a2a.client.client import Client
from a2a.types.a2a_pb2 import Message, Part, Role, SendMessageRequest, Task
from google.protobuf.json_format import MessageToDict, ParseDict
from google.protobuf.struct_pb2 import Value

import reach
from reach.a2a.client.models import A2AMessage, A2AReply
from reach.tools.customer_service import ORDERS, QUESTIONS, Answer, Question, classify, spawn_agents
from reach.web.auth import token_for

JS = Path(__file__).resolve().parents[1] / "interop" / "js"
ROUTER = "router-1"
NODE_AGENT = "node-refunds"  # the reach ID of the Node agent's proxy
ORDER_ID = re.compile(r"\b[A-Z]-\d{4}\b")


class RefundAdapter(reach.Agent):
    """Holds ``refund.request`` for the router and passes each question on to the Node agent.

    Why it exists: the router asks whoever holds ``refund.request`` with a ``cs.question`` and
    expects a ``cs.answer`` back; the remote agent speaks A2A messages (its proxy reads
    ``a2a.message`` and answers ``a2a.reply``). The adapter translates, both ways, so that
    neither the router nor the remote agent has to change.
    """

    capabilities = ("refund.request",)
    description = "Passes refund questions on to the remote Node refund agent (A2A)."

    @reach.handler(Question, returns=Answer)
    async def answer(self, ctx: reach.Context, q: Question) -> Answer:
        found = ORDER_ID.search(q.text)
        order = ORDERS.get(found.group(0)) if found else None
        data = {"order_id": found.group(0), "amount": order["total"]} if found and order else None
        reply = await ctx.request(NODE_AGENT, A2AMessage(text=q.text, data=data),
                                  returns=A2AReply)
        return Answer(text=reply.value.text, answered_by=reply.envelope.sender)


def free_port(start: int) -> int:
    """The first port from ``start`` free on loopback. (Not one the OS picks: those come from
    the ephemeral range, where Ray's processes may take it before it is bound.)"""
    for port in range(start, start + 100):
        with socket.socket() as s, contextlib.suppress(OSError):
            s.bind(("127.0.0.1", port))
            return port
    raise RuntimeError(f"no free port in {start}-{start + 99}")


@contextlib.asynccontextmanager
async def node_refund_agent(node: str, npm: str) -> AsyncIterator[str]:
    """Runs ``interop/js/refund_agent.mjs`` until the block ends; yields its URL."""
    if not (JS / "node_modules" / "@a2a-js" / "sdk" / "package.json").exists():
        print(f"installing the Node agent's packages (npm ci in {JS.name}/)...")
        done = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=JS, check=False,
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"npm ci failed in {JS}:\n{done.stderr[-2000:]}")
    port = free_port(41241)
    proc = await asyncio.create_subprocess_exec(
        node, "refund_agent.mjs", "--port", str(port), cwd=JS,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    assert proc.stdout is not None
    log: asyncio.Task[bytes] | None = None
    try:  # it prints {"listening": port} once it is ready, then a line per message it takes
        async with asyncio.timeout(30):
            while b'"listening"' not in (line := await proc.stdout.readline()):
                if not line:
                    raise RuntimeError("the Node refund agent exited before listening")
        log = asyncio.create_task(proc.stdout.read())  # the rest of its output, unread
        yield f"http://127.0.0.1:{port}"
    finally:
        if proc.returncode is None:
            proc.terminate()
        await proc.wait()
        if log is not None:
            await log


class Bearer(CredentialService):
    """Gives the SDK's auth interceptor our bearer token for the scheme the card declares."""

    def __init__(self, token: str) -> None:
        self.token = token

    async def get_credentials(self, security_scheme_name: str,
                              context: ClientCallContext | None) -> str | None:
        return self.token


async def ask(client: Client, q: Question) -> tuple[Answer, str]:
    """Sends a question as an A2A message (a data part: the router's cs.question payload);
    the answer (the task's artifact) and the reach trace ID (the task's metadata)."""
    message = Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER,
                      parts=[Part(data=ParseDict(q.model_dump(), Value()))])
    task = Task()
    async for response in client.send_message(SendMessageRequest(message=message)):
        task = response.task
    answer = Answer.model_validate(MessageToDict(task.artifacts[0].parts[0].data))
    return answer, MessageToDict(task.metadata)["reach"]["trace_id"]


async def ask_from_outside(url: str, token: str) -> list[bool]:
    """Asks every question through the gateway, as any A2A client would; True where the
    right agent answered."""
    async with httpx.AsyncClient(timeout=60.0) as http:
        card = await A2ACardResolver(http, url).get_agent_card(
            relative_card_path=f"/agents/{ROUTER}/.well-known/agent-card.json")
        print(f"router card: {card.name!r}, skills {[s.id for s in card.skills]}, "
              f"at {card.supported_interfaces[0].url}")
        client = ClientFactory(ClientConfig(streaming=False, httpx_client=http)).create(
            card, interceptors=[AuthInterceptor(Bearer(token))])
        results = []
        for q in QUESTIONS:
            answer, trace_id = await ask(client, q)
            print(f"\n[{q.customer}] {q.text}")
            print(f"  A2A client -> {' -> '.join(answer.path)} via {answer.capability}"
                  f"  trace={trace_id}")
            remote = answer.answered_by == NODE_AGENT
            print(f"  {answer.answered_by}: {answer.text}"
                  + ("  (the Node agent, through refund-adapter)" if remote else ""))
            needed = classify(q.text)
            results.append(answer.capability == needed
                           and remote == (needed == "refund.request"))
    return results


async def run(rt: reach.Runtime, node: str, npm: str) -> int:
    """Starts the Node agent and connects it, spawns the agents, starts the gateway, asks every
    question from outside; returns the exit status."""
    async with rt, node_refund_agent(node, npm) as node_url:
        proxy = await rt.connect_a2a(node_url, agent_id=NODE_AGENT,
                                     capabilities=["refunds.issue"])
        print(f"Node refund agent at {node_url} is reach agent {proxy.agent_id} "
              f"({', '.join(proxy.capabilities)})")
        await spawn_agents(rt, refund=False)
        await rt.spawn(RefundAdapter, "refund-adapter", placement=reach.Packed(pool="cs"))
        url = await asyncio.to_thread(rt.start_gateway, port=free_port(8000))  # it blocks
        guard = rt.cluster.guard()
        assert guard is not None  # reach.init signs by default: the keyring is there
        print(f"A2A gateway at {url}")
        answered = await ask_from_outside(url, token_for(guard.keyring, "example-client"))
    print(f"\nanswered {sum(answered)}/{len(QUESTIONS)}")
    return 0 if all(answered) else 1


def main() -> int:
    """Runs the scenario on a Ray of its own (stopped when the script ends)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        print("skipped: node and npm are needed for the Node refund agent "
              "(Node 20 or later on the PATH)")
        return 0
    rt = reach.init(address="local", log_to_driver=False)
    return asyncio.run(run(rt, node, npm))


if __name__ == "__main__":
    sys.exit(main())
