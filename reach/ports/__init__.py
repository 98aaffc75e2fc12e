"""The one seam between reach's runtime and the processes it runs on: small typed ports.

The runtime (transport, directory, client, sessions, tasks, spawner, supervisors, hosts) never
talks to Ray. It talks to a :class:`~reach.ports.cluster.Cluster`, which finds, creates, calls,
watches and kills reach's processes, and to the ports it hands out, one module per concern:

- :mod:`reach.ports.endpoint`: the :class:`Endpoint` every process is (anything that takes
  frames of envelopes and can be watched for death);
- :mod:`reach.ports.hosts`: :class:`HostPort` (a host of agents), :class:`HostShape`,
  :class:`CallLimits`;
- :mod:`reach.ports.registry`: :class:`RegistryPort`;
- :mod:`reach.ports.sessions` (sessions, pending requests, recorded replies),
  :mod:`reach.ports.audit` (the audit log) and :mod:`reach.ports.a2a_tasks` (the A2A gateway's
  tasks): what the session store keeps, as three ports the Cluster hands out apart (one store
  process implements them all);
- :mod:`reach.ports.supervisors`: :class:`SupervisorPort`;
- :mod:`reach.ports.traces`: :class:`TraceStorePort` (the cluster's recent finished spans; what
  they are is :mod:`reach.spans`);
- :mod:`reach.ports.inbox`: :class:`InboxPort` (a driver's reply inbox);
- :mod:`reach.ports.cluster`: the :class:`Cluster` itself and :class:`NodeInfo`;
- :mod:`reach.ports.data`: plain data several ports carry (an error's info, a JSON object).
- :mod:`reach.ports.processes` and :mod:`reach.ports.ingress`: what features build on, knowing
  nothing of them: a :class:`Process` of a class the feature gives (which it wraps in a typed
  adapter of its own port), and an :class:`HttpService` served over the cluster's HTTP ingress.

What crosses a port is typed: records of :mod:`reach.records`, or the TypedDicts of the port's
module for what a process answers as plain data; no port takes or gives ``Any``. (A feature's
own port lives with the feature: the remote host's is :mod:`reach.remote.ports`.) A module of
reach imports the port modules it uses, not this package (which imports them all).

Two implementations exist, as httpx has a real transport and ``MockTransport``:

- :mod:`reach._ray` runs each process as a Ray actor, and :mod:`reach._ray.ports` adapts an
  actor's handle to each port; the seam is the only part of ``reach`` that imports Ray, and it
  translates every Ray error into reach's error tree in one place;
- :mod:`reach.testing` runs them all in one event loop, with a clock the test controls, so the
  runtime's logic is proven in milliseconds without a cluster (:mod:`reach.testing.ports`
  adapts its simulated processes to each port).

Each adapter is a class mypy checks against its port, and a unit test compares every port
method's parameters with the actor's that implements it (``actors/``) and with both adapters'.

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

from reach.ports.a2a_tasks import A2ACursor, A2ATaskPort, A2ATaskRow
from reach.ports.audit import AuditEntry, AuditPort, AuditRecord
from reach.ports.cluster import Cluster, NodeInfo
from reach.ports.data import ErrorDoc, JsonObject
from reach.ports.endpoint import Delivered, Endpoint
from reach.ports.hosts import CallLimits, HandlerDoc, HostInfo, HostPort, HostShape
from reach.ports.inbox import InboxPort
from reach.ports.ingress import AsgiApp, HttpService, ServiceSettings
from reach.ports.processes import Process
from reach.ports.registry import (
    AclDoc,
    AclRuleDoc,
    CallSignature,
    RegistryPort,
    RegistryStats,
    SpareStats,
)
from reach.ports.sessions import (
    CommittedReply,
    NewMessage,
    OpenedSession,
    PendingRequest,
    RecordedReply,
    SessionsPort,
    StoreStats,
    TermsDoc,
)
from reach.ports.supervisors import SupervisorPort
from reach.ports.traces import TraceStorePort

__all__ = [
    "A2ACursor",
    "A2ATaskPort",
    "A2ATaskRow",
    "AclDoc",
    "AclRuleDoc",
    "AsgiApp",
    "AuditEntry",
    "AuditPort",
    "AuditRecord",
    "CallLimits",
    "CallSignature",
    "Cluster",
    "CommittedReply",
    "Delivered",
    "Endpoint",
    "ErrorDoc",
    "HandlerDoc",
    "HostInfo",
    "HostPort",
    "HostShape",
    "HttpService",
    "InboxPort",
    "JsonObject",
    "NewMessage",
    "NodeInfo",
    "OpenedSession",
    "PendingRequest",
    "Process",
    "RecordedReply",
    "RegistryPort",
    "RegistryStats",
    "ServiceSettings",
    "SessionsPort",
    "SpareStats",
    "StoreStats",
    "SupervisorPort",
    "TermsDoc",
    "TraceStorePort",
]
