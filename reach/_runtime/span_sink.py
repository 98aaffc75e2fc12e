"""Finished spans on their way from a process to the cluster's trace store, for the tracer of
:mod:`reach._runtime.store_tracer`: each packed as it ends, sent in batches (one
:class:`~reach.spans.SpanBatch` each) from the process's event loop, never waited for.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable, Mapping

import msgpack

from reach.spans import AttrValue, SpanBatch, SpanRow, pack_row

log = logging.getLogger("reach._runtime.span_sink")

#: Sends a batch of finished spans to the trace store (awaited on the process's event loop; a
#: failure is only logged).
SendBatch = Callable[[SpanBatch], Awaitable[None]]

#: Attributes that many spans have in common (see :meth:`SpanSink.add`).
SharedAttributes = Mapping[str, AttrValue]

#: How many finished spans a process holds for the trace store before it drops them.
STORE_QUEUE = 32_768
#: Spans a batch holds at most, and how long a span waits for its batch to leave (seconds).
#: Ray puts an argument of over 100 KB in its object store, and such a call costs its caller
#: about 1.1 ms of CPU whatever its size up to 1 MB (0.45 ms for a small one): 4,096 spans
#: (400 to 600 KB) cost about 0.3 us a span to send where 1,024 cost 1.1 us. A process that
#: samples few traces sends a small batch each time the delay ends, each a call to the store
#: in the sender, the store and Ray's own processes: every two seconds rather than every half
#: second, the trace store's process took some 0.4 us a message less at 1% sampling in the
#: tracing benchmark (OpenTelemetry's batch processor waits five seconds).
BATCH_SPANS, BATCH_DELAY_S = 4096, 2.0

#: The loop running in this thread, or None (asyncio's low-level getter: it never raises; it
#: asks the system for the process's ID each time, so a span's end does not call it).
_running_loop = asyncio._get_running_loop
#: Packs a row (no hook: packing runs no Python code, so no other thread interleaves).
_pack = msgpack.Packer().pack


class SpanSink:
    """Finished spans on their way to the trace store: each batch leaves from the event loop
    when it holds :data:`BATCH_SPANS` spans or its first has waited :data:`BATCH_DELAY_S`.
    Past :data:`STORE_QUEUE` spans held, or with no event loop to send from, spans are dropped
    (counted), never waited for.

    Args:
        send: Sends a batch to the store.
        process: This process's name (its spans' ``process``).
    """

    def __init__(self, send: SendBatch, process: str) -> None:
        self._send = send
        self.process = process
        self.loop: asyncio.AbstractEventLoop | None = None
        self.dropped = 0
        # Packed as they end, while what they hold is fresh in the processor's caches (packed
        # as their batch leaves, they take twice as long), and no work for the garbage collector
        # while they wait, where a row's lists and maps would be read by every full collection.
        self._rows: list[bytes] = []
        # The attribute sets the rows held name by index, and their indexes by the identity of
        # each (kept alive by the list: no ID is reused). The lock keeps a row that names one
        # and the table it names it in together, whichever threads add and flush.
        self._shared: list[SharedAttributes] = []
        self._shared_index: dict[int, int] = {}
        self._lock = threading.Lock()
        self._due: asyncio.TimerHandle | asyncio.Handle | None = None
        self._soon = False

    def add(self, row: SpanRow, shared: SharedAttributes | None = None) -> None:
        """Holds one finished span (from any thread; the loop's is the usual one), with the
        attributes it shares with others (``shared``: one object for all of them, never
        changed, sent once per batch; its own attributes, in ``row``, win over them). A row
        that cannot be packed is dropped (counted)."""
        with self._lock:
            if len(self._rows) >= STORE_QUEUE:
                self.dropped += 1
                return
            if shared is not None:
                row = (*row, self._index(shared))
            full = self._hold(pack_row(row))
        self._check_due(full)

    def add_short(self, trace_hex: str, span_hex: str, parent_hex: str | None, name: str,  # noqa: PLR0917 - a span's fields
                  kind: str, start_ns: int, end_ns: int, attributes: tuple[str | AttrValue, ...],
                  shared: SharedAttributes | None) -> None:
        """:meth:`add` of a short row (a send's or a handler's span: status unset, no events or
        links, its own attributes a flat tuple), given as its fields: its row is made here,
        with its shared set's index, as one tuple (every span that reach starts ends here)."""
        lock = self._lock
        lock.acquire()  # (not ``with``: half the time, on every span)
        try:
            rows = self._rows
            if len(rows) >= STORE_QUEUE:
                self.dropped += 1
                return
            if shared is None:
                row: SpanRow = (trace_hex, span_hex, parent_hex, name, kind, start_ns, end_ns,
                                attributes)
            else:  # (_index(), inline)
                index = self._shared_index.get(id(shared))
                if index is None:
                    index = self._index(shared)
                row = (trace_hex, span_hex, parent_hex, name, kind, start_ns, end_ns,
                       attributes, index)
            try:  # (pack_row() and _hold(), inline: the first try)
                rows.append(_pack(row))
            except (TypeError, ValueError, OverflowError):
                self._hold(pack_row(row))
            full = len(rows) >= BATCH_SPANS
        finally:
            lock.release()
        # (_check_due(), inline)
        if (self._due is None or (full and not self._soon)
                or self.loop.is_closed()):  # type: ignore[union-attr]
            self._schedule(full)

    def _index(self, shared: SharedAttributes) -> int:
        """The index of ``shared`` in the table the rows held name (added when new; under the
        lock)."""
        index = self._shared_index.get(id(shared))
        if index is None:
            index = self._shared_index[id(shared)] = len(self._shared)
            self._shared.append(shared)
        return index

    def _hold(self, packed: bytes | None) -> bool:
        """Holds a packed row (None: one that could not be packed, dropped and counted); whether
        a batch is full now (under the lock)."""
        if packed is None:
            self.dropped += 1
            return False
        rows = self._rows
        rows.append(packed)
        return len(rows) >= BATCH_SPANS

    def _check_due(self, full: bool) -> None:
        """Has a batch made due when it must be: unless one is on a live loop, or this one is
        full (``full``), or the loop it is due on has ended (a driver's asyncio.run over: the
        next one sends it). A span that ends on another thread leaves with the batch due, or
        has one made due."""
        if (self._due is None or (full and not self._soon)
                or self.loop.is_closed()):  # type: ignore[union-attr]
            self._schedule(full)

    def _schedule(self, now: bool) -> None:
        """Has the spans held sent soon (``now``: as soon as the loop is free), from the loop
        running here (the one of a driver's latest ``asyncio.run``), or from this process's
        loop when no loop runs in this thread."""
        loop = _running_loop()
        if loop is None:  # another thread: the loop this process sends from
            loop = self.loop
            if loop is not None and not loop.is_closed():
                with contextlib.suppress(RuntimeError):  # closed meanwhile
                    loop.call_soon_threadsafe(self._schedule, now)
            return
        if loop is not self.loop:  # a new loop: what was due on the last one never runs
            if self._due is not None:
                self._due.cancel()
            self.loop, self._due, self._soon = loop, None, False
        if now and not self._soon:
            if self._due is not None:
                self._due.cancel()
            self._soon = True
            self._due = loop.call_soon(self.flush)
        elif self._due is None:
            self._due = loop.call_later(BATCH_DELAY_S, self.flush)

    def flush(self) -> None:
        """Sends what is held now, in batches (on the event loop's thread)."""
        if self._due is not None:
            self._due.cancel()
        self._due, self._soon = None, False
        with self._lock:  # the rows that name the table taken, and only those
            shared, held = self._shared, self._rows
            self._shared, self._shared_index, self._rows = [], {}, []
        for at in range(0, len(held), BATCH_SPANS):
            batch = held[at:at + BATCH_SPANS]
            self._start(SpanBatch.join(self.process, batch, shared), len(batch))

    def _start(self, batch: SpanBatch, count: int) -> None:
        if not start_send(self._send, batch):
            self.dropped += count

    def force_flush(self) -> None:
        """Sends what is held now, from the loop (from any thread: without waiting for it)."""
        if _running_loop() is not None:
            self.flush()
            return
        loop = self.loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # closed meanwhile
                loop.call_soon_threadsafe(self.flush)


def start_send(send: SendBatch, batch: SpanBatch) -> bool:
    """Starts sending ``batch`` to the trace store (on the running loop, never awaited: a send
    that fails is logged); False when it could not start (no store yet): its spans are lost."""
    try:
        sent = asyncio.ensure_future(send(batch))
    except Exception as exc:  # no store (yet): these spans are not kept
        log.debug("spans not sent to the trace store: %s", exc)
        return False
    sent.add_done_callback(_sent)
    return True


def _sent(sent: asyncio.Future[None]) -> None:
    if not sent.cancelled() and sent.exception() is not None:
        log.debug("the trace store did not take spans: %s", sent.exception())


__all__ = ["BATCH_DELAY_S", "BATCH_SPANS", "STORE_QUEUE", "SendBatch", "SharedAttributes",
           "SpanSink", "start_send"]
