"""reach's metrics, exported through ``ray.util.metrics`` to the Ray dashboard and its Prometheus
endpoint (where Ray prefixes every name with ``ray_``).

=================================  =========  ==============================================
name                               kind       tags
=================================  =========  ==============================================
``reach_messages``                 counter    ``type`` (request, response, ...), ``direction``
``reach_requests``                 counter    ``outcome`` (ok, error)
``reach_request_latency_seconds``  histogram  ``outcome`` (ok, error)
``reach_batch_envelopes``          histogram  envelopes per Ray call of the transport
``reach_restarts``                 counter    ``supervisor``
``reach_tasks``                    gauge      ``supervisor``, ``state``
``reach_dead_letters``             counter    ``reason`` (the error code)
``reach_auth_refusals``            counter    ``reason``
``reach_registry_agents``          gauge      ``status`` (online, offline, restarting)
=================================  =========  ==============================================

Counting a message must cost next to nothing on the hot path, so counters are summed in the
process and handed to Ray once a second (:data:`FLUSH_S`). Histograms are observed per Ray call or
per request, not per envelope, and handed to Ray with the counters: every value while a process
observes at most :data:`SAMPLED_PER_S` a second into one histogram (one set of tags), beyond that a
uniform sample of that many a second. Ray's metrics agent replays a histogram's values one by one
(on Ray 2.60 a value costs 2.1 us where it is observed and 8.3 us of the agent's CPU), so a driver
sending ten thousand requests a second would otherwise cost its node a tenth of a core: the
quantiles of a sample are the quantiles, but a histogram's ``_count`` is then the sample's, which
is why ``reach_requests`` counts every request.
Outside Ray (unit tests, the codec alone) nothing is exported.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable
from enum import StrEnum
from typing import Any

log = logging.getLogger("reach._runtime.metrics")

#: How often summed counters and observed values are handed to Ray (seconds).
FLUSH_S = 1.0
#: How many values a second each histogram (each set of its tags) hands Ray, at most, from one
#: process: beyond that, a uniform sample of the values observed (see the module's docstring).
SAMPLED_PER_S = 200

LATENCY_BOUNDARIES = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                      10.0, 30.0]
BATCH_BOUNDARIES = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0]

_COUNTERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "reach_messages": ("Envelopes sent and received by reach processes", ("type", "direction")),
    "reach_requests": ("Requests answered or failed, as callers see them", ("outcome",)),
    "reach_restarts": ("Agents restarted by their supervisors", ("supervisor",)),
    "reach_dead_letters": ("Messages that could not be delivered", ("reason",)),
    "reach_auth_refusals": ("Envelopes and calls refused by signature, replay or ACL checks",
                            ("reason",)),
}
_HISTOGRAMS: dict[str, tuple[str, list[float], tuple[str, ...]]] = {
    "reach_request_latency_seconds": ("Request latency seen by callers (sampled past "
                                      f"{SAMPLED_PER_S} a second a process)",
                                      LATENCY_BOUNDARIES, ("outcome",)),
    "reach_batch_envelopes": ("Envelopes carried by one Ray call (sampled past "
                              f"{SAMPLED_PER_S} a second a process)", BATCH_BOUNDARIES, ()),
}
_GAUGES: dict[str, tuple[str, tuple[str, ...]]] = {
    "reach_tasks": ("Tasks by state", ("supervisor", "state")),
    "reach_registry_agents": ("Agents in the registry by status", ("status",)),
}


class MetricKind(StrEnum):
    """How a metric shows on Ray's Prometheus endpoint (``ray_`` before its name): a counter as
    ``<name>_total``, a gauge as ``<name>``, a histogram as ``<name>_bucket``, ``_sum`` and
    ``_count``."""

    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"


#: Every metric reach exports, and its kind (what the dashboard and the alerting rules may use).
KINDS: dict[str, MetricKind] = {
    **dict.fromkeys(_COUNTERS, MetricKind.COUNTER),
    **dict.fromkeys(_HISTOGRAMS, MetricKind.HISTOGRAM),
    **dict.fromkeys(_GAUGES, MetricKind.GAUGE),
}


#: Ray's Counter, Gauge and Histogram classes, or None off Ray.
MetricTypes = Callable[[], tuple[Any, Any, Any] | None]


def _no_metric_types() -> tuple[Any, Any, Any] | None:
    return None


_metric_types: MetricTypes = _no_metric_types


def export_through(types: MetricTypes) -> None:
    """Names where the metric classes come from (the seam to Ray calls it as it is imported),
    so that counting needs no knowledge of Ray; until then nothing is exported."""
    global _metric_types  # noqa: PLW0603 - one source of metric classes per process
    _metric_types = types


_random = random.random


class _Sample:
    """The values one histogram (one set of tags) observed since the last flush: all of them up
    to :data:`SAMPLED_PER_S`, then a uniform sample of that many (reservoir sampling)."""

    __slots__ = ("seen", "values")

    def __init__(self) -> None:
        self.seen = 0
        self.values: list[float] = []

    def add(self, value: float) -> None:
        """Observes one value."""
        self.seen += 1
        values = self.values
        if len(values) < SAMPLED_PER_S:
            values.append(value)
            return
        at = int(_random() * self.seen)  # each value seen so far kept with the same chance
        if at < SAMPLED_PER_S:
            values[at] = value


class _Metrics:
    """One process's metrics: Ray metric objects made on first use, counters summed and
    histograms sampled locally.

    Pickled (inside an object Ray ships elsewhere) it travels as a reference to the receiving
    process's own instance, never with this process's counters or tasks.
    """

    def __reduce__(self) -> tuple[Any, tuple[()]]:
        return (_process_metrics, ())

    def __init__(self) -> None:
        self._ray: dict[str, Any] | None = None
        self._tally: dict[tuple[str, tuple[str, ...]], float] = {}
        self._samples: dict[tuple[str, tuple[str, ...]], _Sample] = {}
        self._flusher: asyncio.Task[None] | None = None

    def _objects(self) -> dict[str, Any] | None:
        if self._ray is None:
            types = _metric_types()
            if types is None:  # not on Ray (a test's fake cluster): counted, not exported
                return None
            Counter, Gauge, Histogram = types  # noqa: N806 - Ray's classes

            made: dict[str, Any] = {
                name: Counter(name, description=desc, tag_keys=keys)
                for name, (desc, keys) in _COUNTERS.items()}
            for name, (desc, bounds, keys) in _HISTOGRAMS.items():
                made[name] = Histogram(name, description=desc, boundaries=bounds,
                                       tag_keys=keys or None)
            for name, (desc, keys) in _GAUGES.items():
                made[name] = Gauge(name, description=desc, tag_keys=keys)
            self._ray = made
        return self._ray

    def count(self, name: str, value: float = 1, *tags: str) -> None:
        """Adds to a counter (tag values in the order of its tag keys)."""
        key = (name, tags)
        self._tally[key] = self._tally.get(key, 0) + value
        if self._flusher is None or self._flusher.done():
            self._flush_later()

    def observe(self, name: str, value: float, *tags: str) -> None:
        """Observes a histogram's value (tag values in the order of its tag keys): handed to
        Ray with the counters, or, past :data:`SAMPLED_PER_S` values a second, sampled."""
        key = (name, tags)
        sample = self._samples.get(key)
        if sample is None:
            sample = self._samples[key] = _Sample()
        sample.add(value)
        if self._flusher is None or self._flusher.done():
            self._flush_later()

    def _flush_later(self) -> None:
        with contextlib.suppress(RuntimeError):  # no running loop: flushed by the next one
            self._flusher = asyncio.get_running_loop().create_task(self._flush_soon())

    async def _flush_soon(self) -> None:
        await asyncio.sleep(FLUSH_S)
        self.flush()

    def flush(self) -> None:
        """Hands the summed counters and the values observed (or their sample) to Ray."""
        tally, self._tally = self._tally, {}
        samples, self._samples = self._samples, {}
        made = self._objects()
        if made is None:
            return
        for (name, tags), value in tally.items():
            _, keys = _COUNTERS[name]
            try:
                made[name].inc(value, tags=dict(zip(keys, tags, strict=True)))
            except Exception as exc:  # a metric must never break messaging
                log.debug("metric %s not recorded: %s", name, exc)
        for (name, tags), sample in samples.items():
            *_, keys = _HISTOGRAMS[name]
            try:
                histogram, named = made[name], dict(zip(keys, tags, strict=True)) or None
                for value in sample.values:
                    histogram.observe(value, tags=named)
            except Exception as exc:
                log.debug("metric %s not recorded: %s", name, exc)

    def gauge(self, name: str, value: float, **tags: str) -> None:
        """Sets a gauge."""
        made = self._objects()
        if made is not None:
            try:
                made[name].set(value, tags=tags or None)
            except Exception as exc:
                log.debug("metric %s not recorded: %s", name, exc)


metrics = _Metrics()


def _process_metrics() -> _Metrics:
    """This process's metrics (what an unpickled reference resolves to)."""
    return metrics


def messages(envelopes: Any, direction: str) -> None:
    """Counts envelopes by type (``direction``: sent or received), one tally per type."""
    by_type: dict[str, int] = {}
    for env in envelopes:
        kind = env.msg_type.value
        by_type[kind] = by_type.get(kind, 0) + 1
    for kind, n in by_type.items():
        metrics.count("reach_messages", n, kind, direction)
