"""The Supervisor actor: starts its children in order, watches them, restarts them per policy.

Each agent child is watched through its host (``watch_agent``), so an exit is known the moment
it happens: a normal exit, an abnormal one, or the host's process dying (SIGKILL, ``os._exit``,
a packed host with all its agents). Children that fail together (one host) are one failure event:
one restart counted against the intensity. A child supervisor runs on its parent's node, so
that a whole tree shares the fate of its root's node while its agents go where their placements
say. Past the intensity, the supervisor stops its children in reverse order and gives up; its
parent sees that as this child failing, and the root's driver sees a RestartLimitExceeded.
Supervisors also own tasks (see :mod:`reach.tasks`).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import Any

import ray
from ray.exceptions import RayError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from policies.supervision import backoff_delay, record_restart, should_restart, to_restart
from reach.client import Link
from reach.directory import Directory
from reach.errors import RestartLimitExceeded
from reach.guard import signed_call
from reach.metrics import metrics
from reach.names import NAMESPACE, POOL_PREFIX, is_dedicated, supervisor_name
from reach.sessions import store
from reach.spawner import Spawner
from reach.supervision import ChildSpec, SupervisorSpec
from reach.tasks import TaskRunner, TaskSpec
from reach.transport import Transport

log = logging.getLogger("reach.supervisor")

#: Exits detected within this window are one failure event (a host's agents die together).
FAILURE_WINDOW_S = 0.05


@ray.remote(max_restarts=0)
class Supervisor:
    """One supervisor of the tree (see :class:`reach.SupervisorSpec`)."""

    def __init__(self, spec: SupervisorSpec, registry: Any, parent: str | None, max_hops: int,
                 default_timeout_ms: int) -> None:
        self.spec = spec
        self.name = supervisor_name(spec.name)
        self.registry = registry
        self.parent = parent
        self.node = ray.get_runtime_context().get_node_id()
        self.directory = Directory(registry)
        self.transport = Transport(self.name, NAMESPACE,
                                   on_dead_endpoint=self.directory.drop_endpoint,
                                   on_undelivered=self.directory.dead_letter)
        self.link = Link(self.transport, self.directory, default_timeout_ms, max_hops)
        self.spawner = Spawner(registry, self.transport, max_hops, default_timeout_ms)
        self.limits = (max_hops, default_timeout_ms)
        self.rng = random.Random(spec.seed)
        self.specs: dict[str, ChildSpec | SupervisorSpec] = {c.child_id: c for c in spec.children}
        # Invariant: started lists the live children in start order.
        self.started: list[str] = []
        self.hosts: dict[str, str] = {}
        self.subs: dict[str, Any] = {}
        self.stopping: set[str] = set()
        # Invariant: gen[c] counts c's starts; a watcher of an older start is ignored.
        self.gen: dict[str, int] = {}
        self.history: tuple[float, ...] = ()
        self.restarts: list[dict[str, Any]] = []
        self.state = "starting"
        self.tasks = TaskRunner(self.link, self.name, spec.task_policy, self.rng,
                                self._cancel_trace, audit=self._audit)
        self._exits: list[tuple[str, bool, str, float]] = []
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
                self.state = "failed"
                raise
        self.state = "running"
        if self._exits:  # a child died while its siblings were starting: handle it now
            self._handling = asyncio.get_running_loop().create_task(self._handle_exits())
        return list(self.started)

    async def _start_child(self, child_id: str) -> None:
        spec = self.specs[child_id]
        gen = self.gen[child_id] = self.gen.get(child_id, 0) + 1
        if isinstance(spec, SupervisorSpec):
            sup_cls: Any = Supervisor
            # Hard affinity: this node is alive while this supervisor runs on it, and Ray
            # places an actor that asks for no resources anywhere if its affinity is soft.
            here = NodeAffinitySchedulingStrategy(self.node, soft=False)
            handle = sup_cls.options(
                name=supervisor_name(spec.name), namespace=NAMESPACE, max_concurrency=10_000,
                num_cpus=0, scheduling_strategy=here,
            ).remote(spec, self.registry, self.name, *self.limits)
            try:
                await handle.start.remote()
            except RayError:
                ray.kill(handle)
                raise
            self.subs[child_id] = handle
            monitor = self._watch_supervisor(child_id, gen, handle)
        else:
            entries = await self.spawner.spawn(spec.agent, [spec.agent_id], spec.placement,
                                               spec.args, spec.kwargs)
            self.hosts[child_id] = entries[0]["host"]
            monitor = self._watch_agent(child_id, gen, entries[0]["host"])
        self.started.append(child_id)
        order = list(self.specs)
        self.started.sort(key=order.index)  # a restarted child keeps its place in start order
        watcher = asyncio.get_running_loop().create_task(monitor)
        self._watchers.add(watcher)
        watcher.add_done_callback(self._watchers.discard)

    async def stop(self) -> list[str]:
        """Stops every child in reverse start order, each within its timeout; returns the order."""
        self.state = "stopping"
        order = list(reversed(self.started))
        await self._stop_children(order)
        self.state = "stopped"
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
            handle = self.subs.pop(child_id, None)
            if handle is not None:
                await _within(handle.stop.remote(), timeout)
                ray.kill(handle)
            return
        host_name = self.hosts.pop(child_id, None)
        if host_name is None:  # its restart failed: no host holds it, but clients may wait on it
            await _within(self._mark([child_id], "offline"), timeout)
            return
        try:
            host = self.transport.handle(host_name)
            await _within(host.remove_agents.remote([child_id], timeout), timeout + 1)
            if is_dedicated(host_name):
                ray.kill(host)
        except Exception as exc:  # its host is gone already
            log.info("host of %s is gone: %s", child_id, exc)
        # A dead host could not deregister its agent: do it here (it is idempotent).
        data, sig = signed_call(self.transport.codec.guard, self.name, [[child_id], host_name])
        await _within(self.registry.deregister.remote(self.name, data, sig), timeout)

    # -- watching ------------------------------------------------------------------------------

    async def _watch_agent(self, child_id: str, gen: int, host_name: str) -> None:
        try:
            exit_ = await self.transport.handle(host_name).watch_agent.remote(child_id)
            normal, reason = bool(exit_["normal"]), str(exit_["reason"])
        except Exception as exc:  # RayActorError: the host's process died
            normal, reason = False, f"host {host_name} died: {type(exc).__name__}"
        self._exited(child_id, gen, normal, reason)

    async def _watch_supervisor(self, child_id: str, gen: int, handle: Any) -> None:
        try:
            info = await handle.wait_gave_up.remote()
            normal, reason = info is None, "stopped" if info is None else str(info["reason"])
        except RayError as exc:
            normal, reason = False, f"supervisor died: {type(exc).__name__}"
        self._exited(child_id, gen, normal, reason)

    def _exited(self, child_id: str, gen: int, normal: bool, reason: str) -> None:
        if gen != self.gen.get(child_id) or child_id in self.stopping:
            return  # an older incarnation, or a child this supervisor stopped on purpose
        if child_id not in self.started:
            return
        self._exits.append((child_id, normal, reason, time.monotonic()))
        if self._handling is None or self._handling.done():
            self._handling = asyncio.get_running_loop().create_task(self._handle_exits())

    async def _handle_exits(self) -> None:
        await asyncio.sleep(FAILURE_WINDOW_S)  # gather the exits of one host into one event
        assert self._lock is not None
        async with self._lock:
            while self._exits and self.state == "running":
                batch, self._exits = self._exits, []
                await self._restart_for(batch)

    async def _restart_for(self, batch: list[tuple[str, bool, str, float]]) -> None:
        restart: list[str] = []
        for child_id, normal, _, _ in batch:
            if not should_restart(self.specs[child_id].restart, abnormal=not normal):
                self.started.remove(child_id)
                self.hosts.pop(child_id, None)
                continue
            restart += [c for c in to_restart(self.spec.strategy, self.started, child_id)
                        if c not in restart]
        if not restart:
            return
        now = time.monotonic()
        self.history, exceeded = record_restart(self.history, now, self.spec.intensity)
        if exceeded:
            await self._give_up(batch)
            return
        ordered = [c for c in self.started if c in restart]
        await self._mark([c for c in ordered if c in self.hosts], "restarting")
        failed = {c for c, *_ in batch}
        await self._stop_children([c for c in reversed(ordered) if c not in failed])
        for child_id in ordered:
            if child_id in self.started:
                self.started.remove(child_id)
            self.hosts.pop(child_id, None)
            self.subs.pop(child_id, None)
        await asyncio.sleep(backoff_delay(len(self.history) - 1, self.spec.backoff, self.rng))
        detected = min(t for *_, t in batch)
        for child_id in ordered:
            self.stopping.discard(child_id)
            try:
                await self._start_child(child_id)
            except Exception as exc:
                log.warning("restart of %s failed: %s", child_id, exc)
                self._exits.append((child_id, False, f"restart failed: {exc}", time.monotonic()))
                self.started.append(child_id)  # it counts as started, and as failed again
                self.started.sort(key=list(self.specs).index)
                continue
            placement = "packed" if self.hosts.get(child_id, "").startswith(POOL_PREFIX) else (
                "supervisor" if child_id in self.subs else "dedicated")
            self._audit({"caller": self.name, "callee": child_id, "capability": "",
                         "msg_type": "supervision", "outcome": "restarted", "trace_id": ""})
            metrics.count("reach_restarts", 1, self.name)
            self.restarts.append({"child": child_id, "at": time.time(), "placement": placement,
                                  "latency_s": time.monotonic() - detected,
                                  "reason": next((r for c, _, r, _ in batch if c == child_id),
                                                 "sibling restarted")})

    async def _give_up(self, batch: list[tuple[str, bool, str, float]]) -> None:
        self.state = "failed"
        reasons = "; ".join(f"{c}: {r}" for c, _, r, _ in batch)
        error = RestartLimitExceeded(
            f"supervisor {self.spec.name} exceeded its restart intensity "
            f"({self.spec.intensity.max_restarts} in {self.spec.intensity.period_s} s): {reasons}",
            suggestion="look at why the children fail; raise the intensity if it is expected",
            details={"supervisor": self.spec.name, "restarts": len(self.history)},
        )
        log.error("%s", error)
        self._audit({"caller": self.name, "callee": self.parent or "driver", "capability": "",
                     "msg_type": "supervision", "outcome": "gave_up", "trace_id": ""})
        await self._stop_children(list(reversed(self.started)))
        future = self._gave_up_future()
        if not future.done():
            future.set_result(error.to_info().model_dump(mode="json"))

    def _mark(self, agent_ids: list[str], status: str) -> Any:
        """The registry call that sets the status of children (signed by this supervisor)."""
        data, sig = signed_call(self.transport.codec.guard, self.name, [agent_ids, status])
        return self.registry.mark.remote(self.name, data, sig)

    def _audit(self, record: dict[str, Any]) -> None:
        """Records a supervision decision in the audit log (best effort: never blocks)."""
        try:
            store().audit.remote([{**record, "at": time.time()}])
        except Exception as exc:  # no session store in this deployment
            log.debug("not audited: %s", exc)

    async def wait_gave_up(self) -> dict[str, Any] | None:
        """Returns when this supervisor ends: None if stopped, the error info if it gave up."""
        return await asyncio.shield(self._gave_up_future())

    # -- tasks ---------------------------------------------------------------------------------

    async def submit(self, spec: TaskSpec) -> str:
        """Starts a task owned by this supervisor; returns its ID."""
        return self.tasks.submit(spec)

    async def wait_task(self, task_id: str) -> dict[str, Any]:
        """Waits for a task to end; returns its result."""
        return await self.tasks.wait(task_id)

    async def cancel_task(self, task_id: str) -> dict[str, Any]:
        """Cancels a task and its outstanding sub-requests."""
        return await self.tasks.cancel(task_id)

    async def _cancel_trace(self, trace_id: str, reason: str) -> None:
        hosts = await self.registry.hosts.remote()
        calls = []
        for name in hosts:
            try:
                calls.append(self.transport.handle(name).cancel_trace.remote(trace_id, reason))
            except Exception:  # a host that is gone runs nothing to cancel
                continue
        await asyncio.gather(*calls, return_exceptions=True)

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

    async def status(self) -> dict[str, Any]:
        """State, node, children, restarts and tasks of this supervisor and its subtree."""
        subs = {}
        for child_id, handle in list(self.subs.items()):
            try:
                subs[child_id] = await _within(handle.status.remote(), 5)
            except Exception as exc:
                subs[child_id] = {"name": child_id, "state": f"unreachable: {exc}"}
        return {
            "name": self.spec.name, "node": self.node, "state": self.state,
            "strategy": self.spec.strategy.value,
            "children": [{"id": c, "kind": "supervisor" if c in self.subs else "agent",
                          "host": self.hosts.get(c), "restart": self.specs[c].restart.value}
                         for c in self.started],
            "restarts": list(self.restarts), "tasks": self.tasks.counts(), "subtree": subs,
        }


async def _within(ref: Any, timeout_s: float) -> Any:
    """Awaits a Ray call for at most ``timeout_s``; past that the caller kills (or moves on)."""
    try:
        return await asyncio.wait_for(asyncio.ensure_future(ref), timeout_s)
    except (TimeoutError, RayError) as exc:
        log.warning("gave up waiting: %s", exc)
        return None
