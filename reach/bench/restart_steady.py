"""The restart benchmark's steady scenario: failures that come one after another, each healed
while the others still are.

Twenty supervised :class:`~reach.bench.agents.Victim` agents under one ``one_for_one``
supervisor with a generous intensity (``Intensity(1000, 10 s)``, the default backoff): ten
dedicated (their restarts take warm spares, ``reach.init(spares=1)`` by default, while there are
some) and ten packed in a pool of 2 hosts. Every ``crash_every_s`` (1 s) a random agent crashes
its own process (its handler calls ``os._exit``, as the isolated scenario's ``crash`` kind does):
never the one crashed last, nor one whose previous crash is still being measured. The next crash
does not wait for anything: not for the previous agent's return, nor for the pool's dead host or
the taken spare to be replaced. A packed agent's crash ends its host and every agent on it (they
are restarted too; only the agent that crashed is measured). A crash request whose host dies
under it before it is handled (another agent's crash took the host down) is sent again: the
crash is the one the agent's handler makes.

For each crash, the caller probes the crashed agent from the moment it sends the crash, each
probe with a 2 s timeout and a number of its own (one content sent again and again, in hands at
two deaths of the agent with no answer between them, would be quarantined as poison), one at a
time and at most one every ``probe_every_s`` (2 ms), until the first reply of another
incarnation than the one that crashed (the crash's mark names it):
the latency is that reply's arrival minus the handler's clock just before ``os._exit``. (A probe
sent while the agent restarts is held for it and answered the moment its new incarnation is
routable; several probes out at once per agent, as the isolated scenario sends, would add
nothing but load, with up to twenty agents returning at once.) Its supervisor's ``RestartRecord``
splits it into detection and restart (the figures: :mod:`reach.bench.steady_figures`). A
dedicated restart counts as a warm spare's when the host it went to had been offered as a spare
before (the registry's offers are polled every 50 ms; a spare offered and taken within one poll
counts as cold: the count of cold starts is an upper bound), and the registry's own count of
spare claims is read where it keeps one. A packed restart counts as a spare's when its agent came
back on a host of its own (a warm spare its pool took, both pool hosts being dead).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import random
import time
from pathlib import Path
from typing import Any

import reach
from reach import ChildSpec, Intensity, SupervisorSpec
from reach._runtime.names import POOL_PREFIX
from reach.bench.agents import Crash, Incarnation, Ping, Victim, read_mark
from reach.bench.quiet import busy_since, cpu_times, settle
from reach.bench.restart_probe import (
    BACK_WITHIN_S,
    PROBE_TIMEOUT_S,
    PROBES,
    SETTLE_WITHIN_S,
    OthersBusy,
    ReachVictim,
    commit,
    raylets,
)
from reach.bench.steady_figures import (
    PLACEMENTS,
    SparesSeen,
    SteadyCrash,
    attribute,
    claims_between,
    figures_of,
    goals,
    show,
    spare_cost,
)

#: How many agents of each placement, and the pool's hosts.
DEDICATED, PACKED, POOL_SIZE = 10, 10, 2
#: The supervisor's intensity: generous, so that it never gives up here.
INTENSITY = Intensity(1000, 10.0)
#: The crashes of a run, and how often one comes.
CRASHES, QUICK_CRASHES = 30, 10
CRASH_EVERY_S = 1.0
#: The crash request waits for an agent still restarting (a packed one whose host died with
#: another's crash) for at most this long.
CRASH_TIMEOUT_S = 10.0
#: A crash request that failed before its handler ran (its host died under it, of another
#: agent's crash) is sent again this long after the one before, for up to CRASH_TIMEOUT_S.
CRASH_RESEND_S = 0.2


class Watch:
    """What the caller sees of one crash: its mark, once written, and the probes' replies."""

    def __init__(self, agent: str, mark: Path) -> None:
        self.agent, self.mark = agent, str(mark)
        self.replies: list[tuple[float, str]] = []  # (arrival, token) of each probe answered
        self.errors: collections.Counter[str] = collections.Counter()
        self.probes = 0
        self.written: tuple[float, str] | None = None  # the crash's moment and incarnation

    def returned(self) -> float | None:
        """When the first reply of another incarnation than the crashed one arrived (epoch
        seconds), if one has."""
        self.written = self.written or read_mark(self.mark)
        if self.written is None:
            return None
        died, token = self.written
        return min((at for at, t in self.replies if t != token and at > died), default=None)

    async def probe(self, rt: reach.Runtime) -> None:
        """Sends one probe from ``rt`` and waits for its reply (a failure is counted)."""
        self.probes += 1
        try:
            reply = await rt.client.request(self.agent, Ping(n=next(PROBES)),
                                            returns=Incarnation,
                                                 timeout_ms=int(PROBE_TIMEOUT_S * 1000))
        except Exception as exc:  # the next probe may succeed
            self.errors[type(exc).__name__] += 1
            return
        self.replies.append((time.time(), reply.value.token))


async def crash_and_return(rt: reach.Runtime, c: SteadyCrash, mark: Path, every_s: float,
                           seen: SparesSeen) -> SteadyCrash:
    """Crashes ``c.agent`` once and probes it until another incarnation answers; then looks up
    where it went."""
    watch = Watch(c.agent, mark)
    before = cpu_times()
    c.sent_at = time.time()

    def send() -> asyncio.Future[Any]:
        return asyncio.ensure_future(rt.client.request(
            c.agent, Crash(mark=str(mark)), timeout_ms=int(CRASH_TIMEOUT_S * 1000)))

    crash, sent = send(), time.monotonic()
    give_up = sent + CRASH_TIMEOUT_S
    end = give_up + BACK_WITHIN_S
    while watch.returned() is None and time.monotonic() < end:
        if crash.done() and watch.written is None:
            if time.monotonic() > give_up:
                break  # the crash was not delivered (its error is below)
            if time.monotonic() >= sent + CRASH_RESEND_S:
                # Not delivered: the host died under it (another agent's crash took it down)
                # before the request was handled, and the agent is restarting: send it again.
                c.crash_resends += 1
                crash, sent = send(), time.monotonic()
        next_at = time.monotonic() + every_s
        # One probe out at a time: one held while the agent restarts is answered the moment
        # its new incarnation is routable, and twenty agents' probes do not flood the cluster.
        await watch.probe(rt)
        await asyncio.sleep(max(0.0, next_at - time.monotonic()))
    c.busy, c.probes, c.errors = busy_since(before), watch.probes, dict(watch.errors)
    outcome = (await asyncio.gather(crash, return_exceptions=True))[0]
    arrived = watch.returned()
    if watch.written is None:
        c.note = f"the crash was not delivered: {outcome!r}"[:300]
        return c
    c.sent_to_crash_ms = round((watch.written[0] - c.sent_at) * 1000, 2)
    if arrived is None:
        c.note = "no new incarnation in time"
        return c
    c.ms = round((arrived - watch.written[0]) * 1000, 2)
    rec = await rt.cluster.registry().lookup(c.agent)
    c.host = rec.host if rec is not None else ""
    if c.placement == "dedicated":
        c.warm_spare = c.host in seen.names
    return c


def _line(crashes: int, c: SteadyCrash) -> str:
    got = f"{c.ms:.0f} ms" if c.ms is not None else "FAILED"
    how = "" if c.warm_spare is None else ", warm spare" if c.warm_spare else ", cold"
    note = f" ({c.note})" if c.note else ""
    return f"  [{c.index}/{crashes}] {c.agent} {c.placement} {got}{how}{note}"


async def settled(rt: reach.Runtime, agents: list[str], probe: ReachVictim) -> None:
    """Waits until every agent answers, both pool hosts do, and a spare is offered.

    Raises:
        RuntimeError: not within :data:`SETTLE_WITHIN_S`.
    """
    end = time.monotonic() + SETTLE_WITHIN_S
    for agent in agents:
        await rt.client.request(agent, Ping(n=next(PROBES)), returns=Incarnation,
                                timeout_ms=int(SETTLE_WITHIN_S * 1000))
    while not (await probe.pool_up() and await probe.spare_offered()):
        if time.monotonic() > end:
            raise RuntimeError("the steady scenario's agents did not settle")
        await asyncio.sleep(0.05)


async def trickle(rt: reach.Runtime, kinds: dict[str, str], seen: SparesSeen, *, crashes: int,
                  every_s: float, probe_every_s: float, work: Path) -> list[SteadyCrash]:
    """Crashes a random agent every ``every_s`` (see the module's docstring); the crashes, in
    the order they were sent, each measured to its return."""
    rng = random.Random(7)
    measuring: set[str] = set()
    running: list[asyncio.Task[SteadyCrash]] = []
    last: str | None = None
    start = time.monotonic()

    def ended(task: asyncio.Task[SteadyCrash]) -> None:  # said as each returns
        measuring.discard(task.result().agent)
        print(_line(crashes, task.result()), flush=True)

    for k in range(crashes):
        await asyncio.sleep(max(0.0, start + k * every_s - time.monotonic()))
        free = [a for a in kinds if a not in measuring and a != last]
        agent = last = rng.choice(free or [a for a in kinds if a != last])
        measuring.add(agent)
        c = SteadyCrash(agent, kinds[agent], k + 1, spares_offered=seen.now)
        task = asyncio.create_task(crash_and_return(rt, c, work / f"steady-{k}", probe_every_s,
                                                       seen))
        task.add_done_callback(ended)
        running.append(task)
    return list(await asyncio.gather(*running))


async def run_steady(address: str | None, crashes: int, *, every_s: float = CRASH_EVERY_S,
                     probe_every_s: float, logs: bool, work: Path) -> dict[str, Any]:
    """Runs the steady scenario on a runtime of its own (closed at the end); its figures."""
    # A probe that meets a dead host is a dead letter, which the driver logs as a warning:
    # they are counted per crash instead (``errors``).
    logging.getLogger("reach._runtime.directory").setLevel(logging.ERROR)
    before = raylets()  # other Rays' nodes on this machine
    code = commit()
    rt = reach.init(address=address, log_to_driver=logs, session_path=str(work / "steady.db"))
    try:
        await rt.ready()
        during = [raylets()]
        figures = await _steady(rt, crashes, every_s, probe_every_s, work)
        during.append(raylets())
    finally:
        await rt.close()
    joined = address or os.environ.get("RAY_ADDRESS") or "local"
    ours = 1 if joined == "local" else 0  # a local Ray of our own
    others = max(before, max(during) - ours)
    print(f"raylets on this machine: {before} before the steady scenario's Ray, "
          f"{min(during)}..{max(during)} during it ({ours} ours): "
          f"{'other Rays overlapped' if others else 'no other Ray'}")
    now = commit()
    if now != code:
        print(f"the checkout changed during the run: {code} -> {now}")
    return {**figures, "commit": code, "commit_after": now, "raylets_before": before,
            "raylets_during": during, "other_rays_overlapped": others > 0}


async def _steady(rt: reach.Runtime, crashes: int, every_s: float, probe_every_s: float,
                  work: Path) -> dict[str, Any]:
    tag = f"{os.getpid()}"
    pool = f"steady-{tag}"
    kinds = {f"victim-d{i}-{tag}": "dedicated" for i in range(DEDICATED)}
    kinds.update({f"victim-p{i}-{tag}": "packed" for i in range(PACKED)})
    sup = await rt.supervise(SupervisorSpec(f"steady-{tag}", intensity=INTENSITY, seed=7,
                                            children=[ChildSpec(
        Victim, a, placement=reach.Packed(pool=pool, size=POOL_SIZE) if k == "packed"
        else reach.Dedicated()) for a, k in kinds.items()]))
    await settled(rt, list(kinds), ReachVictim("steady", rt, sup, "", pool=pool))
    cost = await spare_cost(rt)
    await settle()  # the processes started for the agents are done starting
    spares_before = (await rt.cluster.registry().stats()).get("spares")
    seen = SparesSeen(rt)
    await seen.poll()
    polling = asyncio.create_task(seen.forever())
    before, started = cpu_times(), time.perf_counter()
    try:
        with OthersBusy() as others_sampled:
            result = await trickle(rt, kinds, seen, crashes=crashes, every_s=every_s,
                                   probe_every_s=probe_every_s, work=work)
    finally:
        polling.cancel()
        await asyncio.gather(polling, return_exceptions=True)
    wall, busy = time.perf_counter() - started, busy_since(before)
    others = others_sampled.share()
    spares = claims_between(spares_before, (await rt.cluster.registry().stats()).get("spares"))
    status = await sup.status()
    attribute(result, list(status.restarts))
    await sup.stop()
    for i in range(POOL_SIZE):  # pool hosts outlive their agents: end them too
        with contextlib.suppress(reach.ReachError):
            rt.cluster.kill(rt.cluster.host(f"{POOL_PREFIX}{pool}.{i}"))
    figures: dict[str, Any] = {
        "crashes": crashes, "crash_every_s": every_s, "seconds": round(wall, 1),
        "agents": {"dedicated": DEDICATED, "packed": PACKED, "pool_hosts": POOL_SIZE},
        "intensity": {"max_restarts": INTENSITY.max_restarts, "period_s": INTENSITY.period_s},
        "spares": rt.limits.spares, "max_spares": rt.limits.max_spares,
        "probe_every_ms": probe_every_s * 1000, "registry_spares": spares, "spare_cost": cost,
        "supervisor_restarts": len(status.restarts), "supervisor_state": str(status.state),
        "spares_offered_most": seen.most, "busy": busy, "others_busy": others,
        **{p: figures_of(result, p) for p in PLACEMENTS},
        "crashes_in_order": [vars(c) for c in result]}
    figures["goals"] = goals(figures)
    show(figures)
    return figures
