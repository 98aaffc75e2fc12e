"""One replica of the A2A gateway: an ASGI application on the official SDK.

The cluster's HTTP ingress serves it (:mod:`reach.gateway.deploy`: Ray Serve on Ray); a test
runs it on the fake cluster. Each replica holds a reach client of its own (a
:class:`reach.Runtime`: an inbox, a directory, a transport) and owns the tasks it runs.

HTTP surface (paths under :attr:`GatewayOptions.base_url`):

==========================================================  ===================================
``GET /.well-known/agent-card.json``                         the router's card (public)
``POST /``                                                   JSON-RPC 1.0, by capability
``GET /agents/{agent_id}/.well-known/agent-card.json``       an agent's card (public; 404 when
                                                             no such agent)
``POST /agents/{agent_id}``                                  JSON-RPC 1.0, to that agent
``GET /observe``, ``/observe/api/...``                       the observer: a live page of the
                                                             cluster (:mod:`reach.observe`; the
                                                             page and its assets are public)
==========================================================  ===================================

Every call but the cards needs ``Authorization: Bearer <token>`` (when ``auth``; refused with 401
and a JSON body saying why) and a body of at most ``max_body_bytes`` (refused with 413 and a
JSON-RPC error before it is read as JSON). The JSON-RPC binding, the SSE streams and the error
responses are the SDK's, behind reach's intake (:mod:`reach.a2a.server.intake`: strict JSON, and no
internals in a -32603); clients send ``A2A-Version: 1.0`` (the SDK's clients do), reach answers
A2A 1.0 only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from functools import partial
from typing import Any

from a2a.server.request_handlers.response_helpers import (
    agent_card_to_dict,
    build_error_response,
)
from a2a.server.routes import create_agent_card_routes
from a2a.server.tasks import TaskStore
from a2a.types.a2a_pb2 import AgentCard
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH
from a2a.utils.errors import InvalidRequestError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from reach._runtime.names import GATEWAY_PREFIX, INBOX_PREFIX, REMOTE_PREFIX
from reach._runtime.tasks import cancel_trace_everywhere
from reach._runtime.trail import AuditTrail
from reach._version import __version__
from reach.a2a.server.cards import agent_card, router_card
from reach.a2a.server.catalog import Catalog
from reach.a2a.server.executor import ReachExecutor
from reach.a2a.server.handler import (
    PRINCIPAL_SCOPE_KEY,
    ContextBuilder,
    FreshFirstStore,
    Planner,
    ReachRequestHandler,
)
from reach.a2a.server.intake import jsonrpc_routes
from reach.a2a.server.task_store import ReachTaskStore, recent_tasks
from reach.driver import Driver
from reach.errors import AgentUnavailable, ConfigError, ReachError
from reach.observe.routes import ObserverRoutes, is_observer_api, is_public
from reach.observe.sampler import Sampler
from reach.ports.cluster import Cluster
from reach.ports.hosts import CallLimits
from reach.remote.channel import ChannelOptions, channel_routes
from reach.remote.host import start_remote_host
from reach.security.keys import Keyring
from reach.web.auth import ANONYMOUS, bearer_token, principal_for
from reach.web.options import GatewayOptions

log = logging.getLogger("reach.gateway")

#: How long past a task's budget a subscription from another replica keeps following it (its
#: replica may be writing its end).
FOLLOW_GRACE_S = 5.0
#: How long a probe of another replica's liveness waits (a live one's watch never ends).
LIVENESS_PROBE_S = 0.3


class GatewayServer:
    """One gateway replica (see the module's docstring).

    Args:
        cluster: The deployment.
        options: The gateway's settings.

    Raises:
        ConfigError: ``options.auth`` while signing is off: tokens are derived from the
            deployment's keyring, and without signing there is none.
    """

    def __init__(self, cluster: Cluster, options: GatewayOptions) -> None:
        self._watch: asyncio.Task[None] | None = None
        guard = cluster.guard()
        if options.auth and guard is None:
            raise ConfigError(
                "the gateway's auth needs a keyring: its bearer tokens are derived from the "
                "deployment's keyring, and signing is off (no keyring)",
                suggestion="start reach with signing on (the default), or the gateway with "
                           "auth=False",
                details={"setting": "auth"})
        self.options = options
        self.cluster = cluster
        self._keyring: Keyring | None = guard.keyring if options.auth and guard else None
        self.runtime = Driver(cluster, CallLimits(default_timeout_ms=options.timeout_ms))
        self.catalog = Catalog(cluster.registry(), cluster.host)
        self.trail = AuditTrail(cluster)
        self.executor = ReachExecutor(self.runtime.link, options, self._cancel_trace,
                                      audit=self._audit,
                                      replica=f"{INBOX_PREFIX}{self.runtime.driver_id}")
        self.store = FreshFirstStore(shared_task_store(cluster))
        self.handler = ReachRequestHandler(self.executor, self.store, self._sdk_card(),
                                           Planner(self.catalog, self.runtime.link),
                                           alive=self._replica_alive,
                                           follow_s=options.timeout_ms / 1000 + FOLLOW_GRACE_S)
        # The host of the remote agents that connect through this replica (their WebSockets).
        self._channel = ChannelOptions()
        self.remote_host = start_remote_host(
            cluster, f"{REMOTE_PREFIX}{self.runtime.driver_id}",
            CallLimits(default_timeout_ms=options.timeout_ms), self._channel.grace_s,
            self._channel.queue_limit)
        #: The observer's looks at the cluster (only while a page watches).
        self.sampler = Sampler(cluster, traces=cluster.trace_store,
                               tasks=partial(recent_tasks, cluster.a2a_tasks()))
        #: The routes under the gate (the channel's WebSocket route passes it untouched: the
        #: channel checks the token itself).
        self.starlette = self._routes()
        self._gate = _Gate(self.starlette, self._keyring, options.max_body_bytes,
                           observers=options.observers)

    @property
    def app(self) -> ASGIApp:
        """The ASGI application (a property: Ray Serve's ingress wrapper has one of this name,
        and a subclass must not shadow it with an attribute)."""
        return self._gate

    # -- the application -------------------------------------------------------------------

    def _sdk_card(self) -> AgentCard:
        # The card the SDK checks capabilities on: every endpoint may stream (a reply that is
        # not a stream comes as one chunk).
        card = router_card([], self.options.base_url, name=self.options.name,
                           auth=self.options.auth, version=__version__)
        card.capabilities.streaming = True
        return card

    def _routes(self) -> Starlette:
        builder = ContextBuilder()
        depth = self.options.max_json_depth
        routes = [
            *channel_routes(self.cluster, self.options, self.remote_host, self._channel),
            *create_agent_card_routes(self._sdk_card(), card_modifier=self._router_card),
            Route("/agents/{agent_id}" + AGENT_CARD_WELL_KNOWN_PATH, self._agent_card,
                  methods=["GET"]),
            *jsonrpc_routes(self.handler, "/", builder, max_depth=depth),
            *jsonrpc_routes(self.handler, "/agents/{agent_id}", builder, max_depth=depth),
            *ObserverRoutes(self.sampler).routes(),
        ]
        return Starlette(routes=routes)

    async def _router_card(self, _card: AgentCard) -> AgentCard:
        return router_card(await self.catalog.views(), self.options.base_url,
                           name=self.options.name, auth=self.options.auth, version=__version__)

    async def _agent_card(self, request: Request) -> Response:
        agent_id = request.path_params["agent_id"]
        view = await self.catalog.view(agent_id, fresh=True)
        if view is None:
            return JSONResponse({"error": "not_found",
                                 "message": f"no agent {agent_id!r} is registered"},
                                status_code=404)
        card = agent_card(view, self.options.base_url, auth=self.options.auth,
                          version=__version__)
        return JSONResponse(agent_card_to_dict(card))

    # -- reach -------------------------------------------------------------------------------

    async def _cancel_trace(self, trace_id: str, reason: str) -> None:
        """Cancels every handler of a trace on every live host."""
        await cancel_trace_everywhere(self.cluster, trace_id, reason)

    def _audit(self, record: dict[str, Any]) -> None:
        self.trail.record(record["caller"], record["callee"], capability=record["capability"],
                          msg_type=record["msg_type"], outcome=record["outcome"],
                          trace_id=record["trace_id"] or None)

    async def health(self) -> None:
        """Returns while this replica can talk to reach.

        Raises:
            AgentUnavailable: its reply inbox died (its replies cannot reach it any more).
        """
        if self._watch is None:
            inbox = self.cluster.endpoint(f"{INBOX_PREFIX}{self.runtime.driver_id}")
            self._watch = asyncio.ensure_future(inbox.watch())
            self._watch.add_done_callback(_quiet)
        if self._watch.done():
            failure = None if self._watch.cancelled() else self._watch.exception()
            raise AgentUnavailable(f"this gateway replica's reply inbox is gone: {failure}",
                                   suggestion="the replica is restarted by Ray Serve")

    async def _replica_alive(self, name: str) -> bool:
        """Whether the gateway replica called ``name`` (its reply inbox) lives: a watch of a
        live endpoint does not end; a dead or unknown one's ends (or fails) at once."""
        try:
            await asyncio.wait_for(self.cluster.endpoint(name).watch(), LIVENESS_PROBE_S)
        except TimeoutError:
            return True
        except ReachError:
            return False
        return False

    async def close(self) -> None:
        """Drains the running tasks, lets what was sent leave, and stops receiving (safe after a
        constructor that failed half way: Serve calls it on every replica it stops)."""
        if self._watch is not None:
            self._watch.cancel()
        if hasattr(self, "sampler"):
            await self.sampler.close()
        if hasattr(self, "handler"):
            await self.handler.aclose()
        if not hasattr(self, "runtime"):
            return
        await self.runtime.close()
        await self.trail.flush()
        try:
            self.cluster.kill(self.cluster.endpoint(f"{INBOX_PREFIX}{self.runtime.driver_id}"))
            if hasattr(self, "remote_host"):
                self.cluster.kill(self.remote_host)
        except ReachError as exc:  # gone already
            log.debug("the inbox or remote host of a closing gateway replica: %s", exc)


def shared_task_store(cluster: Cluster) -> TaskStore:
    """The task store the replicas share: A2A tasks kept by reach's session store (they
    outlive a replica, and any replica answers for them)."""
    return ReachTaskStore(cluster.a2a_tasks())


def _not_an_observer(principal: str) -> JSONResponse:
    """The answer to an observer's data asked for with a token not named an observer's."""
    return JSONResponse({"error": "forbidden", "reason": "not_an_observer",
                         "message": f"{principal} may not read the observer's data: use the "
                                    "token of a name in the gateway's observers setting "
                                    "(reach observe prints one)"}, status_code=403)


def _quiet(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


class _Gate:
    """The ASGI middleware every request passes: the bearer token (not for cards, nor for the
    observer's page and assets), then the body's size (before anything reads it)."""

    def __init__(self, app: ASGIApp, keyring: Keyring | None, max_body: int, *,
                 observers: Sequence[str] = ()) -> None:
        self._app = app
        self._keyring = keyring
        self._max_body = max_body
        self._observers = frozenset(f"{GATEWAY_PREFIX}{name}" for name in observers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        public = (scope["method"] in ("GET", "HEAD") and scope["path"].endswith(
            AGENT_CARD_WELL_KNOWN_PATH)) or is_public(scope["method"], scope["path"])
        principal = ANONYMOUS if public or self._keyring is None else self._principal(scope)
        if principal is None:
            await self._refuse(scope, receive, send)
            return
        if (self._keyring is not None and is_observer_api(scope["path"])
                and principal not in self._observers):
            await _not_an_observer(principal)(scope, receive, send)
            return
        scope[PRINCIPAL_SCOPE_KEY] = principal
        if scope["method"] == "POST":
            receive = await self._bounded(scope, receive, send)  # type: ignore[assignment]
            if receive is None:
                return
        await self._app(scope, receive, send)

    def _principal(self, scope: Scope) -> str | None:
        assert self._keyring is not None
        token = bearer_token(_header(scope, b"authorization"))
        return None if token is None else principal_for(self._keyring, token)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        given = _header(scope, b"authorization")
        reason = ("missing_token" if given is None else
                  "invalid_token" if bearer_token(given) is not None else "not_bearer")
        why = {"missing_token": "no Authorization header: send 'Authorization: Bearer <token>'",
               "not_bearer": "the Authorization header is not 'Bearer <token>'",
               "invalid_token": "the bearer token is not valid for this deployment"}[reason]
        await JSONResponse({"error": "unauthorized", "reason": reason, "message": why},
                           status_code=401,
                           headers={"WWW-Authenticate": 'Bearer realm="reach"'})(
            scope, receive, send)

    async def _bounded(self, scope: Scope, receive: Receive, send: Send) -> Receive | None:
        """``receive`` when the body is within the limit (read ahead when its length is not
        declared), else None once a 413 is sent."""
        declared = _header(scope, b"content-length")
        if declared is not None and declared.isdigit():
            if int(declared) > self._max_body:
                await self._too_large(scope, receive, send, int(declared))
                return None
            return receive
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return receive
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self._max_body:
                await self._too_large(scope, receive, send, size)
                return None
            if not message.get("more_body", False):
                break
        return _replay(b"".join(chunks), receive)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send, size: int) -> None:
        error = InvalidRequestError(
            message=f"the request body ({size} bytes) is larger than the gateway takes "
                    f"({self._max_body} bytes)",
            data={"max_body_bytes": str(self._max_body), "reach_code": "codec_error"})
        await JSONResponse(build_error_response(None, error), status_code=413)(
            scope, receive, send)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


__all__ = ["GatewayServer", "shared_task_store"]
