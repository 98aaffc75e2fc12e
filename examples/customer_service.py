"""Customer service under a supervisor: a router hands each question to an order, logistics or
refund agent, found by capability, and every answer comes back with its trace ID.

The agents are the ones of the demo scenario (:mod:`reach.tools.customer_service`); here they run as
the children of one supervisor, which restarts any of them that dies. Every answer is
deterministic (no model calls).

Run it on a Ray of its own, started for the run and stopped at the end (the default, unless
RAY_ADDRESS names a cluster), or on a running cluster, from a driver on one of its nodes::

    python examples/customer_service.py
    python examples/customer_service.py --address auto

It ends with ``answered N/N`` and exits with 0 only when every question was answered by an
agent that holds the capability the question needs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

import reach
from reach.tools.customer_service import (
    QUESTIONS,
    Answer,
    LogisticsAgent,
    OrderAgent,
    Question,
    RefundAgent,
    RouterAgent,
    classify,
)

SUPERVISOR = "customer-service"
ROUTER = "cs-router"
#: Light agents share one host process: quick to start, and one restart brings them all back.
POOL = reach.Packed(pool="customer-service", size=1)


def tree() -> reach.SupervisorSpec:
    """The supervision tree: the helpers first, the router (which asks them) last."""
    return reach.SupervisorSpec(SUPERVISOR, strategy=reach.Strategy.ONE_FOR_ONE, children=[
        reach.ChildSpec(OrderAgent, "cs-order-1", placement=POOL),
        reach.ChildSpec(OrderAgent, "cs-order-2", placement=POOL),
        reach.ChildSpec(LogisticsAgent, "cs-logistics-1", placement=POOL),
        reach.ChildSpec(RefundAgent, "cs-refund-1", placement=POOL),
        reach.ChildSpec(RouterAgent, ROUTER, placement=POOL),
    ])


async def show_tree(rt: reach.Runtime, sup: reach.SupervisorRef) -> dict[str, tuple[str, ...]]:
    """Prints the supervisor's children; returns each registered agent's capabilities."""
    status = await sup.status()
    agents = {info.agent_id: info for info in await rt.agents()}
    print(f"supervisor {status.name}: {status.state}, {status.strategy}, "
          f"{len(status.children)} children")
    for child in status.children:
        info = agents.get(child.child_id)
        capabilities = ",".join(info.capabilities) if info else "?"
        print(f"  {child.child_id:<15} {capabilities:<16} {child.restart:<9} {child.host}")
    return {agent_id: info.capabilities for agent_id, info in agents.items()}


async def ask(rt: reach.Runtime, q: Question, holders: dict[str, tuple[str, ...]]) -> bool:
    """Asks one question through the router and prints the answer; True if rightly answered."""
    print(f"\n[{q.customer}] {q.text}")
    try:
        reply = await rt.client.request(ROUTER, q, returns=Answer, timeout_ms=60_000)
    except reach.ReachError as exc:
        print(f"  not answered: {type(exc).__name__}: {exc}")
        return False
    answer = reply.value
    needed = classify(q.text)
    print(f"  {' -> '.join([rt.client.sender, *answer.path])} via {answer.capability}"
          f"  trace={reply.envelope.trace_id}")
    print(f"  {answer.answered_by}: {answer.text}")
    if needed not in holders.get(answer.answered_by, ()):
        print(f"  not answered: {answer.answered_by} does not hold {needed}")
        return False
    return True


async def run(rt: reach.Runtime) -> int:
    """Starts the tree, asks every question, stops the tree (which frees its name for the next
    run), then closes the runtime; returns the exit status."""
    async with rt:
        sup = await rt.supervise(tree())
        try:
            holders = await show_tree(rt, sup)
            answered = [await ask(rt, q, holders) for q in QUESTIONS]
        finally:
            await sup.stop()
    print(f"\nanswered {sum(answered)}/{len(QUESTIONS)}")
    return 0 if all(answered) else 1


def main(argv: list[str] | None = None) -> int:
    """Parses the command line and runs the scenario; a Ray started for the run stops when the
    script ends."""
    parser = argparse.ArgumentParser(description="Customer service under a supervisor.")
    parser.add_argument("--address", default=None,
                        help="Ray cluster to join, e.g. auto (default: RAY_ADDRESS if set, "
                             "else a local Ray started for this run)")
    args = parser.parse_args(argv)
    # Not Ray's default (which joins the last cluster started on this machine, if any):
    # without an address, a Ray of its own, stopped at the end.
    where = args.address or os.environ.get("RAY_ADDRESS") or "local"
    rt = reach.init(address=where, log_to_driver=False)
    return asyncio.run(run(rt))


if __name__ == "__main__":
    sys.exit(main())
