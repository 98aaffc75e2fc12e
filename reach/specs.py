"""What a user asks reach to run, as it travels to the process that runs it: a supervision tree
(:class:`SupervisorSpec` of :class:`ChildSpec` and :class:`RemoteChild`) and a task
(:class:`TaskSpec`).

Example::

    tree = reach.SupervisorSpec("shop", children=[
        reach.ChildSpec(OrderAgent, "order-1", placement=reach.Packed()),
        reach.ChildSpec(RefundAgent, "refund-1", restart=reach.RestartType.TRANSIENT),
    ], strategy=reach.Strategy.ONE_FOR_ONE, intensity=reach.Intensity(3, 10))
    sup = await rt.supervise(tree)

Plain frozen records (they pickle: a supervisor is started with its spec, and a task's spec is
sent to the supervisor that owns it), below the ports that carry them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from policies.backoff import Backoff
from policies.priorities import check_priority
from policies.supervision import DEFAULT_RESET_S, Intensity, RestartType, Strategy
from policies.tasks import SeverityPolicy, TaskPolicy
from reach.agent import Agent
from reach.placement import Dedicated, Placement


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
        priority: The priority of its capabilities in place of what its class declares, in
            every incarnation: one for all of them, or one per capability tag (those left out
            keep the class's); 0 is the primary, 1, 2... backups. None: the class's.

    Raises:
        ConfigError: ``priority`` is not an int of at least 0, or names a capability the class
            does not declare.
    """

    agent: type[Agent]
    agent_id: str
    placement: Placement = field(default_factory=Dedicated)
    restart: RestartType = RestartType.PERMANENT
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    shutdown_timeout_s: float = 5.0
    priority: int | Mapping[str, int] | None = None

    def __post_init__(self) -> None:
        if self.priority is not None:  # refused here, not at the child's first start
            check_priority(self.priority, tuple(self.agent.capabilities))

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
        backoff: Delays before a child's restart when it fails again within ``backoff_reset_s``
            of its last one (its own restarts in a row, not its siblings'; a task's retries wait
            as its ``task_policy`` says).
        task_policy: Decides on task errors (any object with ``decide``).
        restart: How the parent treats this supervisor as a child.
        shutdown_timeout_s: How long stopping this supervisor's subtree may take.
        seed: Seed of the random generator for jitter (None: unpredictable).
        backoff_reset_s: How long a child must run after a restart for its next failure to be
            restarted at once again (10 s; 0: every failure is restarted at once, as in OTP).
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
    backoff_reset_s: float = DEFAULT_RESET_S

    @property
    def child_id(self) -> str:
        """The ID the parent knows this supervisor by."""
        return self.name


@dataclass(frozen=True)
class TaskSpec:
    """What to do: send ``payload`` to ``target`` (an agent ID, or a capability).

    Attributes:
        target: Agent ID, or capability tag when ``by_capability``.
        payload: The request payload (a mapping valid under ``schema``).
        schema: The payload's ``name@MAJOR.MINOR``.
        by_capability: Route to the least-loaded holder of ``target``, failing over on retries.
        timeout_ms: Budget of the whole task, every attempt and backoff included.
        retry_limit: Retries allowed after the first attempt.
    """

    target: str
    payload: dict[str, Any]
    schema: str
    by_capability: bool = False
    timeout_ms: int = 30_000
    retry_limit: int = 3


__all__ = ["ChildSpec", "RemoteChild", "SupervisorSpec", "TaskSpec"]
