"""The restart benchmark's contestants and its caller: one death, and the return the caller sees.

A contestant (:class:`Contestant`) is a supervised reach agent (:class:`ReachVictim`) or Ray's
own restart (:class:`RayAnchor`); :func:`die_and_return` kills it once and measures, by probing
(:func:`until_new`), how long until a new incarnation answers. :mod:`reach.bench.restart` runs
the rounds and the figures.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import os
import secrets
import signal
import statistics
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import reach
from reach._runtime.names import POOL_PREFIX
from reach._runtime.pool_hosts import REPLACE_AFTER_S
from reach.bench.agents import Crash, Incarnation, Ping, read_mark
from reach.bench.anchors import ray_victim
from reach.bench.quiet import busy_since, cpu_times, process_stats

#: Numbers the probes: each one's content differs from the others'.
PROBES = itertools.count()
#: Each probe request's timeout.
PROBE_TIMEOUT_S = 2.0
#: How long the probes still out after the first new reply may take before they are ended.
PROBE_GRACE_S = 0.3
#: Longest wait for a new incarnation, and for the steady state after it.
BACK_WITHIN_S = 30.0
SETTLE_WITHIN_S = 30.0
#: The supervisors' intensity period: a death waits until the previous restart is out of it.
PERIOD_S = 1.0
#: A restart that took a spare has its node's spares topped up by then (seconds after it).
TOP_UP_WITHIN_S = REPLACE_AFTER_S + 0.2


class Contestant(Protocol):
    """One contestant: an agent (or Ray actor) that dies and comes back."""

    name: str

    async def ping(self) -> tuple[int, str]:
        """The current incarnation's (pid, token), within the probe timeout."""
        ...

    def crash(self, mark: str) -> asyncio.Future[Any]:
        """Sends the crash request (its outcome, a failure, is the caller's to read)."""
        ...

    def is_process(self, pid: int) -> bool:
        """Whether ``pid`` is (still) this contestant's kind of process (never kill on a guess)."""
        ...

    async def ready(self) -> dict[str, Any] | None:
        """The restart's record once the steady state is back, else None (not yet)."""
        ...

    async def quiet_after(self) -> float:
        """Epoch seconds before which the next death would not be the first in its window."""
        ...


def cmdline(pid: int) -> bytes:
    """The command line of process ``pid`` (empty if it is gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


#: The checkout this module is in, if it is one (a wheel's install is not).
CHECKOUT = Path(__file__).resolve().parents[2]


def pct(values: list[float], p: int) -> float | None:
    """The ``p``-th percentile of ``values`` (the one value if one, None if none)."""
    if len(values) < 2:
        return values[0] if values else None
    return round(statistics.quantiles(values, n=100, method="inclusive")[p - 1], 2)


def commit() -> str | None:
    """The checkout's commit, marked ``+dirty`` when tracked files differ from it (new
    processes import the code as it is on disk when they start); None outside a checkout."""
    if not (CHECKOUT / ".git").exists():
        return None
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True, cwd=CHECKOUT).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True,
                               cwd=CHECKOUT).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+dirty" if dirty else "")


def raylets() -> int:
    """How many Ray nodes run on this machine: raylets, by session (a raylet's child between
    fork and exec, as it starts a worker, shows the same command line: it is not counted)."""
    sessions = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        args = cmdline(int(entry)).split(b"\0")
        if args[0].endswith(b"/raylet"):
            sessions.add(next((a for a in args if a.startswith(b"--raylet_socket_name=")),
                              entry.encode()))
    return len(sessions)


def processes() -> dict[int, tuple[int, int]]:
    """Every process of this machine: pid -> (parent's pid, CPU ticks used so far)."""
    return {pid: (int(fields[1]), int(fields[11]) + int(fields[12]))
            for pid, fields in process_stats()}


def descendants(root: int, procs: dict[int, tuple[int, int]]) -> set[int]:
    """``root`` and the processes it started, and theirs (a Ray this process started)."""
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in procs.items():
        children.setdefault(parent, []).append(pid)
    mine, todo = set(), [root]
    while todo:
        pid = todo.pop()
        mine.add(pid)
        todo.extend(children.get(pid, ()))
    return mine


class OthersBusy:
    """Samples, every ``every_s`` in a thread of its own, the CPU time of the processes other
    than this one and its descendants (its Ray): what else kept the machine busy meanwhile (a
    process that starts and ends between two samples is missed)."""

    def __init__(self, every_s: float = 1.0) -> None:
        self.every_s = every_s
        self.ticks = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._before = cpu_times()

    def __enter__(self) -> OthersBusy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        seen = processes()
        while not self._stop.wait(self.every_s):
            now = processes()
            mine = descendants(os.getpid(), now)
            self.ticks += sum(max(0, t - seen[pid][1]) if pid in seen else t
                              for pid, (_, t) in now.items() if pid not in mine)
            seen = now

    def share(self) -> float | None:
        """Their share of the machine's CPU time since this sampler was made."""
        after = cpu_times()
        if self._before is None or after is None or after[0] == self._before[0]:
            return None
        return round(min(1.0, self.ticks / (after[0] - self._before[0])), 2)


class ReachVictim:
    """A supervised Victim agent, placed as its contestant says."""

    def __init__(self, name: str, rt: reach.Runtime, sup: reach.SupervisorRef, agent_id: str,
                 *, pool: str | None = None, spare: bool = False) -> None:
        self.name, self.rt, self.sup, self.agent_id = name, rt, sup, agent_id
        self.pool, self.spare = pool, spare
        self.seen = 0  # restarts of this agent recorded by its supervisor so far

    async def ping(self) -> tuple[int, str]:
        """See :meth:`Contestant.ping`."""
        reply = await self.rt.client.request(self.agent_id, Ping(n=next(PROBES)),
                                             returns=Incarnation,
                                             timeout_ms=int(PROBE_TIMEOUT_S * 1000))
        return reply.value.pid, reply.value.token

    def crash(self, mark: str) -> asyncio.Future[Any]:
        """See :meth:`Contestant.crash`."""
        return asyncio.ensure_future(self.rt.client.request(
            self.agent_id, Crash(mark=mark), timeout_ms=int(PROBE_TIMEOUT_S * 1000)))

    def is_process(self, pid: int) -> bool:
        """See :meth:`Contestant.is_process`."""
        return b"AgentHost" in cmdline(pid)

    async def _restarts(self) -> list[reach.RestartRecord]:
        status = await self.sup.status()
        return [r for r in status.restarts if r.child == self.agent_id]

    async def ready(self) -> dict[str, Any] | None:
        """See :meth:`Contestant.ready`."""
        mine = await self._restarts()
        if len(mine) <= self.seen:
            return None
        if self.pool is not None and not await self.pool_up():
            return None
        if self.spare and (time.time() < mine[-1].at + TOP_UP_WITHIN_S
                           or not await self.spare_offered()):
            return None  # the spares' top-up after the restart may not have started them yet
        self.seen = len(mine)
        last = mine[-1]
        return {"supervisor_ms": round(last.latency_s * 1000, 2), "running_at": last.at,
                "placement": str(last.placement), "reason": last.reason}

    async def pool_up(self) -> bool:
        """Whether both hosts of the pool answer (a dead one is started again in the
        background: the next death must find two)."""
        for i in range(2):
            name = f"{POOL_PREFIX}{self.pool}.{i}"
            self.rt.cluster.forget(name)  # a cached port may be the dead one's
            try:
                await asyncio.wait_for(awaited(self.rt.cluster.host(name).count()), 2)
            except (reach.ReachError, TimeoutError):
                return False
        return True

    async def spare_offered(self) -> bool:
        """Whether the registry offers a warm spare host (the next restart takes it), and no
        spare is still starting (a new process costs a core for a while: the next death must
        not share the machine with it, as it does not when one spare replaces another)."""
        registry = self.rt.cluster.registry()
        offered = await registry.spares()
        counts = (await registry.stats()).get("spares")  # None: a registry that sizes no pool
        starting = counts["starting"] if counts is not None else 0
        return sum(len(names) for names in offered.values()) >= 1 and starting == 0

    async def quiet_after(self) -> float:
        """See :meth:`Contestant.quiet_after`."""
        mine = await self._restarts()
        return mine[-1].at + PERIOD_S if mine else 0.0


class RayAnchor:
    """Ray's actor restart: no supervisor, no steady state to wait for beyond the reply."""

    name = "ray"

    def __init__(self) -> None:
        self.actor: Any = ray_victim.remote()

    async def ping(self) -> tuple[int, str]:
        """See :meth:`Contestant.ping`."""
        pid, token = await asyncio.wait_for(awaited(self.actor.ping.remote()), PROBE_TIMEOUT_S)
        return int(pid), str(token)

    def crash(self, mark: str) -> asyncio.Future[Any]:
        """See :meth:`Contestant.crash`."""
        return asyncio.ensure_future(awaited(self.actor.crash.remote(mark)))

    def is_process(self, pid: int) -> bool:
        """See :meth:`Contestant.is_process`."""
        return b"RayVictim" in cmdline(pid)

    async def ready(self) -> dict[str, Any] | None:
        """See :meth:`Contestant.ready`."""
        return {}

    async def quiet_after(self) -> float:
        """See :meth:`Contestant.quiet_after`."""
        return 0.0


async def awaited(call: Any) -> Any:
    """Awaits ``call`` (a Ray object ref) in a coroutine, as ``asyncio.wait_for`` needs."""
    return await call


@dataclass
class Death:
    """One death and the return that followed it."""

    contestant: str
    kind: str
    ms: float | None = None  # death to the first reply of the new incarnation
    probes: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    sent_to_crash_ms: float | None = None  # crash only: request sent to os._exit
    settle_ms: float | None = None  # first new reply to the steady state
    busy: float | None = None  # the machine's CPU busy share from the death to the return
    supervisor: dict[str, Any] = field(default_factory=dict)
    #: The last failure of each type the probes met: (ms after the death, its message).
    last_errors: dict[str, tuple[float, str]] = field(default_factory=dict)
    note: str = ""


@dataclass
class Probing:
    """What the caller saw while probing: the first new reply, the probes, their failures."""

    arrived: float | None = None  # epoch seconds: the first reply of the new incarnation
    probes: int = 0
    errors: collections.Counter[str] = field(default_factory=collections.Counter)
    #: The last failure of each type: (epoch seconds, its message).
    last_error: dict[str, tuple[float, str]] = field(default_factory=dict)


async def until_new(c: Contestant, old_token: str, every_s: float) -> Probing:
    """Probes every ``every_s`` until a reply from an incarnation other than ``old_token``
    (for at most BACK_WITHIN_S)."""
    loop = asyncio.get_running_loop()
    first: asyncio.Future[float] = loop.create_future()
    seen = Probing()
    errors = seen.errors

    async def probe() -> None:
        try:
            _, token = await c.ping()
        except Exception as exc:  # a failed probe is counted: the next one may succeed
            errors[type(exc).__name__] += 1
            seen.last_error[type(exc).__name__] = (time.time(), str(exc)[:300])
            return
        arrived = time.time()
        if token != old_token and not first.done():
            first.set_result(arrived)

    probes: list[asyncio.Task[None]] = []
    end = time.monotonic() + BACK_WITHIN_S
    while not first.done() and time.monotonic() < end:
        probes.append(loop.create_task(probe()))
        await asyncio.wait({first}, timeout=every_s)
    # The probes still out end by themselves shortly (a reach probe waiting for the restart is
    # answered), or not before their timeout (some of Ray's): those are ended here, counted.
    _, late = await asyncio.wait(probes, timeout=PROBE_GRACE_S)
    for task in late:
        task.cancel()
    await asyncio.gather(*late, return_exceptions=True)
    if late:
        errors["unanswered"] += len(late)
    seen.arrived = first.result() if first.done() else None
    seen.probes = len(probes)
    return seen


async def die_and_return(c: Contestant, kind: str, marks: Path, every_s: float) -> Death:
    """Kills ``c`` once (``kind``), measures its return, waits for the steady state."""
    death = Death(c.name, kind)
    wait = await c.quiet_after() - time.time()
    if wait > 0:  # the previous restart is still in the intensity period
        await asyncio.sleep(wait)
    pid, token = await c.ping()
    before = cpu_times()
    crash: asyncio.Future[Any] | None = None
    mark = marks / f"{c.name}-{secrets.token_hex(4)}"
    if kind == "sigkill":
        if not c.is_process(pid):
            death.note = f"pid {pid} is not the agent's process"
            return death
        died = time.time()
        os.kill(pid, signal.SIGKILL)
    else:
        sent = time.time()
        crash = c.crash(str(mark))
    seen = await until_new(c, token, every_s)
    arrived, death.probes, death.errors = seen.arrived, seen.probes, dict(seen.errors)
    death.busy = busy_since(before)
    if crash is not None:
        await asyncio.gather(crash, return_exceptions=True)  # it fails: its process died
        written = read_mark(str(mark))
        if written is None:
            death.note = "the crash left no mark"
            return death
        died = written[0]
        death.sent_to_crash_ms = round((died - sent) * 1000, 2)
    if arrived is None:
        death.note = f"no new incarnation within {BACK_WITHIN_S:.0f} s"
        return death
    death.ms = round((arrived - died) * 1000, 2)
    end = time.monotonic() + SETTLE_WITHIN_S
    while (record := await c.ready()) is None:
        if time.monotonic() > end:
            death.note = f"no steady state within {SETTLE_WITHIN_S:.0f} s after the return"
            break
        await asyncio.sleep(0.01)
    death.settle_ms = round((time.time() - arrived) * 1000, 2)
    death.supervisor = record or {}
    if "running_at" in death.supervisor:  # where the time went: detection, restart, the caller
        running = death.supervisor.pop("running_at")
        death.supervisor["detected_ms"] = round(
            (running - died) * 1000 - death.supervisor["supervisor_ms"], 2)
        death.supervisor["running_ms"] = round((running - died) * 1000, 2)
    death.last_errors = {k: (round((t - died) * 1000, 1), m) for k, (t, m)
                         in seen.last_error.items()}
    return death
