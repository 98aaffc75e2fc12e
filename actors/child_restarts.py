"""How a supervisor carries out the restarts its plan says (see
:func:`policies.supervision.plan_restart`), once it has stopped and taken out what the plan says.

Children restarted together (one_for_all, rest_for_one) start again one after another, in start
order, once the batch's delay is over. Under one_for_one, independent failures are healed side
by side, in the background: each child starts again after its own backoff, so that a child
backing off, or a restart waiting for a new process, never holds up a sibling's. Each restart
runs in a span of its own where the process traces (the decision, the child's exit reason, its
delay, and the error when the restart failed); one done is audited, counted and kept as a
:class:`~reach.records.RestartRecord`, and one that failed is handed back to the supervisor, for
which the child has failed again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from opentelemetry.trace import Span

from policies.supervision import ChildHealth, RestartPlan
from reach import clock
from reach._runtime.metrics import metrics
from reach._runtime.tracer import failed, internal
from reach.errors import ReachError
from reach.records import RestartPlacement, RestartRecord
from reach.spans import Attr, SpanName
from reach.specs import ChildSpec, RemoteChild, SupervisorSpec

log = logging.getLogger("reach.supervisor")


class ChildRestarts:
    """The restarts of one supervisor's children: those under way, and those done.

    Args:
        supervisor: The supervisor's name in its spec (its restarts' spans name it).
        name: Its process's name (its audit records and its restarts' count name it).
        specs: Its children, by ID.
        health: Each child's record of restarts, as the supervisor keeps it (a restart's span
            says the child's streak when the restart begins).
        start: Starts a child again.
        failed: Told of a child whose restart failed, and of why.
        audit: Records a supervision decision in the audit log.
    """

    def __init__(self, supervisor: str, name: str,
                 specs: Mapping[str, ChildSpec | RemoteChild | SupervisorSpec],
                 health: Mapping[str, ChildHealth], *,
                 start: Callable[[str], Awaitable[None]],
                 failed: Callable[[str, Exception], None],
                 audit: Callable[[dict[str, Any]], None]) -> None:
        self.supervisor = supervisor
        self.name = name
        self.specs = specs
        self.health = health
        self._start = start
        self._failed = failed
        self._audit = audit
        self.records: list[RestartRecord] = []
        # Restarts under way (one_for_one): each batch's, and those still in their backoff.
        self._restarting: set[asyncio.Task[None]] = set()
        self._backing_off: set[asyncio.Task[None]] = set()

    async def in_order(self, plan: RestartPlan, detected: float,
                       marking: asyncio.Future[None] | None) -> None:
        """Restarts the plan's children after the batch's delay, one after another in start
        order (their order matters), then awaits the mark of them restarting.

        Args:
            plan: The plan.
            detected: When the batch's first exit was seen (monotonic seconds).
            marking: The call marking them restarting in the registry (None: none was made).
        """
        if plan.delay_s:
            await asyncio.sleep(plan.delay_s)
        for child_id in plan.restart:
            await self.restart(child_id, plan, detected)
        await _marked(marking)

    def beside(self, plan: RestartPlan, detected: float, marking: asyncio.Future[None] | None,
               running: Callable[[], bool]) -> None:
        """Restarts the plan's children in the background (a one_for_one plan, nothing to
        stop): each after its own delay, one host's agents together, as long as ``running``
        holds when its delay is over (the arguments otherwise as :meth:`in_order`'s)."""
        async def heal() -> None:
            await asyncio.gather(*(self._restart_after(c, plan, detected, running)
                                   for c in plan.restart))
            await _marked(marking)

        task = asyncio.get_running_loop().create_task(heal())
        self._restarting.add(task)
        task.add_done_callback(self._restarting.discard)

    async def _restart_after(self, child_id: str, plan: RestartPlan, detected: float,
                             running: Callable[[], bool]) -> None:
        delay = plan.delays.get(child_id, plan.delay_s)
        if delay:
            task = asyncio.current_task()
            assert task is not None
            self._backing_off.add(task)
            try:
                await asyncio.sleep(delay)
            finally:
                self._backing_off.discard(task)
        if running():
            await self.restart(child_id, plan, detected)

    async def settle(self) -> None:
        """Lets the restarts under way finish (those still backing off are called off), so that
        stopping or giving up finds every child it must stop."""
        for task in list(self._backing_off):
            task.cancel()
        while self._restarting:
            await asyncio.gather(*self._restarting, return_exceptions=True)

    async def restart(self, child_id: str, plan: RestartPlan, detected: float) -> None:
        """Restarts a child (in a span of its own where this process traces: the decision, the
        child's exit reason, its delay, and the error when the restart failed)."""
        with internal(f"{SpanName.RESTART} {child_id}", {
                Attr.SUPERVISOR: self.supervisor, Attr.CHILD: child_id,
                Attr.DECISION: "restart", Attr.REASON: plan.reasons.get(child_id, ""),
                Attr.ATTEMPT: self.health[child_id].streak if child_id in self.health else 0,
                "reach.delay_s": plan.delays.get(child_id, plan.delay_s)}) as span:
            await self._restart_traced(child_id, plan, detected, span)

    async def _restart_traced(self, child_id: str, plan: RestartPlan, detected: float,
                              span: Span | None) -> None:
        try:
            await self._start(child_id)
        except Exception as exc:
            if span is not None:
                failed(span, exc if isinstance(exc, ReachError) else ReachError(str(exc)))
            log.warning("restart of %s failed: %s", child_id, exc)
            self._failed(child_id, exc)
            return
        self._audit({"caller": self.name, "callee": child_id, "capability": "",
                     "msg_type": "supervision", "outcome": "restarted", "trace_id": ""})
        metrics.count("reach_restarts", 1, self.name)
        self.records.append(RestartRecord(child_id, clock.now(),
                                          restarted_as(self.specs[child_id]),
                                          clock.monotonic() - detected,
                                          plan.reasons.get(child_id, "")))


def restarted_as(spec: ChildSpec | RemoteChild | SupervisorSpec) -> RestartPlacement:
    """Where a child of ``spec`` goes when it restarts."""
    if isinstance(spec, SupervisorSpec):
        return RestartPlacement.SUPERVISOR
    if isinstance(spec, RemoteChild):
        return RestartPlacement.REMOTE
    return spec.placement.restarted_as()


async def _marked(marking: asyncio.Future[None] | None) -> None:
    """Awaits the mark of restarting children (its failure is only logged: callers then find
    the old route dead, and wait all the same)."""
    if marking is None:
        return
    try:
        await marking
    except ReachError as exc:
        log.warning("marking children restarting failed: %s", exc)
