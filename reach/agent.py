"""The Agent base class a user subclasses, the ``@handler`` decorator, and where agents run
(the placements, defined in :mod:`reach.placement`).

Example::

    class OrderAgent(reach.Agent):
        capabilities = ("order.query",)
        description = "Answers questions about an order's status. Needs an order ID."

        @reach.handler(OrderQuery, returns=OrderStatus)
        async def query(self, ctx: reach.Context, q: OrderQuery) -> OrderStatus:
            return OrderStatus(order_id=q.order_id, status="shipped")

A handler bound to ``order.query@1.2`` receives any ``order.query@1.x`` payload (see
:mod:`reach.schemas`). A handler written as an async generator streams its reply in chunks.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, TypeVar

from pydantic import BaseModel, ValidationError

from policies.priorities import check_priorities
from policies.sessions import Limits, PendingAction
from reach.errors import InvalidPayload, ReachError, SchemaError, SchemaIncompatible
from reach.placement import Dedicated, Packed, Placement
from reach.protocol import Envelope
from reach.schemas import SchemaRef, schema, schema_registry

F = TypeVar("F", bound=Callable[..., Any])

#: The schema of plain text: a handler that reads it takes text from callers that send only
#: words (an A2A text part, through the gateway).
TEXT_SCHEMA = "reach.text@1.0"


@schema(TEXT_SCHEMA)
class Text(BaseModel):
    """A plain text payload (``reach.text@1.0``).

    A handler bound to it declares that it reads text: the A2A gateway hands it the text parts of
    a message, and a reply of this model travels back as a text part too.

    Example::

        @reach.handler(reach.Text, returns=reach.Text)
        async def chat(self, ctx: reach.Context, m: reach.Text) -> reach.Text:
            return reach.Text(text=m.text.upper())

    Attributes:
        text: The words.
    """

    text: str


def reads_text(ref: str) -> bool:
    """Whether a handler bound to ``ref`` reads text (any minor of ``reach.text@1``)."""
    parsed = SchemaRef.parse(ref)
    text = SchemaRef.parse(TEXT_SCHEMA)
    return (parsed.name, parsed.major) == (text.name, text.major)


@dataclass(frozen=True)
class HandlerSpec:
    """What a handler reads and returns; the models travel with the agent class to its host."""

    method: str
    reads: str
    model: type[BaseModel] | None
    returns: str | None
    returns_model: type[BaseModel] | None
    streaming: bool
    once: bool = False

    def read(self, payload: Mapping[str, Any], declared: str) -> BaseModel | dict[str, Any]:
        """Validates a payload declared as ``declared`` with this handler's reader model.

        Raises:
            SchemaIncompatible: name or major differ from what the handler reads.
            InvalidPayload: the payload does not validate.
        """
        got, want = SchemaRef.parse(declared), SchemaRef.parse(self.reads)
        if (got.name, got.major) != (want.name, want.major):
            raise SchemaIncompatible(
                f"handler {self.method} reads {want} but the payload is {got}",
                details={"declared": str(got), "reader": str(want)},
            )
        if self.model is None:
            return dict(payload)
        try:
            return self.model.model_validate(payload)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}"
                for e in exc.errors(include_url=False)[:5]
            )
            raise InvalidPayload(
                f"payload does not match {got}: {problems}", details={"declared": str(got)}
            ) from exc


def handler(reads: type[BaseModel] | str, *, returns: type[BaseModel] | str | None = None,
            once: bool = False) -> Callable[[F], F]:
    """Binds an async method (or async generator, for streaming) to a payload schema.

    Args:
        reads: The payload model (registered with :func:`reach.schema`) or a schema ref; with a
            ref alone the handler receives the payload as a dict.
        returns: The reply model or schema ref; needed only when the handler returns a dict.
        once: Effectively-once: the handler runs at most once per request ID, and a retry of
            the request gets the recorded reply (always so for requests within a session).

    Raises:
        UnknownSchema: a model is given that is not registered.
        SchemaError: the decorated function is not async.
    """

    def decorate(fn: F) -> F:
        if not (inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn)):
            raise SchemaError(f"handler {fn.__qualname__} must be an async def")
        reads_ref, model = _resolve(reads)
        ret_ref, ret_model = _resolve(returns) if returns is not None else (None, None)
        fn.__reach_handler__ = HandlerSpec(  # type: ignore[attr-defined]
            fn.__name__, reads_ref, model, ret_ref, ret_model, inspect.isasyncgenfunction(fn),
            once,
        )
        return fn

    return decorate


def _resolve(schema: type[BaseModel] | str) -> tuple[str, type[BaseModel] | None]:
    if isinstance(schema, str):
        return str(SchemaRef.parse(schema)), None
    return schema_registry.ref_of(schema), schema


class HostHooks(Protocol):
    """What the host running an agent does for it, when the agent asks (through
    :meth:`Agent.exit` and :meth:`Agent._reach_available`). reach's hosts implement it; an
    agent's own code never calls it."""

    def agent_exit(self, agent_id: str, normal: bool, reason: str) -> None:
        """Ends the agent once its current handler returns; its supervisor sees the exit as
        ``normal`` or not, with ``reason``."""
        ...

    def agent_available(self, agent_id: str, available: bool) -> None:
        """Marks the agent online or offline in the registry, as it reported itself; an
        unavailable agent is left out of its host's heartbeats (which would mark it online)."""
        ...


class Agent:
    """Base class of every reach agent.

    Class attributes:
        capabilities: Dotted capability tags, e.g. ``("order.query", "order.refund")``; or a
            priority for each, e.g. ``{"refund.issue": 0, "refund.status": 1}``: 0 the primary,
            1, 2... backups (a send by capability goes to the lowest priority with a live
            holder). A tuple's tags are all at 0. Either way, once the class is defined it
            holds the tags as a tuple, and :attr:`capability_priorities` their priorities (a
            priority that is not an int of at least 0 is a ConfigError as the class is defined).
        capability_priorities: The priority of each tag declared as a mapping (empty for a
            tuple); read it, do not change it.
        description: What the agent is good at, what it is not, and its preconditions.

    The host sets :attr:`id` before :meth:`on_start`. Handlers are methods decorated with
    :func:`handler`.
    """

    capabilities: ClassVar[tuple[str, ...] | Mapping[str, int]] = ()
    # A plain dict: a class defined in a script travels to its hosts by value, and a read-only
    # mapping proxy would not pickle.
    capability_priorities: ClassVar[Mapping[str, int]] = {}
    description: ClassVar[str] = ""
    #: What this agent accepts when another opens a session with it.
    session_limits: ClassVar[Limits] = Limits()
    #: What to do, after a restart, with session requests it had sent and not seen answered.
    pending_policy: ClassVar[PendingAction] = PendingAction.RESEND
    _handlers: ClassVar[dict[tuple[str, int], HandlerSpec]] = {}
    id: str = ""
    #: The host running this agent, set by that host before :meth:`on_start` (None outside a
    #: host). Private to reach: :meth:`exit` and :meth:`_reach_available` go through it.
    _reach_hooks: HostHooks | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        handlers: dict[tuple[str, int], HandlerSpec] = {}
        for klass in reversed(cls.__mro__):
            for value in vars(klass).values():
                spec: HandlerSpec | None = getattr(value, "__reach_handler__", None)
                if spec is None:
                    continue
                ref = SchemaRef.parse(spec.reads)
                key = (ref.name, ref.major)
                clash = handlers.get(key)
                if clash is not None and clash.method != spec.method and klass is cls:
                    raise SchemaError(
                        f"{cls.__qualname__} has two handlers for {ref.name}@{ref.major}.x: "
                        f"{clash.method} and {spec.method}"
                    )
                handlers[key] = spec
        cls._handlers = handlers
        declared, own = cls.capabilities, "capabilities" in vars(cls)
        cls.capabilities = tuple(declared)
        if isinstance(declared, Mapping):
            cls.capability_priorities = check_priorities(cls.capabilities, declared)
        elif own:  # a tuple here: all primaries, whatever a base class declared
            cls.capability_priorities = {}

    @classmethod
    def handler_specs(cls) -> list[HandlerSpec]:
        """The handlers of this agent class."""
        return list(cls._handlers.values())

    @classmethod
    def handler_for(cls, declared: str) -> HandlerSpec:
        """The handler that reads payloads declared as ``declared``.

        Raises:
            SchemaError: ``declared`` is malformed.
            SchemaIncompatible: no handler reads that schema's name and major (fatal).
        """
        ref = SchemaRef.parse(declared)
        spec = cls._handlers.get((ref.name, ref.major))
        if spec is None:
            reads = ", ".join(sorted(s.reads for s in cls._handlers.values())) or "nothing"
            raise SchemaIncompatible(
                f"{cls.__qualname__} has no handler for {ref}; it reads {reads}",
                details={"declared": str(ref)},
            )
        return spec

    @classmethod
    def schema_models(cls) -> dict[str, type[BaseModel]]:
        """Every model this agent reads or returns, by ref (re-registered in its host process)."""
        models: dict[str, type[BaseModel]] = {}
        for spec in cls._handlers.values():
            if spec.model is not None:
                models[spec.reads] = spec.model
            if spec.returns is not None and spec.returns_model is not None:
                models[spec.returns] = spec.returns_model
        return models

    def exit(self, *, normal: bool = True, reason: str = "") -> None:
        """Ends this agent once the current handler returns (its reply still goes out).

        Its supervisor sees a normal exit (``normal=True``: a transient child is not restarted)
        or an abnormal one. Outside a host this does nothing.
        """
        if self._reach_hooks is not None:
            self._reach_hooks.agent_exit(self.id, normal, reason)

    def _reach_available(self, available: bool) -> None:
        """Tells the host whether calls should come to this agent (private to reach: an A2A
        proxy reports with it whether its remote agent answers). One reported unavailable is
        marked offline in the registry until it reports itself available again. Outside a host
        this does nothing."""
        if self._reach_hooks is not None:
            self._reach_hooks.agent_available(self.id, available)

    async def on_recovered(self, request: Envelope, reply: Envelope | None,
                           error: ReachError | None) -> None:
        """Called after a restart for each pending session request this agent had sent: with
        the reply if it was resent and answered, or with the error if it was cancelled."""

    async def on_start(self) -> None:
        """Called once in the host after the agent is constructed and before it is registered."""

    async def on_stop(self) -> None:
        """Called once when the agent is stopped."""


__all__ = ["TEXT_SCHEMA", "Agent", "Dedicated", "HandlerSpec", "HostHooks", "Packed", "Placement",
           "Text", "handler", "reads_text"]
