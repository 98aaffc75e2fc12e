"""The fake cluster's simulated processes: each an object in the test's event loop, with its
node, the tasks it runs and its life.

A call to a process runs its object's method as a task of that process, on copies of the
arguments (pickled, as a process boundary would copy them), and returns a copy of the result or
of the exception. A task belongs to the process that created it (:func:`track_tasks`), so
ending a process (as SIGKILL would) cancels everything it was doing: the calls pending on it fail
at once with AgentUnavailable, and so does every watch of it. A process the platform restarts
comes back as a new object of a new incarnation (:meth:`SimulatedProcess.revive`).
"""

from __future__ import annotations

import asyncio
import contextvars
import pickle
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from opentelemetry import context as otel_context

from reach.errors import AgentUnavailable, Detail

T = TypeVar("T")

_current: contextvars.ContextVar[SimulatedProcess | None] = contextvars.ContextVar(
    "reach_fake_proc", default=None)


@dataclass(eq=False)
class SimulatedProcess:
    """One simulated process: its object, node, the tasks running in it, and its life."""

    name: str
    make: Callable[[], Any]
    node: str
    restarts: bool = False
    obj: Any = None
    dead: bool = False
    lost: bool = False  # ended with its node: unreachable rather than seen to die
    incarnation: int = 0
    tasks: set[asyncio.Task[Any]] = field(default_factory=set)
    back: asyncio.Event | None = None
    up: asyncio.Event | None = None  # a host still starting: its calls wait for it
    resources: dict[str, float] = field(default_factory=dict)

    def context(self) -> contextvars.Context:
        """The context its code runs in (a task it creates belongs to it)."""
        ctx = contextvars.copy_context()
        ctx.run(_current.set, self)
        # A process boundary carries no tracing context: only what an envelope carries.
        ctx.run(otel_context.attach, otel_context.Context())
        return ctx

    def start(self) -> None:
        """Makes its object: its first incarnation."""
        self.obj = self.context().run(self.make)
        self.incarnation = 1

    async def call(self, loop: asyncio.AbstractEventLoop, method: str, args: tuple[object, ...],
                   kwargs: dict[str, object]) -> Any:
        """Runs ``method`` of its object on copies of the arguments, in a task of its own;
        returns a copy of the result.

        Raises:
            AgentUnavailable: it died while the call ran.
            Exception: a copy of what the method raised.
        """
        incarnation = self.incarnation
        fn = getattr(self.obj, method)
        args, kwargs = copied((args, kwargs))
        inner = loop.create_task(_as_coroutine(fn, args, kwargs), context=self.context())
        try:
            result = await asyncio.shield(inner)
        except asyncio.CancelledError:
            if inner.cancelled() and (self.dead or self.incarnation != incarnation):
                raise died(self.name, self.lost) from None
            raise
        except BaseException as exc:
            raise copied(exc) from None
        return copied(result)

    def end(self, lost: bool = False) -> None:
        """Ends it as SIGKILL would (``lost``: with its node): every task it runs is cancelled
        (a process the platform restarts is waited for by its callers, until :meth:`revive`)."""
        self.dead = True
        self.lost = lost
        self.back = asyncio.Event() if self.restarts else None
        for task in list(self.tasks):
            task.cancel()
        self.tasks.clear()

    def revive(self) -> None:
        """Brings it back as the platform restarts a process: a new object, empty, of a new
        incarnation; the calls waiting for it go on."""
        self.obj = self.context().run(self.make)
        self.incarnation += 1
        self.dead = self.lost = False
        if self.back is not None:
            self.back.set()


def current_process() -> SimulatedProcess | None:
    """The process the code running now belongs to (None: the test's own, a driver's)."""
    return _current.get()


def track_tasks(loop: asyncio.AbstractEventLoop) -> None:
    """Makes every task of ``loop`` belong to the process that created it (if any)."""
    def factory(loop: asyncio.AbstractEventLoop, coro: Any,
                context: contextvars.Context | None = None) -> asyncio.Task[Any]:
        task = asyncio.Task(coro, loop=loop, context=context)
        proc = (context or contextvars.copy_context()).get(_current)
        if proc is not None and not proc.dead:
            proc.tasks.add(task)
            task.add_done_callback(proc.tasks.discard)
        return task

    loop.set_task_factory(factory)


def copied(value: T) -> T:
    """What crosses a process boundary: a copy, as pickling makes it."""
    copy: T = pickle.loads(pickle.dumps(value))
    return copy


def died(name: str, lost: bool = False) -> AgentUnavailable:
    """The error of a call to a process that died (``lost``: with its node, which Ray reports
    as unreachable, not seen to die, until its health checks declare the node dead)."""
    details: dict[str, Detail] = {"endpoint": name}
    if lost:
        details["unreachable"] = True
    return AgentUnavailable(f"{name} is dead or unreachable: its process "
                            f"{'is unreachable' if lost else 'died'}",
                            suggestion="retry: a supervisor may restart the agent, or another "
                                       "holder may answer",
                            details=details)


async def _as_coroutine(fn: Callable[..., Any], args: tuple[Any, ...],
                        kwargs: dict[str, Any]) -> Any:
    result = fn(*args, **kwargs)
    if asyncio.iscoroutine(result) or isinstance(result, asyncio.Future):
        return await result
    return result
