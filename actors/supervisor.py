"""The Supervisor actor: starts its children in order, watches them, restarts them per policy.

Each agent child is watched through its host (``watch_agent``), so an exit is known the moment
it happens: a normal exit, an abnormal one, or the host's process dying (SIGKILL, ``os._exit``,
a packed host with all its agents). Children that fail together (one host, or a lost node) are
one failure: one restart against the intensity, which is the supervisor's (processes that die
apart are a failure each); how long a child waits before its restart is its own streak's affair
(see :func:`policies.supervision.plan_restart`).
A child supervisor runs on its parent's node, so that a whole tree shares the fate of its root's
node while its agents go where their placements say. Past the intensity, the supervisor stops its
children in reverse order and gives up; its parent sees that as this child failing, and the
root's driver sees a RestartLimitExceeded.
How an agent child is spawned, awaited (a remote one) and evicted is :mod:`actors.agent_children`;
how the restarts a plan says are carried out (one_for_one's side by side, each after its own
backoff) is :mod:`actors.child_restarts`.
Supervisors also own tasks (see :mod:`reach._runtime.tasks`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
from typing import Any

from opentelemetry.trace import Span

from actors.agent_children import AgentChildren, within
from actors.child_restarts import ChildRestarts
from policies.supervision import ChildExit, ChildHealth, RestartPlan, Strategy, plan_restart
from reach import clock
from reach._runtime.directory import Directory
from reach._runtime.link import Link
from reach._runtime.names import supervisor_name
from reach._runtime.spawner import Spawner
from reach._runtime.tasks import TaskRunner, cancel_trace_everywhere
from reach._runtime.trace_setup import setup
from reach._runtime.tracer import failed, internal
from reach._runtime.trail import AuditTrail
from reach._runtime.transport import Transport
from reach.errors import ReachError, RestartLimitExceeded
from reach.ports.cluster import Cluster
from reach.ports.hosts import CallLimits
from reach.ports.supervisors import SupervisorPort
from reach.records import (
    AgentStatus,
    ChildKind,
    ChildStatus,
    SupervisorState,
    SupervisorStatus,
    TaskResult,
)
from reach.spans import Attr, SpanName
from reach.specs import ChildSpec, RemoteChild, SupervisorSpec, TaskSpec

log = logging.getLogger("reach.supervisor")

#: Exits detected within this window are handled as one batch (a host's agents die together:
#: their watches fail within a few milliseconds of each other).
FAILURE_WINDOW_S = 0.003


class Supervisor:
    """One supervisor of the tree (see :class:`reach.SupervisorSpec`).

    Args:
        spec: What it supervises, and how.
        cluster: Where the other processes are.
        parent: The name of its parent supervisor (None for a root).
        limits: Hop limit and default timeout of the hosts it starts and its task requests.
    """

    def __init__(self, spec: SupervisorSpec, cluster: Cluster, parent: str | None,
                 limits: CallLimits) -> None:
        self.spec = spec
        self.name = supervisor_name(spec.name)
        setup(cluster, self.name)
        self.cluster = cluster
        self.registry = cluster.registry()
        self.parent = parent
        self.node = cluster.node_id()
        self.directory = Directory(self.registry)
        self.transport = Transport(self.name, cluster,
                                   on_dead_endpoint=self.directory.drop_endpoint,
                                   on_undelivered=self.directory.dead_letter)
        self.link = Link(cluster, self.transport, self.directory, limits)
        self.children = AgentChildren(self.name, cluster, self.registry,
                                      Spawner(cluster, limits), self.transport.codec.guard)
        self.limits = limits
        self.rng = random.Random(spec.seed)
        self.specs: dict[str, ChildSpec | RemoteChild | SupervisorSpec] = {
            c.child_id: c for c in spec.children}
        # Invariant: started lists the live children in start order.
        self.started: list[str] = []
        self.hosts: dict[str, str] = {}
        self.nodes: dict[str, str] = {}
        # Agent child -> the host it died with (its restart goes elsewhere without asking).
        self.died_on: dict[str, str] = {}
        self.subs: dict[str, SupervisorPort] = {}
        # The epoch of each agent child's current incarnation (its next is at least one more).
        self.epochs: dict[str, int] = {}
        self.stopping: set[str] = set()
        # Invariant: gen[c] counts c's starts; a watcher of an older start is ignored.
        self.gen: dict[str, int] = {}
        self.history: tuple[float, ...] = ()
        # Each child's own restarts in a row and when its incarnation started (its backoff).
        self.health: dict[str, ChildHealth] = {}
        self.restarts = ChildRestarts(spec.name, self.name, self.specs, self.health,
                                      start=self._start_again, failed=self._restart_failed,
                                      audit=self._audit)
        self.state = SupervisorState.STARTING
        self.trail = AuditTrail(cluster)
        self.tasks = TaskRunner(self.link, self.name, spec.task_policy, self.rng,
                                self._cancel_trace, audit=self._audit)
        self._exits: list[ChildExit] = []
        self._handling: asyncio.Task[None] | None = None
        self._gave_up: asyncio.Future[dict[str, Any] | None] | None = None
        self._lock: asyncio.Lock | None = None
        self._watchers: set[asyncio.Task[None]] = set()

    def _gave_up_future(self) -> asyncio.Future[dict[str, Any] | None]:
        if self._gave_up is None:
            self._gave_up = asyncio.get_running_loop().create_future()
        return self._gave_up

    # -- starting and stopping -----------------------------------------------------------------

    async def start(self) -> list[str]:
        """Starts every child in order; returns the order.

        Raises:
            Exception: a child failed to start (the ones started are stopped again).
        """
        self._lock = asyncio.Lock()
        self._gave_up_future()
        for child_id in self.specs:
            try:
                await self._start_child(child_id)
            except Exception:
                await self._stop_children(list(reversed(self.started)))
                self.state = SupervisorState.FAILED
                raise
        self.state = SupervisorState.RUNNING
        if self._exits:  # a child died while its siblings were starting: handle it now
            self._handling = asyncio.get_running_loop().create_task(self._handle_exits())
        return list(self.started)

    async def _start_child(self, child_id: str) -> None:
        spec = self.specs[child_id]
        gen = self.gen[child_id] = self.gen.get(child_id, 0) + 1
        if isinstance(spec, SupervisorSpec):
            # On this node: a tree lives or dies with its root's node.
            port = self.cluster.start_supervisor(spec, self.name, self.limits, self.node)
            try:
                await port.start()
            except Exception:
                self.cluster.kill(port)
                raise
            self.subs[child_id] = port
            monitor = self._watch_supervisor(child_id, gen, port)
        else:
            if isinstance(spec, RemoteChild):
                self.died_on.pop(spec.agent_id, None)
                record = await self.children.await_remote(
                    spec, self.epochs.get(spec.agent_id, -1))
            else:
                record = await self.children.spawn(spec, self.epochs.get(spec.agent_id),
                                                   self.died_on.pop(spec.agent_id, None))
            self.hosts[child_id] = record.host
            self.nodes[child_id] = record.node
            self.epochs[child_id] = record.epoch
            monitor = self._watch_agent(child_id, gen, record.host, record.node)
        self.health[child_id] = self.health.get(child_id, ChildHealth()).started(
            clock.monotonic())
        self.started.append(child_id)
        order = list(self.specs)
        self.started.sort(key=order.index)  # a restarted child keeps its place in start order
        watcher = asyncio.get_running_loop().create_task(monitor)
        self._watchers.add(watcher)
        watcher.add_done_callback(self._watchers.discard)

    async def stop(self) -> list[str]:
        """Stops every child in reverse start order, each within its timeout; returns the order."""
        self.state = SupervisorState.STOPPING
        await self.restarts.settle()
        order = list(reversed(self.started))
        await self._stop_children(order)
        self.state = SupervisorState.STOPPED
        future = self._gave_up_future()
        if not future.done():
            future.set_result(None)
        return order

    async def _stop_children(self, order: list[str]) -> None:
        for child_id in order:
            self.stopping.add(child_id)
            try:
                await self._stop_child(child_id)
            finally:
                if child_id in self.started:
                    self.started.remove(child_id)

    async def _stop_child(self, child_id: str) -> None:
        spec = self.specs[child_id]
        timeout = spec.shutdown_timeout_s
        if isinstance(spec, SupervisorSpec):
            port = self.subs.pop(child_id, None)
            if port is not None:
                await within(port.stop(), timeout)
                self.cluster.kill(port)
            return
        host_name = self.hosts.pop(child_id, None)
        if host_name is None:  # its restart failed: no host holds it, but clients may wait on it
            await within(self.children.mark([child_id], AgentStatus.OFFLINE), timeout)
            return
        await self.children.evict(child_id, host_name, timeout)

    # -- watching ------------------------------------------------------------------------------

    async def _watch_agent(self, child_id: str, gen: int, host_name: str, node: str) -> None:
        died_with: str | None = None
        lost: str | None = None
        try:
            exit_ = await self.cluster.host(host_name).watch_agent(child_id)
            normal, reason = exit_.normal, exit_.reason
        except ReachError as exc:  # AgentUnavailable: the host's process died
            normal, reason, died_with = False, f"host {host_name} died: {exc.message}", host_name
            if (exc.details or {}).get("unreachable"):  # not seen to die: its node may be lost
                lost = node
            if gen == self.gen.get(child_id):
                self.died_on[child_id] = host_name
        self._exited(child_id, gen, normal, reason, died_with=died_with, lost=lost)

    async def _watch_supervisor(self, child_id: str, gen: int, port: SupervisorPort) -> None:
        try:
            info = await port.wait_gave_up()
            normal, reason = info is None, "stopped" if info is None else str(info["reason"])
        except ReachError as exc:
            normal, reason = False, f"supervisor died: {exc.message}"
        self._exited(child_id, gen, normal, reason)

    def _exited(self, child_id: str, gen: int, normal: bool, reason: str, *,
                died_with: str | None = None, lost: str | None = None) -> None:
        if gen != self.gen.get(child_id) or child_id in self.stopping:
            return  # an older incarnation, or a child this supervisor stopped on purpose
        if child_id not in self.started:
            return
        self._exits.append(ChildExit(child_id, normal, reason, clock.monotonic(), died_with,
                                     lost))
        self._handle_soon()

    def _handle_soon(self) -> None:
        """Handles the exits recorded, unless their handling is under way (it takes them)."""
        if self._handling is None or self._handling.done():
            self._handling = asyncio.get_running_loop().create_task(self._handle_exits())

    async def _handle_exits(self) -> None:
        if self._siblings_may_follow():
            await asyncio.sleep(FAILURE_WINDOW_S)  # gather the exits of one host into one event
        assert self._lock is not None
        async with self._lock:
            while self._exits and self.state is SupervisorState.RUNNING:
                batch, self._exits = self._on_dead_nodes(self._exits), []
                plan = plan_restart(
                    batch, started=self.started,
                    restart_types={c: s.restart for c, s in self.specs.items()},
                    strategy=self.spec.strategy, intensity=self.spec.intensity,
                    backoff=self.spec.backoff, history=self.history, now=clock.monotonic(),
                    rng=self.rng, external=[c for c, s in self.specs.items()
                                            if isinstance(s, RemoteChild)],
                    health=self.health, reset_s=self.spec.backoff_reset_s)
                self.health.update(plan.health)
                # one_for_one: independent children, this batch heals beside the next ones,
                # which are planned (and counted against the intensity) at once.
                await self._carry_out(batch, plan)

    def _siblings_may_follow(self) -> bool:
        """Whether a live child shares a host or a node with one that just exited (its exit, if
        the host or node died, is on its way: one failure event); an agent alone where it runs
        is restarted at once."""
        exited = {e.child_id for e in self._exits}
        where = frozenset().union(*(self._place(c) for c in exited))
        return any(self._place(c) & where for c in self.started if c not in exited)

    def _on_dead_nodes(self, batch: list[ChildExit]) -> list[ChildExit]:
        """The batch, each host death on a node the cluster knows dead naming that node (one
        failure). The cluster is asked only when the deaths of two hosts of one node, seen to
        die, are in the batch: they are as many failures unless their node is gone."""
        on: dict[str, set[str]] = {}
        for e in batch:
            if e.host is not None and e.node is None and e.child_id in self.nodes:
                on.setdefault(self.nodes[e.child_id], set()).add(e.host)
        if not any(len(hosts) > 1 for hosts in on.values()):
            return batch
        dead = {n.node_id for n in self.cluster.nodes() if not n.alive}
        return [dataclasses.replace(e, node=self.nodes[e.child_id])
                if e.host is not None and e.node is None and self.nodes.get(e.child_id) in dead
                else e for e in batch]

    def _place(self, child_id: str) -> frozenset[str]:
        """Where a child runs: its host and its node (a node's death takes all of them);
        a child supervisor runs on this one's node."""
        host = self.hosts.get(child_id)
        return frozenset(p for p in (host, self.nodes.get(child_id, self.node)) if p)

    async def _carry_out(self, batch: list[ChildExit], plan: RestartPlan) -> None:
        """Does what the restart plan says: forget the ended, give up, or stop and restart
        (one_for_one: in the background, see :mod:`actors.child_restarts`)."""
        marking = self._set_aside(plan)
        if plan.give_up:
            await self._give_up(batch)
            return
        if not plan.restart:
            return
        await self._stop_children(list(plan.stop))
        self._take_out(plan)
        detected = min(e.at for e in batch)
        if self.spec.strategy is Strategy.ONE_FOR_ONE:
            self.restarts.beside(plan, detected, marking,
                                 lambda: self.state is SupervisorState.RUNNING)
        else:
            await self.restarts.in_order(plan, detected, marking)

    def _set_aside(self, plan: RestartPlan) -> asyncio.Future[None] | None:
        """Forgets the ended children, keeps the plan's history, and marks the children to
        restart as restarting (the call is returned, not awaited)."""
        for child_id in plan.ended:
            if child_id in self.started:
                self.started.remove(child_id)
            self.hosts.pop(child_id, None)
        self.history = plan.history
        if plan.give_up or not plan.restart:
            return None
        # Callers hold their requests while an agent restarts: the mark goes out now, and is
        # not waited for (it names the epochs it is about, so that it cannot land on a new
        # incarnation that registered first).
        marked = [c for c in plan.restart if c in self.hosts]
        return asyncio.ensure_future(_awaited(self.children.mark(
            marked, AgentStatus.RESTARTING, {c: self.epochs[c] for c in marked
                                             if c in self.epochs})))

    def _take_out(self, plan: RestartPlan) -> None:
        """Takes the children to restart out of the live ones."""
        for child_id in plan.restart:
            if child_id in self.started:
                self.started.remove(child_id)
            self.hosts.pop(child_id, None)
            gone = self.subs.pop(child_id, None)
            if gone is not None:  # a child supervisor that gave up still holds its name
                self.cluster.kill(gone)

    async def _start_again(self, child_id: str) -> None:
        self.stopping.discard(child_id)
        await self._start_child(child_id)

    def _restart_failed(self, child_id: str, exc: Exception) -> None:
        self._exits.append(ChildExit(child_id, False, f"restart failed: {exc}",
                                     clock.monotonic()))
        self.started.append(child_id)  # it counts as started, and as failed again
        self.started.sort(key=list(self.specs).index)
        self._handle_soon()

    async def _give_up(self, batch: list[ChildExit]) -> None:
        reasons = "; ".join(f"{e.child_id}: {e.reason}" for e in batch)
        with internal(f"{SpanName.RESTART} {self.spec.name}", {
                Attr.SUPERVISOR: self.spec.name, Attr.DECISION: "escalate",
                Attr.REASON: reasons}) as span:
            await self._gave_up_now(batch, span)

    async def _gave_up_now(self, batch: list[ChildExit], span: Span | None) -> None:
        self.state = SupervisorState.FAILED
        await self.restarts.settle()
        reasons = "; ".join(f"{e.child_id}: {e.reason}" for e in batch)
        error = RestartLimitExceeded(
            f"supervisor {self.spec.name} exceeded its restart intensity "
            f"({self.spec.intensity.max_restarts} in {self.spec.intensity.period_s} s): {reasons}",
            suggestion="look at why the children fail; raise the intensity if it is expected",
            details={"supervisor": self.spec.name, "restarts": len(self.history)},
        )
        log.error("%s", error)
        if span is not None:
            failed(span, error)
        self._audit({"caller": self.name, "callee": self.parent or "driver", "capability": "",
                     "msg_type": "supervision", "outcome": "gave_up", "trace_id": ""})
        await self._stop_children(list(reversed(self.started)))
        future = self._gave_up_future()
        if not future.done():
            future.set_result(error.to_info().model_dump(mode="json"))

    def _audit(self, record: dict[str, Any]) -> None:
        """Records a supervision or task decision in the audit log (buffered: never blocks)."""
        self.trail.record(record["caller"], record["callee"], capability=record["capability"],
                          msg_type=record["msg_type"], outcome=record["outcome"],
                          trace_id=record["trace_id"] or None)

    async def wait_gave_up(self) -> dict[str, Any] | None:
        """Returns when this supervisor ends: None if stopped, the error info if it gave up."""
        return await asyncio.shield(self._gave_up_future())

    # -- tasks ---------------------------------------------------------------------------------

    async def submit(self, spec: TaskSpec) -> str:
        """Starts a task owned by this supervisor; returns its ID."""
        return self.tasks.submit(spec)

    async def wait_task(self, task_id: str) -> TaskResult:
        """Waits for a task to end; returns its result."""
        return await self.tasks.wait(task_id)

    async def cancel_task(self, task_id: str) -> TaskResult:
        """Cancels a task and its outstanding sub-requests."""
        return await self.tasks.cancel(task_id)

    async def _cancel_trace(self, trace_id: str, reason: str) -> None:
        await cancel_trace_everywhere(self.cluster, trace_id, reason)

    # -- endpoint and status -------------------------------------------------------------------

    async def deliver(self, frame: bytes, reply_to: str) -> tuple[list[str], None]:
        """Receives replies to this supervisor's task requests."""
        envelopes, _ = self.transport.codec.decode_batch_partial(frame)
        for env in envelopes:
            self.transport.accept(env)
        return [e.msg_id for e in envelopes if e.request_id is None], None

    async def watch(self) -> None:
        """Returns only when this supervisor ends (a caller's watch fails if it dies)."""
        await self.wait_gave_up()

    async def status(self) -> SupervisorStatus:
        """State, node, children, restarts and tasks of this supervisor and its subtree."""
        subs: dict[str, SupervisorStatus] = {}
        for child_id, port in list(self.subs.items()):
            try:
                subs[child_id] = await asyncio.wait_for(_awaited(port.status()), 5)
            except (ReachError, TimeoutError) as exc:
                subs[child_id] = SupervisorStatus(child_id, SupervisorState.UNREACHABLE,
                                                  detail=str(exc))
        return SupervisorStatus(
            self.spec.name, self.state, self.node, self.spec.strategy.value,
            tuple(ChildStatus(c, ChildKind.SUPERVISOR if c in self.subs else ChildKind.AGENT,
                              self.hosts.get(c), self.specs[c].restart.value)
                  for c in self.started),
            tuple(self.restarts.records), self.tasks.counts(), subs)


async def _awaited(call: Any) -> Any:
    return await call

