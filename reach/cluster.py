"""The one seam between reach's runtime and the processes it runs on: a small typed interface.

The runtime (transport, directory, client, sessions, tasks, spawner, supervisors, hosts) never
talks to Ray. It talks to a :class:`Cluster`, which finds, creates, calls, watches and kills
reach's processes, and to the typed ports it hands out: :class:`HostPort` (a host of agents),
:class:`RegistryPort`, :class:`StorePort`, :class:`SupervisorPort`, and the :class:`Endpoint`
every one of them is (anything that takes frames of envelopes and can be watched for death).

Two implementations exist, as httpx has a real transport and ``MockTransport``:

- :mod:`reach._ray` runs each process as a Ray actor; it is the only module of ``reach`` that
  imports Ray, and it translates every Ray error into reach's error tree in one place;
- :mod:`reach.testing` runs them all in one event loop, with a clock the test controls, so the
  runtime's logic is proven in milliseconds without a cluster.

A call on a port starts when it is made (a port method is not a coroutine function: it returns
an awaitable of a call already under way), so a caller that does not await a fire-and-forget
call (a dead letter, an audit record) still makes it. Every failure of a call arrives as a
:class:`~reach.errors.ReachError`: :class:`~reach.errors.AgentUnavailable` when the process is
dead or unreachable, the remote side's own ReachError otherwise, or the exception an agent's
constructor raised when a host could not start it.

A host need not be a Ray actor: anything implementing :class:`HostPort` (a gateway replica
holding WebSockets to agents outside the cluster, a proxy of a remote A2A agent) is routed to,
batched to, supervised and audited like any other host.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from reach.records import (
    AgentExit,
    AgentRecord,
    DeadLetter,
    SessionContext,
    SessionResume,
    SupervisorStatus,
    TaskResult,
)

if TYPE_CHECKING:
    from reach._runtime.tasks import TaskSpec
    from reach.agent import Agent
    from reach.remote.wire import Attached, Hello, WireRefusal
    from reach.security.guard import Guard, SecurityConfig
    from reach.supervision import SupervisorSpec
    from reach.web.options import GatewayOptions

#: What ``deliver`` returns: the IDs of requests for agents not there (re-route them), and a
#: frame of the replies that were ready at once (or None).
Delivered = tuple[list[str], bytes | None]


class Endpoint(Protocol):
    """Anything that takes frames of envelopes: a host, a driver's inbox, a supervisor, the store.

    Attributes:
        name: Its name, where replies to it are sent.
    """

    name: str

    def deliver(self, frame: bytes, reply_to: str) -> Awaitable[Delivered]:
        """Hands over a frame of envelopes (see :data:`Delivered`)."""
        ...

    def watch(self) -> Awaitable[None]:
        """Returns when the endpoint stops; fails (AgentUnavailable) the moment it dies."""
        ...


class HostPort(Endpoint, Protocol):
    """A host of agents: one (dedicated) or many (a pool host)."""

    def add_agents(self, cls: type[Agent], agent_ids: list[str], args: tuple[Any, ...],
                   kwargs: dict[str, Any], epochs: dict[str, int] | None = None,
                   ) -> Awaitable[list[AgentRecord]]:
        """Constructs, starts and registers agents, each with an epoch of at least ``epochs``'
        (when given); their records (AgentAlreadyExists, or what a constructor raised, on
        failure: nothing is then added)."""
        ...

    def remove_agents(self, agent_ids: list[str], timeout_s: float) -> Awaitable[int]:
        """Deregisters agents, lets their handlers finish, drops them; how many were here."""
        ...

    def watch_agent(self, agent_id: str) -> Awaitable[AgentExit]:
        """Returns when the agent leaves this host (fails if the host dies)."""
        ...

    def cancel_trace(self, trace_id: str, reason: str) -> Awaitable[int]:
        """Cancels every running handler of a trace; how many."""
        ...

    def count(self) -> Awaitable[int]:
        """How many agents are here."""
        ...

    def stop(self, timeout_s: float) -> Awaitable[None]:
        """Removes every agent gracefully and releases the watches."""
        ...

    def flush_audit(self) -> Awaitable[int]:
        """Writes the buffered audit records now; how many."""
        ...

    def info(self) -> Awaitable[dict[str, Any]]:
        """Agents here with their loads, transport counters and resident memory (for tools)."""
        ...

    def describe(self, agent_ids: list[str]) -> Awaitable[dict[str, list[dict[str, Any]]]]:
        """The handlers of these agents (those here): for each, a list of
        ``{"schema", "returns", "streaming", "reads_text", "json_schema"}``."""
        ...

    def offer_as_spare(self, shape: str) -> Awaitable[None]:
        """Offers this empty host to the registry as a warm spare of ``shape`` (until it is
        given agents), heartbeating so that a dead spare is never handed out for long."""
        ...

    def preload(self, classes: list[type[Agent]]) -> Awaitable[int]:
        """Keeps agent classes this host is likely to be given loaded, ahead of their agents;
        how many it keeps."""
        ...


class RegistryPort(Protocol):
    """The registry: who is where, with which capabilities, and whether they are alive.

    Calls that change it are signed by their caller (``principal``, ``data``, ``sig``: see
    :func:`reach.security.guard.signed_call`).
    """

    def lookup(self, agent_id: str, newer_than: int = -1,
               wait_s: float = 0.0) -> Awaitable[AgentRecord | None]:
        """One agent's record; None if unknown; status ``recovering`` if it may yet appear.
        With ``wait_s``, waits (a long poll) while it restarts or its epoch is not above
        ``newer_than``, answering the moment its new incarnation registers."""
        ...

    def discover(self, capability: str, text: str | None, limit: int | None,
                 ) -> Awaitable[tuple[list[AgentRecord], list[str]]]:
        """Online holders of a capability, best first, and close tags when there are none."""
        ...

    def agents(self) -> Awaitable[list[AgentRecord]]:
        """Every record, sorted by agent ID."""
        ...

    def hosts(self) -> Awaitable[list[str]]:
        """Names of the hosts alive by their heartbeats."""
        ...

    def register_many(self, principal: str, data: bytes, sig: Any) -> Awaitable[list[int]]:
        """Registers agents (signed ``[records, exclusive]``); their epochs."""
        ...

    def deregister(self, principal: str, data: bytes, sig: Any) -> Awaitable[int]:
        """Removes agents of a host (signed ``[agent_ids, host]``); how many."""
        ...

    def heartbeat(self, principal: str, data: bytes, sig: Any,
                  ) -> Awaitable[tuple[list[str], float, int]]:
        """A host's signed loads; the agents unknown here, the interval, the ACL's version."""
        ...

    def mark(self, principal: str, data: bytes, sig: Any) -> Awaitable[None]:
        """Sets agents' status (signed ``[agent_ids, status]``, by a supervisor or driver)."""
        ...

    def set_acl(self, principal: str, data: bytes, sig: Any) -> Awaitable[int]:
        """Replaces the ACL (signed by a driver); its version."""
        ...

    def acl(self) -> Awaitable[tuple[int, dict[str, Any] | None]]:
        """The ACL's version and document (None: allow all)."""
        ...

    def check_key(self, principal: str, data: bytes, sig: Any) -> Awaitable[None]:
        """Verifies a driver's signature (AuthError ``bad_signature`` when its keyring is not
        the cluster's)."""
        ...

    def configure(self, interval_s: float, misses: int) -> Awaitable[None]:
        """Changes the heartbeat interval and miss count."""
        ...

    def dead_letter(self, letters: list[DeadLetter]) -> Awaitable[None]:
        """Records undeliverable messages (callers need not await it)."""
        ...

    def dead_letters(self, limit: int) -> Awaitable[list[DeadLetter]]:
        """The most recent dead letters, oldest first."""
        ...

    def stats(self) -> Awaitable[dict[str, Any]]:
        """Counts and memory (for tools and benchmarks)."""
        ...

    def offer_spare(self, principal: str, data: bytes, sig: Any) -> Awaitable[None]:
        """An empty host offers itself as a warm spare (signed ``[node, shape]`` by the host)."""
        ...

    def claim_spare(self, shape: str, node: str | None) -> Awaitable[str | None]:
        """Takes a live spare of ``shape``, on ``node`` if there is one there, else on any node;
        its name, or None."""
        ...

    def claim_nonce(self, principal: str, data: bytes, sig: Any) -> Awaitable[bool]:
        """Claims a hello nonce for every gateway replica (signed ``[nonce, expires_at]`` by a
        remote agents' host): True the first time, False when it is held already (a replay);
        AgentUnavailable (``nonce_limit``) when the registry holds as many as it may."""
        ...

    def spares(self) -> Awaitable[dict[str, list[str]]]:
        """The spares offered, as ``{"<node> <shape>": [host names]}``."""
        ...


class StorePort(Endpoint, Protocol):
    """The session store: sessions, pending requests, recorded replies, the audit log, and the
    A2A gateway's tasks (each a serialized ``Task``, owned by one caller)."""

    def open_session(self, session_id: str, initiator: str, responder: str,
                     terms: dict[str, Any], limits: dict[str, Any]) -> Awaitable[dict[str, Any]]:
        """Negotiates and records a session; its ID and agreed terms."""
        ...

    def append_many(self, appends: list[tuple[str, list[dict[str, Any]]]],
                    ) -> Awaitable[list[list[int] | dict[str, Any]]]:
        """Several appends; each gets its sequence numbers or its error's info."""
        ...

    def context(self, session_id: str, last_n: int) -> Awaitable[SessionContext]:
        """The summary and the last ``last_n`` messages."""
        ...

    def since(self, session_id: str, seq: int, limit: int | None) -> Awaitable[SessionResume]:
        """What follows ``seq``."""
        ...

    def add_pending(self, request_id: str, *, agent_id: str, receiver: str, session_id: str,
                    envelope: dict[str, Any], deadline: float | None) -> Awaitable[None]:
        """Records a request sent and not yet answered."""
        ...

    def resolve_pending(self, request_id: str, status: str) -> Awaitable[bool]:
        """Ends a pending request (answered or cancelled); False if it had ended."""
        ...

    def pending_for(self, agent_id: str) -> Awaitable[list[dict[str, Any]]]:
        """Open requests an agent had sent, oldest first."""
        ...

    def reply_for(self, request_id: str) -> Awaitable[dict[str, Any] | None]:
        """The recorded reply of a request (``agent_id``, ``payload``, ``schema``), or None."""
        ...

    def claim(self, request_id: str, agent_id: str) -> Awaitable[int]:
        """Claims a request to run its handler; a fencing token, greater than every earlier
        claim's of the request (durably)."""
        ...

    def commit_reply(self, request_id: str, token: int, agent_id: str, payload: dict[str, Any],
                     schema: str) -> Awaitable[dict[str, Any]]:
        """Records a handler's reply if ``token`` is still the request's latest claim and no
        reply is recorded yet: ``{"committed": bool, "reply": <the recorded reply or None>}``."""
        ...

    def audit(self, records: list[dict[str, Any]]) -> Awaitable[list[int]]:
        """Appends records to the hash-chained audit log (callers need not await it)."""
        ...

    def audit_records(self, trace_id: str | None, agent: str | None,
                      limit: int) -> Awaitable[list[dict[str, Any]]]:
        """Audit records, oldest first: all, or those of one trace or one agent."""
        ...

    def a2a_save(self, task_id: str, owner: str, *, context_id: str, state: int,
                 updated: int | None, doc: bytes) -> Awaitable[None]:
        """Saves (inserts or replaces) an A2A task of ``owner``: its context, ``TaskState``
        number, status timestamp in epoch nanoseconds (None if none) and serialized ``Task``;
        AuthError if the task ID is another owner's."""
        ...

    def a2a_save_many(self, rows: list[tuple[str, str, str, int, int | None, bytes]],
                      ) -> Awaitable[list[bool]]:
        """Saves A2A tasks in order, in one commit (each row ``(task_id, owner, context_id,
        state, updated, doc)``); for each, whether it was saved (False: another owner's ID)."""
        ...

    def a2a_get(self, task_id: str, owner: str) -> Awaitable[bytes | None]:
        """An A2A task's serialized ``Task``, if ``owner`` has that task."""
        ...

    def a2a_list(self, owner: str, *, context_id: str = "", state: int = 0,
                 updated_after: int | None = None, page_size: int,
                 after: tuple[int | None, str] | None = None, inclusive: bool = False,
                 ) -> Awaitable[tuple[list[bytes], tuple[int | None, str] | None, int]]:
        """A page of an owner's A2A tasks, by status timestamp then task ID, both descending
        (tasks without a timestamp last), filtered by context, state and timestamp (``""``,
        0, None: no filter), starting past the position ``after`` (``(updated, task_id)``; at
        it if ``inclusive``): the page, the position of its last task if more follow, and how
        many tasks pass the filters in all."""
        ...

    def a2a_delete(self, task_id: str, owner: str) -> Awaitable[bool]:
        """Deletes an A2A task of ``owner``; False if the owner had none."""
        ...


class InboxPort(Endpoint, Protocol):
    """Where replies to a driver land (a driver cannot take calls itself)."""

    def take(self) -> Awaitable[list[bytes]]:
        """Waits for at least one frame, then returns every frame queued."""
        ...


class SupervisorPort(Endpoint, Protocol):
    """A running supervisor."""

    def start(self) -> Awaitable[list[str]]:
        """Starts its children in order; the order."""
        ...

    def stop(self) -> Awaitable[list[str]]:
        """Stops its children in reverse order; the order."""
        ...

    def wait_gave_up(self) -> Awaitable[dict[str, Any] | None]:
        """Returns when it ends: None if stopped, the error's info if it gave up."""
        ...

    def submit(self, spec: TaskSpec) -> Awaitable[str]:
        """Starts a task it owns; its ID."""
        ...

    def wait_task(self, task_id: str) -> Awaitable[TaskResult]:
        """Waits for a task's end."""
        ...

    def cancel_task(self, task_id: str) -> Awaitable[TaskResult]:
        """Cancels a task and its outstanding sub-requests."""
        ...

    def status(self) -> Awaitable[SupervisorStatus]:
        """Its state, children, restarts and tasks, with its subtree."""
        ...


class RemoteHostPort(HostPort, Protocol):
    """The host of the remote agents connected through one gateway replica (one per replica).

    The replica holds the WebSockets and only bridges them; this host registers the agents,
    heartbeats their loads, queues what is sent to them (a bounded queue each), sends what they
    send into reach, and is watched like any host (an agent's disconnect is its death once the
    grace period passes; a reconnect within it is its restart). Calls about a connection name it
    (``conn``, from :meth:`attach`): a call about a replaced connection does nothing.
    """

    def attach(self, hello: Hello, principal: str) -> Awaitable[Attached | WireRefusal]:
        """Verifies a hello (signature, window, nonce) and registers its agent (or restarts it,
        within its grace period); the refusal, audited, when it cannot."""
        ...

    def take(self, ready: dict[str, str]) -> Awaitable[dict[str, str | None]]:
        """A long poll over the replica's connections able to write (``{agent_id: conn}``):
        waits until one has envelopes queued, then returns, for each that has, the text of one
        ``envelope`` or ``batch`` frame of them, and None for each connection that is over
        (replaced, removed, stopped); returns at once, possibly empty, when poked."""
        ...

    def poke(self) -> Awaitable[None]:
        """Ends the poll in progress (the replica's set of ready connections grew)."""
        ...

    def put(self, batches: list[tuple[str, str, list[dict[str, Any]]]],
            ) -> Awaitable[dict[str, list[dict[str, Any]]]]:
        """Takes envelopes agents sent (``[(agent_id, conn, envelopes)]``: replies, requests,
        notifications) into reach; the ``error`` frames of those refused, by agent."""
        ...

    def detach(self, agent_id: str, conn: str, reason: str, goodbye: bool) -> Awaitable[None]:
        """The connection ended: with ``goodbye`` the agent leaves now (a normal exit), else it
        may come back within the grace period."""
        ...

    def refused(self, principal: str, agent_id: str, reason: str) -> Awaitable[None]:
        """Audits a connection the replica refused by itself (malformed or oversize frames, a
        frame after goodbye, a missing token)."""
        ...

    def hand_over(self, agent_id: str, to: str) -> Awaitable[list[list[Any]] | None]:
        """Lets a disconnected agent in its grace period go to the host ``to`` it reconnected
        through (another replica's): its open requests and queued envelopes as
        ``[reply_to, taken, envelope]`` (``reply_to`` None for what is not a request), not
        failed; its watchers see its restart. None if it is connected here, or not here."""
        ...


@dataclass(frozen=True)
class HostShape:
    """How a new host is placed and what it reserves.

    Attributes:
        num_cpus: CPUs reserved (the platform's default when None).
        num_gpus: GPUs reserved.
        memory: Bytes of memory reserved.
        resources: Custom resources required of its node.
        node_id: The node it should run on.
        node_strict: Only that node (otherwise: prefer it, go elsewhere when it is gone).
        lasting: A pool host: named, shared, outlives its creator. When it dies it is not
            restarted by the platform (so that its death is known at once): whoever needs it
            starts it again under the same name (see the spawner).
    """

    num_cpus: float | None = None
    num_gpus: float | None = None
    memory: int | None = None
    resources: Mapping[str, float] = field(default_factory=dict)
    node_id: str | None = None
    node_strict: bool = False
    lasting: bool = False


@dataclass(frozen=True)
class NodeInfo:
    """A node of the cluster: its ID, whether it is alive, and its total resources."""

    node_id: str
    alive: bool
    resources: Mapping[str, float]


@dataclass(frozen=True)
class CallLimits:
    """Settings every host and supervisor of a deployment shares.

    Attributes:
        max_hops: Longest call chain accepted.
        default_timeout_ms: Timeout of requests that give none.
        spares: Warm spare hosts kept ready per node and resource shape of dedicated agents
            (0: none; a dedicated agent's restart then waits for a new process).
    """

    max_hops: int = 16
    default_timeout_ms: int = 30_000
    spares: int = 1


class Cluster(Protocol):
    """Finds, creates, watches and kills reach's processes, and hands out typed ports.

    A Cluster pickles: a host or supervisor is started with its creator's cluster and uses it
    to reach the others; the deployment's security settings travel with it.

    Attributes:
        security: The deployment's security settings.
    """

    security: SecurityConfig

    def guard(self) -> Guard | None:
        """This process's guard for the deployment (None when signing is off)."""
        ...

    def registry(self) -> RegistryPort:
        """The registry."""
        ...

    def store(self) -> StorePort:
        """The session store.

        Raises:
            SessionNotFound: no session store runs.
        """
        ...

    def endpoint(self, name: str) -> Endpoint:
        """A named endpoint (host, inbox, supervisor, store).

        Raises:
            AgentUnavailable: no live process has that name.
        """
        ...

    def host(self, name: str) -> HostPort:
        """A named host.

        Raises:
            AgentUnavailable: no live host has that name.
        """
        ...

    def supervisor(self, name: str) -> SupervisorPort:
        """A running supervisor by its (actor) name.

        Raises:
            AgentNotFound: none runs with that name.
        """
        ...

    def start_host(self, name: str, shape: HostShape, limits: CallLimits) -> HostPort:
        """Starts a host (or, for a lasting one, returns the live host of that name if there is
        one; a dead one's name is free again)."""
        ...

    def start_supervisor(self, spec: SupervisorSpec, parent: str | None, limits: CallLimits,
                         node_id: str) -> SupervisorPort:
        """Starts a supervisor on ``node_id`` (it starts no children until ``start``).

        Raises:
            AgentAlreadyExists: a supervisor of that name runs.
        """
        ...

    def start_inbox(self, name: str) -> InboxPort:
        """Starts a driver's reply inbox on this process's node."""
        ...

    def kill(self, port: Endpoint) -> None:
        """Ends a process at once (no graceful stop)."""
        ...

    def forget(self, name: str) -> None:
        """Drops a cached port of a name whose process died (the next lookup finds anew)."""
        ...

    def node_id(self) -> str:
        """The node this process runs on."""
        ...

    def nodes(self) -> Sequence[NodeInfo]:
        """Every node known, alive or not."""
        ...

    def restarted(self) -> bool:
        """Whether this process is a restart of a process of the same name (registry, store)."""
        ...

    def start_remote_host(self, name: str, limits: CallLimits, grace_s: float,
                          queue_limit: int) -> RemoteHostPort:
        """Starts the host of a gateway replica's remote agents (those connected over its
        WebSockets) on this process's node; it lives and dies with the process that starts it."""
        ...

    def start_gateway(self, options: GatewayOptions) -> str:
        """Starts (or updates) the A2A gateway application; returns the URL it answers at."""
        ...

    def stop_gateway(self, name: str) -> None:
        """Stops the gateway application called ``name`` (nothing when none runs)."""
        ...


__all__ = [
    "Cluster",
    "Delivered",
    "Endpoint",
    "HostPort",
    "HostShape",
    "InboxPort",
    "CallLimits",
    "NodeInfo",
    "RegistryPort",
    "RemoteHostPort",
    "StorePort",
    "SupervisorPort",
]
