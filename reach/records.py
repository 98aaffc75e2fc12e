"""What crosses a process boundary or reaches a user, typed: one module of frozen records.

Every status is a StrEnum here and nowhere else; every record is a frozen dataclass that pickles
(they travel between Ray processes) and that :func:`dataclasses.asdict` turns into JSON-ready
data (``reach status --json``):

- :class:`AgentRecord` and :class:`AgentStatus`: what the registry knows of an agent;
- :class:`AgentExit`: how an agent left its host, as its supervisor hears it;
- :class:`TaskResult`, :class:`Attempt` and :class:`AttemptOutcome`: a supervisor-owned task's
  outcome and history (a result's value, once its handle has read it as the handler's model, is
  that model: JSON-ready through its ``model_dump(mode="json")``);
- :class:`SupervisorStatus`, :class:`ChildStatus`, :class:`RestartRecord` and
  :class:`SupervisorState`: a supervision tree as it runs;
- :class:`DeadLetter`: a message that could not be delivered, and why;
- :class:`SessionContext`, :class:`SessionResume` and :class:`SessionMessage`: a session read back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Generic

from typing_extensions import TypeVar

from reach.errors import ErrorInfo


class AgentStatus(StrEnum):
    """Where an agent is in its life, as the registry sees it."""

    ONLINE = "online"
    """Registered and heartbeating: calls go to it."""
    RESTARTING = "restarting"
    """Its supervisor is restarting it: callers wait for it, up to their deadlines."""
    RECOVERING = "recovering"
    """Unknown to a registry that restarted and is rebuilding its table from heartbeats."""
    OFFLINE = "offline"
    """Its host missed its heartbeats, or its restart failed: calls fail at once."""


@dataclass(frozen=True, slots=True)
class AgentRecord:
    """What the registry knows of an agent.

    Attributes:
        agent_id: The agent's ID.
        capabilities: Its capability tags.
        description: Its natural-language self-description.
        host: Name of the host it lives in (empty for a placeholder).
        node: ID of the node of that host.
        status: Where it is in its life.
        load: Requests in flight, as of its host's last heartbeat.
        epoch: Incarnation number, larger after each restart.
        priorities: The priority of each capability, in the order of ``capabilities``: 0 the
            primary, 1, 2... backups (sends by capability prefer the lowest live one). Empty
            when every capability is at 0.
    """

    agent_id: str
    capabilities: tuple[str, ...] = ()
    description: str = ""
    host: str = ""
    node: str = ""
    status: AgentStatus = AgentStatus.ONLINE
    load: int = 0
    epoch: int = 0
    priorities: tuple[int, ...] = ()

    @property
    def online(self) -> bool:
        """Whether calls go to it now."""
        return self.status is AgentStatus.ONLINE

    def priority_of(self, capability: str) -> int:
        """The priority at which it holds one of its capability tags (0 for a tag it does not
        hold, and when it declares no priorities)."""
        if self.priorities and capability in self.capabilities:
            return self.priorities[self.capabilities.index(capability)]
        return 0


@dataclass(frozen=True, slots=True)
class AgentExit:
    """How an agent left its host: normally (stopped, or ``Agent.exit()``) or not."""

    normal: bool
    reason: str


class AttemptOutcome(StrEnum):
    """How one try of a task ended."""

    RUNNING = "running"
    OK = "ok"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class Attempt:
    """One try of a task: the agent it went to, when, how it ended, and what was decided.

    Attributes:
        agent_id: The agent (empty when no agent could be chosen).
        started: When it was sent (epoch seconds).
        ended: When it ended (0 while it runs).
        outcome: Running, ok or error.
        code: The error's code, for an error.
        severity: The error's severity, for an error.
        reason: The error's message, for an error.
        decision: What the task's policy decided (``retry``, ``degrade``, ``abort``, ``fail``).
        why: The policy's reason for that decision, in words.
    """

    agent_id: str
    started: float
    ended: float = 0.0
    outcome: AttemptOutcome = AttemptOutcome.RUNNING
    code: str = ""
    severity: str = ""
    reason: str = ""
    decision: str = ""
    why: str = ""


class TaskState(StrEnum):
    """Where a task is in its life."""

    INITIALIZED = "initialized"
    RUNNING = "running"
    COMPLETED = "completed"
    DEGRADED = "degraded"
    FAILED = "failed"
    CANCELLED = "cancelled"


#: The type of a task's value: the handler's model (``Any`` when not known).
V = TypeVar("V", default=Any)


@dataclass(frozen=True, slots=True)
class TaskResult(Generic[V]):
    """A task's outcome: its state, value (partial when degraded), error and every attempt.

    As a :class:`~reach.replies.Reply` does, it carries what crosses processes as plain data:
    the supervisor sends the reply's payload and schema, and the task's handle reads them as the
    handler's model where the result arrives (see :meth:`reach.TaskHandle.result`), so that a
    supervisor never needs the models of the agents it sends tasks to.

    Attributes:
        task_id: The task's ID (also the trace ID of all its messages).
        state: Where the task is: initialized, running, completed, degraded, failed or
            cancelled.
        value: The reply (completed) as the handler's model: the model the task was submitted
            with (``returns=``), else the one registered for the reply's schema, else a dict;
            or the partial result (degraded), as the ``returns=`` model if one was given, else
            a dict. As the supervisor sends it, before a handle reads it: the payload, a dict.
        partial: Whether ``value`` is a partial result.
        error: Why it did not complete.
        attempts: Every try, in order.
        submitted: When it was submitted (epoch seconds).
        finished: When it ended (0 while it runs).
        schema: The schema the reply declared (empty for a partial result, which declares
            none): what ``value`` is read by.
    """

    task_id: str
    state: TaskState
    value: V | None = None
    partial: bool = False
    error: ErrorInfo | None = None
    attempts: tuple[Attempt, ...] = ()
    submitted: float = 0.0
    finished: float = 0.0
    schema: str = ""


class SupervisorState(StrEnum):
    """Where a supervisor is in its life."""

    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"
    FAILED = "failed"
    """It gave up (restart intensity exceeded) or its children failed to start."""
    UNREACHABLE = "unreachable"
    """Its status could not be read (its process is gone, or it did not answer)."""


class ChildKind(StrEnum):
    """What a supervisor's child is."""

    AGENT = "agent"
    SUPERVISOR = "supervisor"


class RestartPlacement(StrEnum):
    """Where a restarted child went."""

    DEDICATED = "dedicated"
    PACKED = "packed"
    SUPERVISOR = "supervisor"
    REMOTE = "remote"  # a remote child that connected again


@dataclass(frozen=True, slots=True)
class ChildStatus:
    """A live child of a supervisor."""

    child_id: str
    kind: ChildKind
    host: str | None
    restart: str


@dataclass(frozen=True, slots=True)
class RestartRecord:
    """One restart a supervisor made.

    Attributes:
        child: The child restarted.
        at: When (epoch seconds).
        placement: Where it went.
        latency_s: From the exit's detection to the child running again.
        reason: Why it exited (or ``sibling restarted``).
    """

    child: str
    at: float
    placement: RestartPlacement
    latency_s: float
    reason: str


@dataclass(frozen=True, slots=True)
class SupervisorStatus:
    """A supervisor's state, children, restarts and tasks, with its subtree.

    Attributes:
        name: Its name.
        state: Where it is in its life.
        node: Its node's ID (empty when unknown).
        strategy: one_for_one, one_for_all or rest_for_one.
        children: Its live children, in start order.
        restarts: The restarts it made, oldest first.
        tasks: Its tasks by state.
        subtree: The status of each child supervisor, by child ID.
        detail: Why it is unreachable, for an unreachable one.
    """

    name: str
    state: SupervisorState
    node: str = ""
    strategy: str = ""
    children: tuple[ChildStatus, ...] = ()
    restarts: tuple[RestartRecord, ...] = ()
    tasks: Mapping[str, int] = field(default_factory=dict)
    subtree: Mapping[str, SupervisorStatus] = field(default_factory=dict)
    detail: str = ""


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A message that could not be delivered.

    Attributes:
        msg_id: The message's ID.
        msg_type: request, notification, response...
        sender: Who sent it.
        receiver: Who it was for.
        trace_id: Its trace.
        code: The code of the error that stopped it.
        reason: That error's message.
        at: When it was given up (epoch seconds).
        kills: For a ``poison`` letter (a request quarantined because it killed its agent's
            process), how many incarnations of the agent it killed; 0 for any other.
    """

    msg_id: str
    msg_type: str
    sender: str
    receiver: str
    trace_id: str | None
    code: str
    reason: str
    at: float
    kills: int = 0


@dataclass(frozen=True, slots=True)
class A2ATaskSummary:
    """An A2A task of the gateway, as the cluster's operators see it (the observer).

    Attributes:
        task_id: The task's ID.
        owner: The caller that owns it (the principal its gateway token names).
        context_id: Its A2A context.
        state: A2A's task state, lower case without its prefix (``completed``, ``working``...).
        updated: Its status timestamp (epoch seconds; None if it has none).
        target: The agent ID or capability it was sent to (empty when not recorded).
        trace_id: Its trace (empty when not recorded).
    """

    task_id: str
    owner: str
    context_id: str
    state: str
    updated: float | None
    target: str = ""
    trace_id: str = ""


@dataclass(frozen=True, slots=True)
class SessionMessage:
    """One message of a session, numbered by the session's sequence."""

    seq: int
    msg_id: str
    sender: str
    kind: str
    payload: Mapping[str, Any]
    schema: str
    at: float


@dataclass(frozen=True, slots=True)
class SessionContext:
    """A session's summary, terms and last messages.

    Attributes:
        session_id: The session.
        initiator: The party that opened it.
        responder: The party it was opened with.
        summary: What the folded (compacted) messages said.
        terms: The negotiated terms.
        folded_upto: The last sequence number folded into the summary.
        next_seq: The sequence number the next message gets.
        messages: The last messages asked for, oldest first.
    """

    session_id: str
    initiator: str
    responder: str
    summary: str
    terms: Mapping[str, Any]
    folded_upto: int
    next_seq: int
    messages: tuple[SessionMessage, ...]


@dataclass(frozen=True, slots=True)
class SessionResume:
    """What follows a sequence number in a session.

    Attributes:
        session_id: The session.
        folded: Whether part of what followed was folded into the summary already.
        summary: The summary, when ``folded``.
        messages: The messages after the sequence number (still unfolded), oldest first.
    """

    session_id: str
    folded: bool
    summary: str
    messages: tuple[SessionMessage, ...]


__all__ = [
    "A2ATaskSummary",
    "AgentExit",
    "AgentRecord",
    "AgentStatus",
    "Attempt",
    "AttemptOutcome",
    "ChildKind",
    "ChildStatus",
    "DeadLetter",
    "RestartPlacement",
    "RestartRecord",
    "SessionContext",
    "SessionMessage",
    "SessionResume",
    "SupervisorState",
    "SupervisorStatus",
    "TaskResult",
]
