"""Supervision trees as a user declares them, and the handles on running supervisors and tasks.

Example::

    tree = reach.SupervisorSpec("shop", children=[
        reach.ChildSpec(OrderAgent, "order-1", placement=reach.Packed()),
        reach.ChildSpec(RefundAgent, "refund-1", restart=reach.RestartType.TRANSIENT),
    ], strategy=reach.Strategy.ONE_FOR_ONE, intensity=reach.Intensity(3, 10))
    sup = await rt.supervise(tree)
    task = await sup.submit("order.query", OrderQuery(order_id="A-1"), by_capability=True,
                            returns=OrderStatus)
    result = await task.result()  # a TaskResult[OrderStatus]
    if result.state is reach.TaskState.COMPLETED:
        print(result.value.status)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, overload

from pydantic import BaseModel
from typing_extensions import TypeVar

from policies.backoff import Backoff
from policies.supervision import Intensity, RestartType, Strategy
from policies.tasks import SeverityPolicy, TaskPolicy
from reach._runtime.tasks import TaskSpec
from reach.agent import Agent
from reach.errors import ErrorInfo, error_from_info
from reach.placement import Dedicated, Placement
from reach.ports.cluster import Cluster
from reach.ports.supervisors import SupervisorPort
from reach.records import SupervisorStatus, TaskResult
from reach.replies import read_task_result
from reach.schemas import PayloadLike, payload_body, schema_registry

M = TypeVar("M", bound=BaseModel)
#: The type of a task's value, as its handle reads it (``Any`` when not known).
V = TypeVar("V", default=Any)


@dataclass(frozen=True)
class ChildSpec:
    """An agent a supervisor starts, watches and restarts.

    Attributes:
        agent: The agent class.
        agent_id: Its ID (unique while it lives).
        placement: Where it runs: a :class:`~reach.placement.Placement` (``Dedicated()`` by
            default, or ``Packed(...)``).
        restart: permanent (default), transient or temporary.
        args: Positional arguments of the agent's constructor.
        kwargs: Keyword arguments of the agent's constructor.
        shutdown_timeout_s: How long its in-flight requests may finish when it is stopped.
    """

    agent: type[Agent]
    agent_id: str
    placement: Placement = field(default_factory=Dedicated)
    restart: RestartType = RestartType.PERMANENT
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    shutdown_timeout_s: float = 5.0

    @property
    def child_id(self) -> str:
        """The ID the supervisor knows this child by."""
        return self.agent_id


@dataclass(frozen=True)
class RemoteChild:
    """An agent that dials in from outside the cluster (``reach connect``, ``clients/js/``):
    a supervisor cannot start it, but watches it like its other children.

    On start, and after each death of it, the supervisor waits for it to connect (at most
    ``connect_within_s``; callers' requests wait for it meanwhile, as for a restarting agent):
    that is its restart, a new incarnation with a larger epoch. Its death is its disconnect
    outlasting the gateway's grace period (a reconnect within it is a restart its gateway does
    alone); a goodbye is a normal exit. A failure counts against the intensity like any other,
    and one that does not come back in time fails its restart. A sibling's failure never stops
    or waits for it (``one_for_all`` and ``rest_for_one`` restart only the children the
    supervisor can start); stopping the supervisor removes it from reach and closes its socket.

    Attributes:
        agent_id: The ID it connects as.
        restart: permanent (default), transient or temporary.
        connect_within_s: How long the supervisor waits for it to connect.
        shutdown_timeout_s: How long its in-flight requests may finish when it is stopped.
    """

    agent_id: str
    restart: RestartType = RestartType.PERMANENT
    connect_within_s: float = 60.0
    shutdown_timeout_s: float = 5.0

    @property
    def child_id(self) -> str:
        """The ID the supervisor knows this child by."""
        return self.agent_id


@dataclass(frozen=True)
class SupervisorSpec:
    """A supervisor: its children (agents or supervisors), strategy, intensity and policies.

    Attributes:
        name: Unique name of the supervisor (its actor is ``reach.sup.<name>``).
        children: Started in this order (a :class:`RemoteChild` waited for), stopped in the
            reverse order.
        strategy: one_for_one (default), one_for_all or rest_for_one.
        intensity: At most this many restarts in this period before giving up (1 in 5 s).
        backoff: Delays before restarts (a task's retries wait as its ``task_policy`` says).
        task_policy: Decides on task errors (any object with ``decide``).
        restart: How the parent treats this supervisor as a child.
        shutdown_timeout_s: How long stopping this supervisor's subtree may take.
        seed: Seed of the random generator for jitter (None: unpredictable).
    """

    name: str
    children: Sequence[ChildSpec | RemoteChild | SupervisorSpec] = ()
    strategy: Strategy = Strategy.ONE_FOR_ONE
    intensity: Intensity = field(default_factory=Intensity)
    backoff: Backoff = field(default_factory=Backoff)
    task_policy: TaskPolicy = field(default_factory=SeverityPolicy)
    restart: RestartType = RestartType.PERMANENT
    shutdown_timeout_s: float = 10.0
    seed: int | None = None

    @property
    def child_id(self) -> str:
        """The ID the parent knows this supervisor by."""
        return self.name


class TaskHandle(Generic[V]):
    """A submitted task: await its end with :meth:`result`, or :meth:`cancel` it.

    Args:
        supervisor: The supervisor that owns it.
        task_id: Its ID.
        returns: The model its value is read as (default: the one registered for the reply's
            schema; see :class:`~reach.records.TaskResult`).
    """

    def __init__(self, supervisor: SupervisorPort, task_id: str,
                 returns: type[BaseModel] | None = None) -> None:
        self._supervisor = supervisor
        self.task_id = task_id
        self._returns = returns

    async def result(self) -> TaskResult[V]:
        """Waits for the task's end; returns its state, value (the handler's model), partial
        flag, error and attempts.

        Raises:
            TaskNotFound: the supervisor no longer knows the task.
            AgentUnavailable: the supervisor is gone.
            InvalidPayload: the value does not validate as the model it is read as.
        """
        return read_task_result(await self._supervisor.wait_task(self.task_id), self._returns)

    async def cancel(self) -> TaskResult[V]:
        """Cancels the task and its outstanding sub-requests; returns its result.

        Raises:
            TaskNotFound: the supervisor no longer knows the task.
            InvalidPayload: the value does not validate as the model it is read as.
        """
        return read_task_result(await self._supervisor.cancel_task(self.task_id), self._returns)


class SupervisorRef:
    """A handle on a running supervisor (the root of a tree, usually).

    Get one from :meth:`Runtime.supervise`, :meth:`Runtime.find_supervisor` or, inside a
    handler, :meth:`Context.supervisor`.
    """

    def __init__(self, port: SupervisorPort, name: str, *, root: bool = False,
                 cluster: Cluster | None = None) -> None:
        self._port = port
        self.name = name
        # Started by a driver as a tree's root: stop() also ends its process.
        self._cluster = cluster if root else None

    @overload
    async def submit(self, target: str, payload: PayloadLike, schema: str | None = None, *,
                     returns: type[M], by_capability: bool = False, timeout_ms: int = 30_000,
                     retry_limit: int = 3) -> TaskHandle[M]: ...

    @overload
    async def submit(self, target: str, payload: PayloadLike, schema: str | None = None, *,
                     returns: None = None, by_capability: bool = False,
                     timeout_ms: int = 30_000, retry_limit: int = 3) -> TaskHandle[Any]: ...

    async def submit(self, target: str, payload: PayloadLike, schema: str | None = None, *,
                     returns: type[BaseModel] | None = None, by_capability: bool = False,
                     timeout_ms: int = 30_000, retry_limit: int = 3) -> TaskHandle[Any]:
        """Submits a task this supervisor owns; returns its handle at once.

        Args:
            target: An agent ID, or a capability with ``by_capability``.
            payload: A registered model, or a mapping with ``schema``.
            schema: The payload's ``name@MAJOR.MINOR`` (for a mapping).
            returns: The model the task's value is read as (default: the one registered for
                the reply's schema): ``await handle.result()`` is then a ``TaskResult`` of it.
            by_capability: Route to the least-loaded holder of ``target``, failing over on
                retries.
            timeout_ms: Budget of the whole task, every attempt and backoff included.
            retry_limit: Retries allowed after the first attempt.

        Raises:
            UnknownSchema: ``payload`` is an unregistered model and no ``schema`` is given, or
                ``returns`` is an unregistered model.
        """
        if returns is not None:
            schema_registry.ref_of(returns)  # an unregistered model is refused here, not later
        body, ref = payload_body(payload, schema)
        spec = TaskSpec(target, body, ref, by_capability, timeout_ms, retry_limit)
        task_id = await self._port.submit(spec)
        return TaskHandle(self._port, task_id, returns)

    async def status(self) -> SupervisorStatus:
        """The supervisor's state, children, restarts and tasks, with its subtree."""
        return await self._port.status()

    async def wait(self) -> None:
        """Returns only if the supervisor stops normally.

        Raises:
            RestartLimitExceeded: it exceeded its restart intensity and gave up.
        """
        info = await self._port.wait_gave_up()
        if info is not None:
            raise error_from_info(ErrorInfo.model_validate(info))

    async def stop(self) -> list[str]:
        """Stops the subtree (children in reverse start order); returns the order of stopping.

        The root of a tree (as :meth:`Runtime.supervise` returns it) then ends too, freeing its
        name; a supervisor found by name stays, stopped, for its parent to decide on.
        """
        order = await self._port.stop()
        if self._cluster is not None:
            self._cluster.kill(self._port)
        return order


__all__ = ["ChildSpec", "RemoteChild", "SupervisorRef", "SupervisorSpec", "TaskHandle"]
