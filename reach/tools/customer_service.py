"""The customer-service scenario: a router hands each question to an order, logistics or refund
agent, found by capability. Every answer is deterministic (no model calls).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

from pydantic import BaseModel

from reach.agent import Agent, Dedicated, Packed, handler
from reach.context import Context
from reach.runtime import Runtime
from reach.schemas import schema


@schema("cs.question@1.0")
class Question(BaseModel):
    """A customer's question, in any language."""

    customer: str
    text: str


@schema("cs.answer@1.0")
class Answer(BaseModel):
    """An answer, and who gave it."""

    text: str
    answered_by: str
    capability: str = ""
    path: list[str] = []


ORDERS = {
    "A-1024": {"status": "shipped", "carrier": "SF Express", "eta_days": 2, "total": 59.0},
    "B-2048": {"status": "delivered", "carrier": "YunExpress", "eta_days": 0, "total": 120.5},
    "C-4096": {"status": "packing", "carrier": "DHL", "eta_days": 4, "total": 15.0},
}

# Keyword routing, most specific first: (capability, English words, Chinese words).
ROUTES = [
    ("refund.request", ("refund", "money back", "return"), ("退款", "退货", "退钱")),
    ("logistics.track", ("where", "shipping", "delivery", "track", "arrive"),
     ("物流", "快递", "到哪", "什么时候到", "配送")),
    ("order.query", ("order", "status", "total"), ("订单", "状态", "多少钱")),
]

_ORDER_ID = re.compile(r"\b[A-Z]-\d{4}\b")
_CJK = re.compile(r"[\u4e00-\u9fff]")


def classify(text: str) -> str:
    """The capability that should answer ``text`` (order.query when nothing matches better)."""
    lowered = text.lower()
    for capability, english, chinese in ROUTES:
        if any(w in lowered for w in english) or any(w in text for w in chinese):
            return capability
    return "order.query"


def _order(text: str) -> tuple[str, dict[str, object] | None]:
    match = _ORDER_ID.search(text)
    order_id = match.group(0) if match else ""
    return order_id, ORDERS.get(order_id)


def _zh(text: str) -> bool:
    return bool(_CJK.search(text))


class RouterAgent(Agent):
    """Reads a customer's question and hands it to the agent that holds the right capability."""

    capabilities = ("cs.route",)
    description = ("Front door of customer service: classifies questions about orders, delivery "
                   "and refunds, in English or Chinese, and routes them. Answers nothing itself.")

    @handler(Question, returns=Answer)
    async def route(self, ctx: Context, q: Question) -> Answer:
        capability = classify(q.text)
        reply = await ctx.request_capability(capability, q, returns=Answer)
        answer = reply.value
        return answer.model_copy(update={"capability": capability,
                                         "path": [self.id, answer.answered_by]})


class OrderAgent(Agent):
    """Answers order status and totals."""

    capabilities = ("order.query",)
    description = "Knows every order's status and total. Needs an order ID like A-1024."

    @handler(Question, returns=Answer)
    async def answer(self, ctx: Context, q: Question) -> Answer:
        order_id, order = _order(q.text)
        if order is None:
            text = "请提供订单号（例如 A-1024）。" if _zh(q.text) else "Which order? (e.g. A-1024)"
        elif _zh(q.text):
            text = f"订单 {order_id} 状态：{order['status']}，金额 ¥{order['total']}。"
        else:
            text = f"Order {order_id} is {order['status']}; total ¥{order['total']}."
        return Answer(text=text, answered_by=self.id)


class LogisticsAgent(Agent):
    """Tracks parcels."""

    capabilities = ("logistics.track",)
    description = "Tracks parcels: carrier and expected delivery. Needs an order ID."

    @handler(Question, returns=Answer)
    async def answer(self, ctx: Context, q: Question) -> Answer:
        order_id, order = _order(q.text)
        if order is None:
            text = "请提供订单号。" if _zh(q.text) else "Which order should I track?"
        elif order["eta_days"] == 0:
            text = (f"订单 {order_id} 已由 {order['carrier']} 送达。" if _zh(q.text)
                    else f"Order {order_id} was delivered by {order['carrier']}.")
        elif _zh(q.text):
            text = (f"订单 {order_id} 由 {order['carrier']} 配送，"
                    f"预计 {order['eta_days']} 天内送达。")
        else:
            text = (f"Order {order_id} is with {order['carrier']}, arriving in "
                    f"{order['eta_days']} days.")
        return Answer(text=text, answered_by=self.id)


class RefundAgent(Agent):
    """Opens refunds for delivered or damaged orders."""

    capabilities = ("refund.request",)
    description = "Opens refunds (退款) for delivered or damaged orders; not for unshipped ones."

    @handler(Question, returns=Answer)
    async def answer(self, ctx: Context, q: Question) -> Answer:
        order_id, order = _order(q.text)
        if order is None:
            text = "请提供需要退款的订单号。" if _zh(q.text) else "Which order is the refund for?"
        elif order["status"] != "delivered":
            text = (f"订单 {order_id} 尚未送达，可直接取消。" if _zh(q.text)
                    else f"Order {order_id} has not arrived yet; you can cancel it instead.")
        else:
            text = (f"已为订单 {order_id} 提交退款 ¥{order['total']}。" if _zh(q.text)
                    else f"Refund of ¥{order['total']} opened for order {order_id}.")
        return Answer(text=text, answered_by=self.id)


QUESTIONS = [
    Question(customer="alice", text="What is the status of order A-1024?"),
    Question(customer="王芳", text="我的订单 A-1024 什么时候到？"),
    Question(customer="bob", text="I want a refund for B-2048, it arrived damaged."),
    Question(customer="李雷", text="订单 C-4096 我想退款"),
    Question(customer="carol", text="Where is my parcel C-4096?"),
    Question(customer="张伟", text="订单 B-2048 多少钱？"),
]


async def spawn_agents(rt: Runtime, *, refund: bool = True) -> None:
    """Spawns the router (dedicated) and the order x2, logistics and refund agents (packed);
    without ``refund``, the refund capability is left for another agent (a remote one)."""
    await rt.spawn(RouterAgent, "router-1", placement=Dedicated())
    await rt.spawn_many(OrderAgent, ["order-1", "order-2"], placement=Packed(pool="cs"))
    await rt.spawn(LogisticsAgent, "logistics-1", placement=Packed(pool="cs"))
    if refund:
        await rt.spawn(RefundAgent, "refund-1", placement=Packed(pool="cs"))


async def run(rt: Runtime, say: Callable[[str], None] = print) -> list[Answer]:
    """Spawns the agents, asks every question through the router, prints who talked to whom."""
    started = time.perf_counter()
    await spawn_agents(rt)
    say(f"spawned 5 agents in {time.perf_counter() - started:.1f} s "
        "(router dedicated; order x2, logistics, refund packed)")
    for info in sorted(await rt.agents(), key=lambda a: a.agent_id):
        say(f"  {info.agent_id:<12} {','.join(info.capabilities):<16} host={info.host:<28} "
            f"{info.status} epoch={info.epoch}")
    answers = []
    for q in QUESTIONS:
        reply = await rt.client.request("router-1", q, returns=Answer)
        a = reply.value
        answers.append(a)
        say(f"\n[{q.customer}] {q.text}")
        say(f"  {rt.client.sender} -> {' -> '.join(a.path)} via {a.capability}"
            f"  trace={(reply.envelope.trace_id or '')[:12]}")
        say(f"  {a.answered_by}: {a.text}")
    return answers
