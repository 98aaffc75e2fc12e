"""reach's spans, on the OpenTelemetry API: one per send, per handler run, per task attempt and
per supervisor restart, and the W3C trace context envelopes carry between them.

Tracing is off in a process until a tracer provider is given to it (:func:`use`, which
:mod:`reach._runtime.span_export` calls where tracing is configured, and a test calls with the
SDK's in-memory exporter). While it is off, :data:`TRACING`'s ``tracer`` is None, and the hot
path asks that one question and does nothing else: no span, no attribute, no copy of an
envelope. While it is on, a span's attributes are built only when it records. A trace that
reach's sampler drops travels with no context at all (no span ID, no flags, no copy of the
envelope): every reach process decides the same from its trace ID, so each hop pays a look at
that ID and nothing else. A trace sampled out by another decision (a caller's ``traceparent``
marked not sampled, of an ID reach's ratio would keep) carries its context on, so that the
spans after it are sampled out too.

An envelope carries its trace as W3C trace context: its ``trace_id`` is the trace's (32 hex
digits), ``span_id`` the span that sent it (16 hex digits: the parent of the span that handles
it) and ``trace_flags`` W3C's flags (1: sampled). A span that starts a trace takes the trace ID
of the envelope (or task) it is about, so that reach's trace IDs and OpenTelemetry's are one
(see :data:`SEED`, read by the SDK's ID generator of :mod:`reach._runtime.span_export` and by
the tracer of :mod:`reach._runtime.store_tracer`). With the latter, a send's and a handler's
spans start from their parent's IDs as they are (an envelope's hex text, the current span's)
rather than from a context made to carry them, and an envelope takes a span's IDs as it keeps
them.

A process boundary carries no context but the envelope's: a handler's span is the child of the
span in its envelope, never of whatever context the process happens to have.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TypeVar

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import (
    INVALID_SPAN,
    Link,
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    Tracer,
    TracerProvider,
)

from reach._runtime.current_span import SPAN_KEY, context_now, current_span
from reach._runtime.store_tracer import (
    KEPT_FLAGS,
    SEED,
    OwnAttributes,
    StoreSpan,
    StoreTracer,
    own_map,
)
from reach._version import __version__
from reach.errors import ReachError
from reach.protocol import TRACE_ID_BYTES, Envelope, MsgType, match_trace_id, w3c_id_bytes
from reach.spans import Attr, AttrValue, SpanName

#: The name of reach's tracer (its instrumentation scope).
TRACER_NAME = "reach"

_ID_SPACE = 1 << 64
_LOW_BITS = _ID_SPACE - 1
_NO_TRACE = "0" * 32  # (the one ID of new_id's that W3C does not allow)
_TRACE_HEX = 2 * TRACE_ID_BYTES  # (hex digits)
# The names of a handler span's attributes, as plain names (read on every traced run), and as
# plain text where a span's own attributes name them (packed as each span ends: an enum member
# takes msgpack's slower way).
_AGENT_ID, _MSG_TYPE, _PAYLOAD_SCHEMA = Attr.AGENT_ID, Attr.MSG_TYPE, Attr.PAYLOAD_SCHEMA
_SENDER, _SESSION_ID, _QUEUED_MS = (Attr.SENDER.value, Attr.SESSION_ID.value,
                                    Attr.QUEUED_MS.value)
_HANDLE = SpanName.HANDLE.value
_K = TypeVar("_K")
_V = TypeVar("_V")


class _Tracing:
    """Whether this process traces: ``tracer`` is None while it does not. ``drop_hex`` is set
    when the tracer's sampler is reach's own (parent-based, by trace ID ratio) and drops any
    trace: the ratio's bound as 16 lowercase hex digits. A new trace is dropped when its trace
    ID's low 64 bits are at or above the bound: for a W3C ID (32 lowercase hex digits), when
    its last 16 digits are, compared as text. So a trace sampled out is known without starting
    a span for it."""

    __slots__ = ("drop_hex", "tracer")

    def __init__(self) -> None:
        self.tracer: Tracer | None = None
        self.drop_hex: str | None = None


#: This process's tracing (see the module's docstring).
TRACING = _Tracing()


def use(provider: TracerProvider | None, ratio: float | None = None) -> None:
    """Traces this process's work with ``provider`` from now on (None: stops tracing).

    Args:
        provider: The tracer provider.
        ratio: The ratio of the provider's sampler, when it is reach's own (parent-based, by
            trace ID ratio, as OpenTelemetry's ``TraceIdRatioBased``); None for any other. A
            :class:`~reach._runtime.store_tracer.StoreTracer`'s own ratio is its sampler's.
    """
    tracer = None if provider is None else provider.get_tracer(TRACER_NAME, __version__)
    if type(tracer) is StoreTracer:  # reach's sampler, of the tracer's own ratio
        bound: int | None = tracer.bound
    else:
        bound = None if tracer is None or ratio is None else round(ratio * _ID_SPACE)
    TRACING.tracer = tracer
    TRACING.drop_hex = None if bound is None or bound >= _ID_SPACE else f"{bound:016x}"


def keeps(trace_id: int, bound: int) -> bool:
    """Whether a new trace of ``trace_id`` is kept under a ratio's ``bound`` (the decision of
    OpenTelemetry's ``TraceIdRatioBased``: its ID's low 64 bits below the bound)."""
    return trace_id & _LOW_BITS < bound


def trace_int(trace_id: str) -> int:
    """A W3C trace ID's value (0 for one that is not 32 lowercase hex digits)."""
    raw = w3c_id_bytes(trace_id, TRACE_ID_BYTES)
    return 0 if raw is None else int.from_bytes(raw)


def start(tracer: Tracer, name: str, kind: SpanKind, *, context: Context | None,
          trace_id: str | None = None, links: Sequence[Link] = (),
          attributes: Mapping[str, AttrValue] | None = None) -> Span:
    """Starts a span under ``context`` (None: the current one); one that starts a trace takes
    ``trace_id`` as its trace's ID when it is a W3C one."""
    seed = trace_int(trace_id) if trace_id else 0
    if not seed:
        return tracer.start_span(name, context=context, kind=kind, links=links,
                                 attributes=attributes)
    token = SEED.set(seed)
    try:
        return tracer.start_span(name, context=context, kind=kind, links=links,
                                 attributes=attributes)
    finally:
        SEED.reset(token)


def _remote(env: Envelope) -> SpanContext:
    """The span context an envelope with a span ID carries."""
    assert env.span_id is not None
    return SpanContext(int(env.trace_id, 16), int(env.span_id, 16), is_remote=True,
                       trace_flags=TraceFlags(env.trace_flags))


def envelope_context(env: Envelope) -> Context:
    """The context a span about a received envelope continues: its sender's span as a remote
    parent, or no parent at all (an envelope from a peer that sends no span ID)."""
    if env.span_id is None:
        return Context()
    return trace.set_span_in_context(NonRecordingSpan(_remote(env)), Context())


def traced(env: Envelope, span: Span) -> Envelope:
    """``env`` carrying ``span`` as its parent span (unchanged for a span with no context, or
    one it carries already)."""
    if type(span) is StoreSpan:  # its IDs in hex already
        if env.span_id == span.span_hex:
            return env
        return env.with_trace_context(span.trace_hex, span.span_hex, span.flags)
    ctx = span.get_span_context()
    if not ctx.is_valid or (env.span_id is not None and int(env.span_id, 16) == ctx.span_id):
        return env
    return env.with_trace_context(f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}",
                                  int(ctx.trace_flags))


def start_send(  # noqa: PLR0912, PLR0917 - every send runs it: all inline
        tracer: Tracer, env: Envelope, capability: str | None = None,
        parent: Envelope | None = None, fresh: bool = False,
        made: bool = False) -> tuple[Span, Envelope]:
    """The client span of a send (a child of the current span), and the envelope carrying it.

    Under a trace sampled out no span is started: the envelope goes as it is when reach's
    sampler drops its trace (:func:`dropped`: its receiver decides the same), else it carries
    that trace's context (the current span's, or that of ``parent`` whose handler runs in no
    span).

    Args:
        tracer: This process's tracer.
        env: The envelope sent.
        capability: For a send by capability, the capability (the agent chosen is the
            envelope's receiver).
        parent: The envelope whose handler sends it, if any.
        fresh: ``env`` was just built for this send and nothing else holds it: it takes the
            span's context in place (no copy).
        made: ``env``'s trace ID is one reach just made for it (:func:`~reach.protocol.new_id`'s:
            32 lowercase hex digits), read as it is rather than checked.
    """
    current = current_span()
    seed, new, kept = 0, False, False
    if type(current) is not StoreSpan:  # (one is recording: its trace is sampled)
        # (no current span, the usual case outside handlers: its context is the invalid one)
        ctx = None if current is INVALID_SPAN else current.get_span_context()
        if ctx is not None and ctx.is_valid:
            if not ctx.trace_flags.sampled:
                return current, env if dropped(env, ctx.trace_id) else traced(env, current)
        elif parent is not None and sampled_out(parent):  # its handler runs in no span
            out: Span = NonRecordingSpan(_remote(parent))
            return out, env if dropped(env) else traced(env, out)
        else:  # a new trace: one that reach's sampler drops goes as it is (see dropped)
            new, trace_id = True, env.trace_id
            # (dropped() and the sampler's decision, inline: every send asks; an ID reach made
            # for it is read as it is, any other checked to be a W3C one)
            if trace_id != _NO_TRACE if made else match_trace_id(trace_id):
                drop_hex = TRACING.drop_hex
                if drop_hex is None or trace_id[16:] < drop_hex:  # reach's sampler keeps it
                    kept = True
                elif env.span_id is None:
                    return INVALID_SPAN, env
                else:
                    seed = int(trace_id, 16)
    key = (env.sender, env.receiver, env.msg_type, capability)
    shared, name = _SENDS.get(key) or _send_shared(key)
    own: OwnAttributes = () if env.session_id is None else (_SESSION_ID, env.session_id)
    if type(tracer) is not StoreTracer:
        span = start(tracer, name, SpanKind.CLIENT, context=None, trace_id=env.trace_id,
                     attributes={**shared, **own_map(own)})
    elif kept:  # (tracer.root(), inline: its sampler's decision is made)
        span = StoreSpan(tracer.sink, name, "client", env.trace_id, None, KEPT_FLAGS, own, shared)
    elif new:
        span = tracer.root(name, "client", seed, env.trace_id if seed else None, own, shared)
    else:
        span = tracer.under(name, "client", current, seed, env.trace_id, own, shared)
    if type(span) is StoreSpan:  # (traced(), inline: a new span is never the envelope's)
        if fresh:
            env.take_trace_context(span.trace_hex, span.span_hex, span.flags)
            return span, env
        return span, env.with_trace_context(span.trace_hex, span.span_hex, span.flags)
    return span, traced(env, span)


#: The attributes of send spans that each (sender, receiver, type, capability) has in common,
#: with the spans' name; emptied past :data:`SHARED_KEPT` entries.
_SENDS: dict[tuple[str, str, MsgType, str | None], tuple[dict[str, AttrValue], str]] = {}
#: How many sets of shared span attributes a process keeps, at most, for its sends.
SHARED_KEPT = 1024


def _send_shared(key: tuple[str, str, MsgType, str | None]) -> tuple[dict[str, AttrValue], str]:
    """The attributes that the send spans of ``key`` (sender, receiver, type, capability) have
    in common, and their name, made and kept in :data:`_SENDS`."""
    sender, receiver, msg_type, capability = key
    shared: dict[str, AttrValue] = {_SENDER: sender, _AGENT_ID: receiver,
                                    _MSG_TYPE: msg_type.value}
    if capability is not None:
        shared[Attr.CAPABILITY] = shared[Attr.RECEIVER] = capability
    return remember(_SENDS, key, (shared, f"{SpanName.SEND} {capability or receiver}"),
                    SHARED_KEPT)


def remember(sets: dict[_K, _V], key: _K, value: _V, most: int) -> _V:
    """Keeps ``value`` in ``sets`` (shared span attributes, by what they are shared by) under
    ``key``, ``sets`` emptied first when it holds ``most`` already; ``value``."""
    if len(sets) >= most:
        sets.clear()
    sets[key] = value
    return value


def dropped(env: Envelope, trace_id: int | None = None) -> bool:
    """Whether reach's sampler drops ``env``'s trace (of ``trace_id`` when given: the
    envelope's then, or it is not dropped), so that it may travel with no trace context: every
    reach process decides the same from the trace ID alone (reach's sampler keeps a trace by
    its ID, see :func:`keeps`: its low 64 bits, its last 16 hex digits, compared with the
    bound's). Every envelope a traced process takes asks: the ID is compared as text first,
    and only one at or above the bound is checked to be a W3C one (32 lowercase hex digits,
    not all zeros)."""
    drop_hex = TRACING.drop_hex
    if drop_hex is None or env.span_id is not None:
        return False
    text = env.trace_id
    if len(text) != _TRACE_HEX or text[16:] < drop_hex or text == _NO_TRACE:
        return False
    try:
        return (bytes.fromhex(text).hex() == text  # (hex, and lowercase)
                and (trace_id is None or int(text, 16) == trace_id))
    except ValueError:  # not hex
        return False


def dropped_new(env: Envelope) -> bool:
    """Whether a send of ``env``, an envelope reach just built with a trace ID it made for it
    (:func:`~reach.protocol.new_id`'s: 32 lowercase hex digits) and no trace context, goes as
    it is, with no span: reach's sampler drops its trace and no span is current. What
    :func:`start_send` decides first for such a send, for a caller to ask before anything
    else: every request a driver sends asks."""
    drop_hex = TRACING.drop_hex
    trace_id = env.trace_id
    return (drop_hex is not None and trace_id[16:] >= drop_hex and trace_id != _NO_TRACE
            and (not (context := context_now())  # (no span current, asked quickly)
                 or context.get(SPAN_KEY, INVALID_SPAN) is INVALID_SPAN))


def sampled_out(env: Envelope) -> bool:
    """Whether ``env`` is of a trace sampled out (its handler's span records nothing)."""
    return env.span_id is not None and not env.trace_flags & 1


def handle_shared(env: Envelope, capabilities: Sequence[str],
                  attributes: Mapping[str, AttrValue]) -> dict[str, AttrValue]:
    """The attributes a handler's span has in common with its agent's other runs for
    ``env``'s payload schema and message type: the agent's ID, the type and the schema, the
    capability of the agent's (``capabilities``) that the schema is for, and ``attributes``
    (its host, node, epoch...). Made once and given to :func:`start_handle` for each such run
    (it is never changed)."""
    return {_AGENT_ID: env.receiver, _MSG_TYPE: env.msg_type.value,
            _PAYLOAD_SCHEMA: env.payload_schema,
            Attr.CAPABILITY: capability_for(capabilities, env.payload_schema), **attributes}


def capability_for(capabilities: Sequence[str], schema: str) -> str:
    """The capability of an agent's that a payload schema is for: the one its name is, or
    extends, or else the agent's first ("" for an agent with none)."""
    name = schema.partition("@")[0]
    for tag in capabilities:
        if name == tag or name.startswith(tag + "."):
            return tag
    return capabilities[0] if capabilities else ""


def start_handle(tracer: Tracer, env: Envelope, shared: Mapping[str, AttrValue],
                 queued_ms: float | None = None) -> Span:
    """The server span of a handler's run of ``env``: the child of the envelope's span (for
    an envelope of a trace sampled out, that span's context, recording nothing).

    Args:
        tracer: This process's tracer.
        env: The envelope handled.
        shared: Its attributes in common with other runs (:func:`handle_shared`'s).
        queued_ms: How long ``env`` waited in its host's inbox, when known.
    """
    span_id, flags = env.span_id, env.trace_flags
    if span_id is not None and not flags & 1:  # sampled out
        return NonRecordingSpan(_remote(env))
    own: tuple[str | AttrValue, ...] = (_SENDER, env.sender) if queued_ms is None else (
        _SENDER, env.sender, _QUEUED_MS, queued_ms)
    if env.session_id is not None:
        own += (_SESSION_ID, env.session_id)
    name = f"{_HANDLE} {env.payload_schema}"
    if type(tracer) is StoreTracer:  # the envelope's IDs, as they are
        if span_id is not None:  # (tracer.child(), inline: its parent is sampled)
            return StoreSpan(tracer.sink, name, "server", env.trace_id, span_id,
                             flags & KEPT_FLAGS, own, shared)
        seed = trace_int(env.trace_id)
        return tracer.root(name, "server", seed, env.trace_id if seed else None, own, shared)
    return start(tracer, name, SpanKind.SERVER, context=envelope_context(env),
                 trace_id=env.trace_id, attributes={**shared, **own_map(own)})


def failed(span: Span, error: ReachError) -> None:
    """Marks a span as ended in ``error`` (its code and severity, status ERROR)."""
    if span.is_recording():
        span.set_attributes({Attr.ERROR_CODE: error.code,
                             Attr.ERROR_SEVERITY: error.severity.value})
        span.set_status(Status(StatusCode.ERROR, error.message))


def event(span: Span | None, name: str, attributes: Mapping[str, AttrValue]) -> None:
    """Adds an event to a span that records (nothing for None or one that does not)."""
    if span is not None and span.is_recording():
        span.add_event(name, dict(attributes))


@contextmanager
def internal(name: str, attributes: Mapping[str, AttrValue], *,
             trace_id: str | None = None) -> Iterator[Span | None]:
    """An internal span that starts a trace of its own (a supervisor's restart), current while
    the block runs; None when this process does not trace. A ReachError raised in the block
    marks it failed."""
    tracer = TRACING.tracer
    if tracer is None:
        yield None
        return
    span = start(tracer, name, SpanKind.INTERNAL, context=Context(), trace_id=trace_id)
    if span.is_recording():
        span.set_attributes(dict(attributes))
    with trace.use_span(span, end_on_exit=True, record_exception=False,
                        set_status_on_exception=False):
        try:
            yield span
        except ReachError as exc:
            failed(span, exc)
            raise


__all__ = ["SEED", "SHARED_KEPT", "TRACER_NAME", "TRACING", "capability_for",
           "dropped", "dropped_new",
           "envelope_context", "event", "failed", "handle_shared", "internal", "keeps",
           "remember", "sampled_out", "start", "start_handle", "start_send", "trace_int",
           "traced", "use"]
