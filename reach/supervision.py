"""The handles on running supervisors and on the tasks they own (a tree is declared with the
specs of :mod:`reach.specs`).

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

from typing import Any, Generic, overload

from pydantic import BaseModel
from typing_extensions import TypeVar

from reach.errors import ErrorInfo, error_from_info
from reach.ports.cluster import Cluster
from reach.ports.supervisors import SupervisorPort
from reach.records import SupervisorStatus, TaskResult
from reach.replies import read_task_result
from reach.schemas import PayloadLike, payload_body, schema_registry
from reach.specs import TaskSpec

M = TypeVar("M", bound=BaseModel)
#: The type of a task's value, as its handle reads it (``Any`` when not known).
V = TypeVar("V", default=Any)




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


__all__ = ["SupervisorRef", "TaskHandle"]
