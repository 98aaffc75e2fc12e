"""Sessions: appended messages/s with group commit and with one commit per message, and
context-read latency on a 10,000-message session.

Two levels, in one run:
- storage: SQLite (WAL, synchronous=FULL) driven in this process, no Ray, to isolate the commit
  strategy: group commit (each transaction carries the messages that arrived together) against
  one transaction per message;
- store: the SessionStore actor through Ray, ``--callers`` concurrent appenders, each call
  carrying one message (or ``--per-call``), with group commit on and off.
Each level says its append rate every few seconds as it runs. Writes ``sessions.json`` into the
results folder (:mod:`reach.bench.results`). Run: ``python -m reach.bench.sessions [--out DIR]``,
or with ``--quick`` (a tenth of the messages).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import reach
from actors.session_storage import SqliteStorage, WriteBatch, pack
from actors.sessions import SessionStore
from reach._ray import RayCluster
from reach._runtime.store import StoreClient
from reach.bench.anchors import kill, ray_actor
from reach.bench.progress import Meter
from reach.bench.results import add_out, write
from reach.ports.sessions import NewMessage
from reach.security.guard import SecurityConfig

PAYLOAD = {"text": "客户问：订单 A-1024 什么时候到？ 📦", "order_id": "A-1024"}


def p95(values: list[float]) -> float:
    """The 95th percentile of ``values``."""
    return round(statistics.quantiles(values, n=100, method="inclusive")[94], 3)


async def storage_level(folder: Path, messages: int, group: int) -> dict[str, Any]:
    """Appends through SqliteStorage directly: ``group`` messages per commit vs one each."""
    out: dict[str, Any] = {}
    for name, per_commit, count in (("group_commit", group, messages),
                                    ("commit_per_message", 1, max(messages // 10, 200))):
        storage = SqliteStorage(folder / f"{name}.db", "FULL")
        await storage.open()
        await storage.write(WriteBatch(sessions=[("s", "a", "b", "{}", time.time())]))
        blob = pack(PAYLOAD)
        meter = Meter(f"storage, {name}", total=count)
        started = time.perf_counter()
        for first in range(1, count + 1, per_commit):
            seqs = range(first, min(first + per_commit, count + 1))
            await storage.write(WriteBatch(
                messages=[("s", n, f"m{n}", "a", "message", blob, "x@1.0", 0.0) for n in seqs],
                session_seq={"s": seqs[-1] + 1}))
            meter.add(len(seqs))
        wall = time.perf_counter() - started
        out[name] = {"messages": count, "per_commit": per_commit,
                     "msgs_per_s": round(count / wall, 1)}
        reads = []
        for _ in range(300):
            t0 = time.perf_counter()
            await storage.messages("s", 0, 20, last=True)
            reads.append((time.perf_counter() - t0) * 1000)
        out[name]["context_read_p95_ms"] = p95(reads)
        await storage.close()
    return out


async def store_level(folder: Path, group_commit: bool, callers: int, per_call: int,
                      messages: int, *, coalesce: bool = False) -> dict[str, Any]:
    """Appends through the SessionStore actor over Ray, ``callers`` at a time (through the
    process's coalescing appender when ``coalesce``)."""
    name = "group" if group_commit else "single"
    cluster = RayCluster(SecurityConfig(sign=False))
    store = ray_actor(SessionStore, num_cpus=0, max_concurrency=10_000).remote(
        cluster, str(folder / f"store-{name}-{per_call}-{coalesce}.db"),
        group_commit=group_commit, compact_after=10**9, name=f"bench.{name}")
    await store.open_session.remote("bench", "a", "b", {}, {})
    coalescing = StoreClient(cluster, port=cast(Any, _Store(store)))  # the one method it calls
    sent = 0
    meter = Meter(f"store, {name} commit, {per_call} per call", total=messages)

    async def caller(c: int) -> None:
        nonlocal sent
        while sent < messages:
            batch: list[NewMessage] = [
                {"msg_id": f"c{c}-{sent + k}", "sender": "a", "payload": PAYLOAD}
                for k in range(per_call)]
            sent += per_call
            if coalesce:
                await coalescing.append("bench", batch)
            else:
                await store.append.remote("bench", batch)
            meter.add(per_call)

    started = time.perf_counter()
    async with meter.watching():
        await asyncio.gather(*(caller(c) for c in range(callers)))
    wall = time.perf_counter() - started
    stats = await store.stats.remote()
    result = {"messages": sent, "callers": callers, "per_call": per_call,
              "msgs_per_s": round(sent / wall, 1), "commits": stats["commits"],
              "msgs_per_commit": round(sent / max(stats["commits"], 1), 1)}
    kill(store)
    return result


class _Store:
    """The store's ``append_many`` as the coalescing client calls it (a port of one actor)."""

    def __init__(self, handle: Any) -> None:
        self._handle = handle

    def append_many(self, appends: Any) -> Any:
        """Sends ``appends`` to the store actor; its reply's object ref."""
        return self._handle.append_many.remote(appends)


async def context_read(folder: Path, size: int, reads: int) -> dict[str, Any]:
    """p95 of reading the summary and last 20 messages of a ``size``-message session."""
    store = ray_actor(SessionStore, num_cpus=0, max_concurrency=10_000).remote(
        RayCluster(SecurityConfig(sign=False)), str(folder / "context.db"), compact_after=10**9,
        name="bench.context")
    await store.open_session.remote("big", "a", "b", {}, {})
    for first in range(0, size, 500):
        await store.append.remote("big", [{"msg_id": f"m{n}", "sender": "a", "payload": PAYLOAD}
                                          for n in range(first, min(first + 500, size))])
    times = []
    for _ in range(reads):
        t0 = time.perf_counter()
        ctx = await store.context.remote("big", 20)
        times.append((time.perf_counter() - t0) * 1000)
        assert ctx.messages[-1].seq == size
    kill(store)
    return {"session_messages": size, "reads": reads, "p50_ms": round(statistics.median(times), 3),
            "p95_ms": p95(times)}


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Runs the three levels; their figures."""
    reach.init(address=args.address, log_to_driver=False)
    with tempfile.TemporaryDirectory(prefix="reach-bench-") as tmp:
        folder = Path(tmp)
        print(f"storage: appending {args.messages} messages in SQLite, in process", flush=True)
        figures: dict[str, Any] = {"storage": await storage_level(folder, args.messages, 100)}
        print("storage (in process, synchronous=FULL):")
        for name, r in figures["storage"].items():
            print(f"  {name:<20} {r['msgs_per_s']:>10,.0f} msg/s   "
                  f"read p95 {r['context_read_p95_ms']} ms")
        figures["store"] = {}
        print(f"store actor through Ray ({args.callers} concurrent callers):")
        runs = [(True, 1, True), (True, 1, False), (True, args.per_call, False),
                (False, 1, False), (False, args.per_call, False)]
        for group, per_call, coalesce in runs:
            key = (f"{'group_commit' if group else 'commit_per_write'}_{per_call}_per_call"
                   + ("_coalesced" if coalesce else ""))
            r = await store_level(folder, group, args.callers, per_call, args.store_messages,
                                  coalesce=coalesce)
            figures["store"][key] = r
            print(f"  {key:<44} {r['msgs_per_s']:>9,.0f} msg/s  "
                  f"({r['msgs_per_commit']} per commit)", flush=True)
        print(f"context read: filling a {args.session_messages}-message session", flush=True)
        figures["context_read"] = await context_read(folder, args.session_messages, args.reads)
        c = figures["context_read"]
        print(f"context read on a {c['session_messages']:,}-message session: "
              f"p50 {c['p50_ms']} ms, p95 {c['p95_ms']} ms")
    return figures


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the sessions benchmark and writes its figures; the exit status."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--store-messages", type=int, default=5_000)
    parser.add_argument("--callers", type=int, default=64)
    parser.add_argument("--per-call", type=int, default=10)
    parser.add_argument("--reads", type=int, default=500)
    parser.add_argument("--session-messages", type=int, default=10_000,
                        help="size of the session whose context is read")
    parser.add_argument("--address", default=None)
    parser.add_argument("--quick", action="store_true", help="a tenth of the messages and reads")
    add_out(parser)
    args = parser.parse_args(argv)
    if args.quick:
        for name in ("messages", "store_messages", "reads", "session_messages"):
            setattr(args, name, getattr(args, name) // 10)
    write(args, "sessions", asyncio.run(measure(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
