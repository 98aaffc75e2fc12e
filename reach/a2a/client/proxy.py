"""Remote A2A agents as reach agents: a proxy agent per remote, called like any other.

Example::

    record = await rt.connect_a2a("http://refunds.example:4000")  # reads its agent card
    reply = await rt.client.request_capability(
        "refunds.issue", A2AMessage(data={"order_id": "A-1024"}))
    print(reply.value.data, reply.value.state)

:func:`connect` reads the remote agent's card (with the a2a-sdk card resolver) and spawns an
:class:`A2AProxy`, an ordinary :class:`~reach.Agent` in an ordinary host, so it is found by ID
or capability, called with deadlines, supervised, retried and failed over, and its calls audited
like any other agent's. Its ID is the card's name made an ID (``Refund Agent`` ->
``refund-agent``, or ``agent_id=``), its capabilities the card's skill IDs and tags as dotted
tags, its description the card's (see :mod:`reach.a2a.client.mapping`). For a supervision
tree, :func:`proxy_spec` gives the same proxy as a :class:`~reach.ChildSpec`.

A proxy reads :class:`~reach.a2a.client.models.A2AMessage` (``a2a.message@1.0``, answered
with an ``A2AReply``), plain :class:`~reach.Text` (answered with the reply's text), and, when the
card says the agent streams, ``A2AStreamRequest`` (``a2a.stream@1.0``, streamed as ``A2AEvent``
chunks). Each request sends A2A ``SendMessage`` (``SendStreamingMessage`` for the stream) through
the a2a-sdk client, with reach's trace ID and caller in the message's metadata
(``{"reach": {"trace_id": ..., "sender": ...}}``, the key under which reach's gateway answers its
own trace ID) and the request's deadline as its timeout. The proxy probes its remote (a fetch of
its card) every ``probe_interval_s``; after ``probe_misses`` unanswered probes in a row its host
marks it offline in the registry (callers get a retryable ``AgentUnavailable`` at once,
discovery skips it), and the first answered probe marks it online again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import httpx
from a2a.client import ClientCallContext, ClientConfig, ClientFactory
from a2a.client.auth import AuthInterceptor, CredentialService
from a2a.client.card_resolver import A2ACardResolver
from a2a.client.client import Client as A2AClient
from a2a.types.a2a_pb2 import AgentCard, GetTaskRequest, SendMessageRequest
from opentelemetry.trace import SpanKind

from policies.backoff import poll_delay
from policies.priorities import check_priority
from policies.supervision import RestartType
from reach._runtime.names import check_agent_ids
from reach.a2a.client.errors import check_reply, error_for
from reach.a2a.client.mapping import (
    BINDINGS,
    RUNNING,
    Health,
    after_probe,
    agent_id_for,
    answered,
    build_request,
    capabilities_for,
    card_location,
    check_card,
    event_from,
    parse_card,
    probe_url_for,
    reply_from,
)
from reach.a2a.client.models import (
    A2AEvent,
    A2AEventKind,
    A2AMessage,
    A2AReply,
    A2AState,
    A2AStreamRequest,
)
from reach.a2a.tracing import a2a_span, send_traceparent
from reach.agent import Agent, Packed, Placement, Text, handler
from reach.context import Context
from reach.driver import Driver
from reach.errors import AgentUnavailable, ConfigError, ReachError, RequestTimeout
from reach.records import AgentRecord
from reach.spans import Attr
from reach.specs import ChildSpec

log = logging.getLogger("reach.a2a.client.proxy")

#: Where proxies run unless told otherwise: a pool of their own, apart from the default pool's
#: agents (a proxy is light: one HTTP client; its calls wait on the network, not the CPU).
DEFAULT_PLACEMENT = Packed(pool="a2a")
#: How long a proxy waits for one probe's answer, and for the card when connecting.
PROBE_TIMEOUT_S = 2.0
#: How long a call made for a notification (which has no deadline) may take.
NOTIFY_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class ProxyConfig:
    """Everything a proxy needs, read from the card once by :func:`connect` (it travels to the
    proxy's host, and to every restart of it).

    Attributes:
        card: The remote agent's card (the serialized proto).
        card_url: Where the card was read (None when it was given, not fetched).
        capabilities: The proxy's capability tags.
        token: A credential for the remote, sent as its card's security scheme asks (a bearer
            token or an API key header), or as a bearer token when the card names none.
        headers: Extra HTTP headers for every call.
        probe_interval_s: Seconds between probes of the remote.
        probe_misses: Unanswered probes in a row before the proxy is marked offline.
    """

    card: bytes
    card_url: str | None
    capabilities: tuple[str, ...]
    token: str | None = field(default=None, repr=False)
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    probe_interval_s: float = 5.0
    probe_misses: int = 2

    def __post_init__(self) -> None:
        if self.probe_interval_s <= 0:
            raise ConfigError(f"probe_interval_s must be positive, got {self.probe_interval_s}",
                              details={"setting": "probe_interval_s"})
        if self.probe_misses < 1:
            raise ConfigError(f"probe_misses must be at least 1, got {self.probe_misses}",
                              details={"setting": "probe_misses"})


class _Token(CredentialService):
    """The one credential the proxy has, for whichever scheme the card asks for."""

    def __init__(self, token: str) -> None:
        self._token = token

    async def get_credentials(self, security_scheme_name: str,
                              context: ClientCallContext | None) -> str | None:
        return self._token


class A2AProxy(Agent):
    """A reach agent that stands for a remote A2A agent: each request it handles is a call to
    the remote (see the module's docstring). Made by :func:`connect` or :func:`proxy_spec`.

    Args:
        config: What :func:`connect` read from the remote's card.
    """

    #: How the proxy's HTTP client reaches its remote: None, the network; a subclass may give
    #: an in-process transport (httpx's ``ASGITransport`` or ``MockTransport``), as a test
    #: on virtual time must, where a real socket's answer would come after the timeouts.
    http_transport: ClassVar[httpx.AsyncBaseTransport | None] = None

    def __init__(self, config: ProxyConfig) -> None:
        self.config = config
        self.card = parse_card(config.card)
        self.remote = probe_url_for(self.card, config.card_url)
        # Capabilities and description are the card's, so this instance's: the host reads them
        # from the agent, not its class.
        self.__dict__.update(capabilities=config.capabilities, description=self.card.description)
        self._http: httpx.AsyncClient | None = None
        self._clients: dict[bool, A2AClient] = {}
        self._health = Health()
        self._probe_now = asyncio.Event()
        self._prober: asyncio.Task[None] | None = None
        self._rng = random.Random()

    async def on_start(self) -> None:
        """Opens the HTTP client and starts probing the remote."""
        headers = dict(self.config.headers)
        if self.config.token and not self.card.security_requirements:
            headers.setdefault("Authorization", f"Bearer {self.config.token}")
        self._http = httpx.AsyncClient(headers=headers, timeout=PROBE_TIMEOUT_S,
                                       transport=self.http_transport,
                                       event_hooks={"request": [send_traceparent]})
        interceptors = [AuthInterceptor(_Token(self.config.token))] if self.config.token else []
        for streaming in (False, True):
            factory = ClientFactory(ClientConfig(
                streaming=streaming, httpx_client=self._http,
                supported_protocol_bindings=list(BINDINGS)))
            self._clients[streaming] = factory.create(self.card, list(interceptors))
        self._prober = asyncio.get_running_loop().create_task(self._probe_forever(self._http))

    async def on_stop(self) -> None:
        """Stops probing and closes the HTTP client."""
        if self._prober is not None:
            self._prober.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._prober
        if self._http is not None:
            await self._http.aclose()

    @handler(A2AMessage, returns=A2AReply)
    async def send(self, ctx: Context, message: A2AMessage) -> A2AReply:
        """Sends the message (``SendMessage``); the remote's answer, once its task ends or waits
        for the caller.

        Raises:
            ReachError: the call failed (see :func:`~reach.a2a.client.errors.error_for`),
                or the remote's task failed, was rejected or canceled.
        """
        call = self._call_context(ctx)
        try:
            reply = A2AReply(state=A2AState.UNKNOWN)
            with a2a_span("SendMessage", SpanKind.CLIENT,
                          attributes={Attr.AGENT_ID: self.id, Attr.RECEIVER: self.remote}):
                async for response in self._clients[False].send_message(
                        self._request(ctx, message), context=call):
                    reply = reply_from(response)
            attempt = 0
            while reply.state in RUNNING and reply.task_id:  # answered before the task ended
                await asyncio.sleep(poll_delay(attempt, self._rng))
                task = await self._clients[False].get_task(GetTaskRequest(id=reply.task_id),
                                                           context=self._call_context(ctx))
                reply, attempt = reply_from(task), attempt + 1
        except Exception as exc:
            raise self._failed(exc) from exc
        check_reply(reply.state, reply.text, reply.task_id, self.remote)
        return reply

    @handler(Text, returns=Text)
    async def say(self, ctx: Context, message: Text) -> Text:
        """Sends the words as a text part (for callers that speak only text, and the gateway's
        text parts); the text of the remote's answer.

        Raises:
            ReachError: as :meth:`send`.
        """
        reply = await self.send(ctx, A2AMessage(text=message.text))
        return Text(text=reply.text)

    def _request(self, ctx: Context, message: A2AMessage) -> SendMessageRequest:
        env = ctx.request_envelope
        return build_request(message, trace_id=ctx.trace_id, sender=env.sender,
                             session_id=env.session_id)

    @staticmethod
    def _call_context(ctx: Context) -> ClientCallContext:
        left = ctx.remaining_ms()
        return ClientCallContext(
            timeout=NOTIFY_TIMEOUT_S if left is None else max(left, 1.0) / 1000)

    def _failed(self, exc: BaseException) -> ReachError:
        """The reach error for a failed call; a remote that did not answer is probed at once."""
        error = error_for(exc, self.remote)
        if isinstance(error, AgentUnavailable | RequestTimeout):
            self._probe_now.set()
        return error

    async def _probe_forever(self, http: httpx.AsyncClient) -> None:
        while True:
            status: int | None = None
            try:
                status = (await http.get(self.remote)).status_code
            except httpx.HTTPError as exc:
                log.debug("probe of %s failed: %s", self.remote, exc)
            was = self._health.available
            self._health = after_probe(self._health, answered(status), self.config.probe_misses)
            if self._health.available != was:
                log.warning("remote A2A agent %s (%s) is %s", self.id, self.remote,
                            "back" if self._health.available else "not answering")
            self._report(self._health.available)
            self._probe_now.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._probe_now.wait(), self.config.probe_interval_s)

    def _report(self, available: bool) -> None:
        """Tells the host whether calls should come here (it marks the registry)."""
        self._reach_available(available)


class A2AStreamingProxy(A2AProxy):
    """The proxy of a remote agent whose card says it streams: it also streams replies."""

    @handler(A2AStreamRequest, returns=A2AEvent)
    async def stream(self, ctx: Context, message: A2AStreamRequest) -> AsyncIterator[A2AEvent]:
        """Sends the message (``SendStreamingMessage``) and yields each event as it arrives.

        Raises:
            ReachError: the call failed, or the stream ended with the task failed, rejected or
                canceled (after the events before it).
        """
        state, last = A2AState.SUBMITTED, A2AEvent(kind=A2AEventKind.STATUS, state=A2AState.UNKNOWN)
        try:
            async for response in self._clients[True].send_message(
                    self._request(ctx, message), context=self._call_context(ctx)):
                last = event_from(response, state)
                state = last.state
                yield last
        except Exception as exc:
            raise self._failed(exc) from exc
        check_reply(state, last.text, last.task_id, self.remote)


async def read_card(url_or_card: str | AgentCard | Mapping[str, Any], *,
                    headers: Mapping[str, str] | None = None,
                    timeout_s: float = PROBE_TIMEOUT_S) -> tuple[AgentCard, str | None]:
    """A remote agent's card, and the URL it was read from (None for a card given).

    ``url_or_card``: the URL of the card itself (ending in ``.json`` or under
    ``/.well-known/``), the agent's base URL (its card at ``/.well-known/agent-card.json``),
    the card's JSON object, or its proto.

    Raises:
        AgentUnavailable: the card could not be fetched (no answer, or 5xx).
        AgentNotFound: nothing is served at that URL (404).
        AuthError: the server refused to show the card (401, 403).
        ProtocolError: what was served is not an A2A agent card.
    """
    if not isinstance(url_or_card, str):
        return parse_card(url_or_card), None
    base, relative = card_location(url_or_card)
    async with httpx.AsyncClient(headers=dict(headers or {}), timeout=timeout_s) as http:
        try:
            card = await A2ACardResolver(http, base).get_agent_card(relative_card_path=relative)
        except Exception as exc:
            raise error_for(exc, url_or_card) from exc
    return card, url_or_card


async def proxy_spec(url_or_card: str | AgentCard | Mapping[str, Any], *,
                     agent_id: str | None = None, token: str | None = None,
                     headers: Mapping[str, str] | None = None,
                     capabilities: Sequence[str] | None = None,
                     placement: Placement | None = None,
                     restart: RestartType = RestartType.PERMANENT,
                     probe_interval_s: float = 5.0, probe_misses: int = 2,
                     priority: int | Mapping[str, int] | None = None) -> ChildSpec:
    """The proxy of a remote A2A agent as a child of a supervision tree (the card is read now;
    the arguments are those of :func:`connect`).

    Raises:
        ConfigError: the card offers no interface the proxy speaks, or no skill to make a
            capability of (and no ``capabilities=`` is given), or a probe setting is invalid,
            or ``agent_id`` uses a prefix reserved for reach's own processes, or ``priority``
            is not valid for the proxy's capabilities.
        AgentUnavailable, AgentNotFound, AuthError, ProtocolError: as :func:`read_card`.
    """
    if agent_id is not None:  # before the card is read (a name from a card is never reserved)
        check_agent_ids(agent_id)
    card, card_url = await read_card(url_or_card, headers=headers)
    check_card(card)
    config = ProxyConfig(
        card.SerializeToString(), card_url,
        tuple(capabilities) if capabilities is not None else capabilities_for(card),
        token, dict(headers or {}), probe_interval_s, probe_misses)
    if priority is not None:  # the proxy's tags are its card's, not its class's
        check_priority(priority, config.capabilities)
    cls = A2AStreamingProxy if card.capabilities.streaming else A2AProxy
    return ChildSpec(cls, agent_id or agent_id_for(card), placement or DEFAULT_PLACEMENT,
                     restart, kwargs={"config": config}, priority=priority)


async def connect(runtime: Driver, url_or_card: str | AgentCard | Mapping[str, Any], *,
                  agent_id: str | None = None, token: str | None = None,
                  headers: Mapping[str, str] | None = None,
                  capabilities: Sequence[str] | None = None,
                  placement: Placement | None = None,
                  probe_interval_s: float = 5.0, probe_misses: int = 2,
                  priority: int | Mapping[str, int] | None = None) -> AgentRecord:
    """Makes a remote A2A agent a reach agent: reads its card and spawns its proxy.

    Args:
        runtime: The driver's runtime.
        url_or_card: The card's URL, the agent's base URL, or the card (see :func:`read_card`).
        agent_id: The proxy's ID (default: from the card's name).
        token: A credential for the remote (see :class:`ProxyConfig`).
        headers: Extra HTTP headers for every call (and for reading the card).
        capabilities: The proxy's capability tags (default: from the card's skills).
        placement: Where the proxy runs (default: :data:`DEFAULT_PLACEMENT`).
        probe_interval_s: Seconds between probes of the remote.
        probe_misses: Unanswered probes in a row before the proxy is marked offline.
        priority: The priority of the proxy's capabilities (one for all, or one by tag; 0 by
            default, the primary's): ``priority=1`` makes the remote agent a backup of reach's
            own holders of them.

    Returns:
        The proxy's registry record.

    Raises:
        AgentAlreadyExists: an agent with that ID is live.
        ConfigError: the card offers no interface the proxy speaks, or no skill to make a
            capability of (and no ``capabilities=`` is given), or a probe setting is invalid,
            or ``agent_id`` uses a prefix reserved for reach's own processes, or ``priority``
            is not valid for the proxy's capabilities.
        AgentUnavailable, AgentNotFound, AuthError, ProtocolError: as :func:`read_card`.
    """
    spec = await proxy_spec(url_or_card, agent_id=agent_id, token=token, headers=headers,
                            capabilities=capabilities, placement=placement,
                            probe_interval_s=probe_interval_s, probe_misses=probe_misses,
                            priority=priority)
    return await runtime.spawn(spec.agent, spec.agent_id, placement=spec.placement,
                               kwargs=spec.kwargs, priority=spec.priority)


__all__ = [
    "DEFAULT_PLACEMENT",
    "A2AProxy",
    "A2AStreamingProxy",
    "ProxyConfig",
    "connect",
    "proxy_spec",
    "read_card",
]
