"""Moving envelopes between processes: one outbox per destination, replies matched by request ID.

Every process that talks (each AgentHost, and each driver through its inbox actor) has one
:class:`Transport`. Its endpoint name is where replies to it are sent. For each destination
endpoint it keeps an outbox: the first envelope goes out at once in its own Ray call, and every
envelope queued while that call is in flight goes out together in the next one (adaptive
batching, no added delay when idle). A ``deliver`` call only hands envelopes over; replies come
back the same way, batched, and are matched to their pending request by ``request_id``.

While a request waits on an endpoint, the transport keeps one ``watch`` call open on it; the
cluster fails that call the moment the endpoint's process dies, so a dead host is an
AgentUnavailable at once, not a hang until the deadline. Endpoints are ports of the
:class:`~reach.ports.cluster.Cluster` (the one seam to Ray), whose calls fail with reach's errors
only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from reach._runtime.metrics import messages, metrics
from reach.codec import Codec
from reach.errors import AgentUnavailable, ProtocolError, ReachError
from reach.ports.cluster import Cluster
from reach.ports.endpoint import Endpoint
from reach.protocol import Envelope, MsgType

log = logging.getLogger("reach._runtime.transport")

#: How long requests waiting on a dead endpoint wait for replies it sent just before dying.
WATCH_GRACE_S = 0.25

#: How many streamed requests a transport remembers (see :meth:`Transport.take_replies`).
STREAMS_REMEMBERED = 10_000

#: Schema of the end-of-stream marker that closes a streamed reply.
STREAM_END_SCHEMA = "reach.stream.end@1.0"


class StaleRoute(Exception):
    """The destination host no longer holds the agent: re-resolve and resend."""


@dataclass
class Pending:
    """A request waiting for its reply (or for the chunks of a streamed reply).

    Attributes:
        lost: Set when it is failed because its endpoint died while it waited (its handler may
            have had it in hands: the caller reports the death, see :mod:`reach._runtime.poison`).
    """

    endpoint: str
    receiver: str
    future: asyncio.Future[Envelope] | None = None
    chunks: asyncio.Queue[Envelope | BaseException] | None = None
    lost: bool = False

    def settle(self, outcome: Envelope | BaseException) -> None:
        """Delivers a reply, chunk or failure to whoever waits."""
        if self.chunks is not None:
            self.chunks.put_nowait(outcome)
        elif self.future is not None and not self.future.done():
            if isinstance(outcome, BaseException):
                self.future.set_exception(outcome)
            else:
                self.future.set_result(outcome)


@dataclass
class _Outbox:
    endpoint: str
    port: Endpoint
    queue: list[Envelope] = field(default_factory=list)
    busy: bool = False


class Transport:
    """Outboxes, pending replies and endpoint handles of one process.

    Args:
        endpoint: Name of the endpoint that receives this process's replies.
        cluster: Where the endpoints are.
        codec: The codec for frames (signing with the cluster's guard when not given).
        on_dead_endpoint: Called with an endpoint's name when it is found dead (drop routes).
        on_expect: Called before each pending request is registered (a driver starts polling).
        on_undelivered: Called with envelopes that nobody waits for (notifications, replies)
            when they cannot be handed over, so they become dead letters, not silent losses.
    """

    def __init__(
        self,
        endpoint: str,
        cluster: Cluster,
        *,
        codec: Codec | None = None,
        on_dead_endpoint: Callable[[str], None] | None = None,
        on_expect: Callable[[], None] | None = None,
        on_undelivered: Callable[[list[Envelope], ReachError], None] | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.cluster = cluster
        self.codec = codec or Codec(guard=cluster.guard())
        self._on_dead = on_dead_endpoint
        self._on_expect = on_expect
        self._on_undelivered = on_undelivered
        self._outboxes: dict[str, _Outbox] = {}
        self._watches: dict[str, asyncio.Task[None]] = {}
        self._drains: set[asyncio.Task[None]] = set()
        # Invariant: every pending request is keyed by its msg_id and names its endpoint.
        self.pending: dict[str, Pending] = {}
        # Request IDs whose replies are streamed from here (their chunks went out), as an
        # ordered set of the most recent ones: their final replies keep the outbox's order.
        self._streamed: dict[str, None] = {}
        self.batches_sent = 0
        self.envelopes_sent = 0

    # -- sending -------------------------------------------------------------------------------

    def post(self, endpoint: str, envelope: Envelope) -> None:
        """Queues an envelope for ``endpoint``; it leaves at once if nothing is in flight there.

        Raises:
            StaleRoute: the endpoint does not exist and a caller waits for a reply (re-resolve).
            AgentUnavailable: the endpoint does not exist.
        """
        box = self._outboxes.get(endpoint)
        if box is None:
            try:
                port = self.cluster.endpoint(endpoint)
            except AgentUnavailable:
                if envelope.msg_id in self.pending:
                    raise StaleRoute(envelope.msg_id) from None  # nothing left: safe to resend
                raise
            box = self._outboxes[endpoint] = _Outbox(endpoint, port)
        box.queue.append(envelope)
        if envelope.msg_type is MsgType.EVENT and envelope.request_id is not None:
            self._streamed[envelope.request_id] = None
            if len(self._streamed) > STREAMS_REMEMBERED:
                del self._streamed[next(iter(self._streamed))]
        if not box.busy:
            box.busy = True
            drain = asyncio.get_running_loop().create_task(self._drain(box))
            self._drains.add(drain)
            drain.add_done_callback(self._drains.discard)

    def take_replies(self, endpoint: str) -> list[Envelope]:
        """Removes and returns the replies queued for ``endpoint`` that have not left yet, for a
        call from that endpoint to carry back in its return (no Ray call of their own, and none
        through a driver's inbox). The chunks of a streamed reply, and the reply that ends the
        stream, stay queued: they keep their order."""
        box = self._outboxes.get(endpoint)
        if box is None or not box.queue:
            return []
        taken: list[Envelope] = []
        kept: list[Envelope] = []
        for env in box.queue:
            final = env.msg_type is MsgType.RESPONSE or env.msg_type is MsgType.ERROR
            if final and env.request_id is not None and env.request_id not in self._streamed:
                taken.append(env)
            else:
                kept.append(env)
        box.queue[:] = kept
        return taken

    def expect(self, envelope: Envelope, endpoint: str, *, stream: bool = False) -> Pending:
        """Registers a pending reply for a request about to be posted to ``endpoint``."""
        if self._on_expect is not None:
            self._on_expect()
        pending = Pending(endpoint, envelope.receiver)
        if stream:
            pending.chunks = asyncio.Queue()
        else:
            pending.future = asyncio.get_running_loop().create_future()
        self.pending[envelope.msg_id] = pending
        self._ensure_watch(endpoint)
        return pending

    def forget(self, msg_id: str) -> None:
        """Drops a pending request (its caller gave up)."""
        self.pending.pop(msg_id, None)

    async def _drain(self, box: _Outbox) -> None:
        try:
            while box.queue:
                batch, box.queue = box.queue, []
                await self._send(box, batch)
                # One loop iteration (no timer): callers woken by the replies just received post
                # their next envelopes first, so they join the next batch instead of trailing it.
                await asyncio.sleep(0)
        finally:
            box.busy = False

    async def _send(self, box: _Outbox, batch: list[Envelope]) -> None:
        try:
            frame = self.codec.encode_batch(batch)
        except ProtocolError:
            # One bad envelope must not sink the batch: send them one by one.
            for env in batch:
                await self._send_one(box, env)
            return
        self.batches_sent += 1
        self.envelopes_sent += len(batch)
        messages(batch, "sent")
        metrics.observe("reach_batch_envelopes", len(batch))
        try:
            not_here, replies = await box.port.deliver(frame, self.endpoint)
        except ReachError as error:
            self._outboxes.pop(box.endpoint, None)
            unclaimed = [env for env in batch if env.msg_id not in self.pending]
            died = isinstance(error, AgentUnavailable)
            for env in batch:
                self._fail(env.msg_id, error, box.endpoint, lost=died)
            if unclaimed and self._on_undelivered is not None:
                self._on_undelivered(unclaimed, error)
            if isinstance(error, AgentUnavailable):
                self.endpoint_died(box.endpoint, error)
            return
        self._received(not_here, replies, box.endpoint)

    def _received(self, not_here: list[str], replies: bytes | None, endpoint: str) -> None:
        for msg_id in not_here:
            self._fail(msg_id, StaleRoute(msg_id), endpoint)
        if replies is not None:
            self.accept_frame(replies)

    def accept_frame(self, frame: bytes) -> None:
        """Hands every reply in a frame to its pending request (unreadable ones are logged)."""
        envelopes, refused = self.codec.decode_batch_partial(frame)
        for bad in refused:
            log.warning("dropped an unreadable reply %s from %s: %s", bad.msg_id, bad.sender,
                        bad.error)
        messages(envelopes, "received")
        for env in envelopes:
            self.accept(env)

    async def _send_one(self, box: _Outbox, env: Envelope) -> None:
        try:
            frame = self.codec.encode(env)
            not_here, replies = await box.port.deliver(frame, self.endpoint)
        except ReachError as error:
            if env.msg_id not in self.pending and self._on_undelivered is not None:
                self._on_undelivered([env], error)  # nobody waits for it: a dead letter
            self._fail(env.msg_id, error, box.endpoint,
                       lost=isinstance(error, AgentUnavailable))
            return
        self._received(not_here, replies, box.endpoint)

    def _fail(self, msg_id: str, error: BaseException, endpoint: str | None = None, *,
              lost: bool = False) -> None:
        """Fails the request waiting for ``msg_id``; with ``endpoint``, only if it waits on
        that endpoint (a resend of the same request to another host is not failed for it);
        ``lost``: because that endpoint died."""
        pending = self.pending.get(msg_id)
        if pending is None or (endpoint is not None and pending.endpoint != endpoint):
            return
        if pending.chunks is None:
            del self.pending[msg_id]
        if lost:
            pending.lost = True
        pending.settle(error)

    # -- receiving -----------------------------------------------------------------------------

    def accept(self, envelope: Envelope) -> bool:
        """Hands a reply, chunk or error to its pending request; False if nobody waits for it.

        Only the agent the request went to (or its host, refusing it) answers it: a late reply
        from an earlier holder of the same request ID (a task's attempt that timed out, then
        retried elsewhere under the same ID) is not taken for the new holder's.
        """
        request_id = envelope.request_id
        pending = self.pending.get(request_id) if request_id else None
        if pending is None or request_id is None:
            return False
        if envelope.sender not in (pending.receiver, pending.endpoint):
            log.info("ignored a late reply to %s from %s (the request now waits on %s)",
                     request_id, envelope.sender, pending.receiver)
            return False
        if pending.chunks is not None:
            if envelope.msg_type is not MsgType.EVENT:
                del self.pending[request_id]
            pending.settle(envelope)
        else:
            del self.pending[request_id]
            pending.settle(envelope)
        return True

    # -- liveness ------------------------------------------------------------------------------

    def _ensure_watch(self, endpoint: str) -> None:
        task = self._watches.get(endpoint)
        if task is None or task.done():
            self._watches[endpoint] = asyncio.get_running_loop().create_task(self._watch(endpoint))

    async def _watch(self, endpoint: str) -> None:
        try:
            await self.cluster.endpoint(endpoint).watch()
            error: ReachError = AgentUnavailable(
                f"host {endpoint} stopped", details={"endpoint": endpoint}
            )
        except ReachError as exc:
            error = exc
        except asyncio.CancelledError:
            return
        self._watches.pop(endpoint, None)
        self._forget_endpoint(endpoint)
        # Replies the endpoint sent just before it went (through another path, such as a
        # driver's inbox) may still be on their way: give them a moment before failing. Only
        # the requests waiting now are failed: a replacement of the same name is another host,
        # and a resend of the same request (same msg_id) is another pending request.
        waiting = [(m, p) for m, p in self.pending.items() if p.endpoint == endpoint]
        await asyncio.sleep(WATCH_GRACE_S)
        for msg_id, pending in waiting:
            if self.pending.get(msg_id) is pending:
                self._fail(msg_id, error, lost=True)

    def _forget_endpoint(self, endpoint: str) -> None:
        self._outboxes.pop(endpoint, None)
        self.cluster.forget(endpoint)
        if self._on_dead is not None:
            self._on_dead(endpoint)

    def endpoint_died(self, endpoint: str, error: ReachError) -> None:
        """Fails every request waiting on ``endpoint`` and forgets the endpoint."""
        self._forget_endpoint(endpoint)
        for msg_id, pending in list(self.pending.items()):
            if pending.endpoint == endpoint:
                self._fail(msg_id, error, lost=True)

    def queued(self) -> int:
        """Envelopes queued in the outboxes that have not left yet."""
        return sum(len(box.queue) for box in self._outboxes.values())

    async def flush(self) -> None:
        """Returns once every queued envelope has been handed over (or failed)."""
        while self._drains:
            await asyncio.gather(*self._drains, return_exceptions=True)

    def close(self) -> None:
        """Stops watching; fails nothing (the process is going away)."""
        for task in self._watches.values():
            task.cancel()
        self._watches.clear()
