"""Histograms handed to Ray: every value up to SAMPLED_PER_S a second a process, a uniform
sample of that many beyond (Ray's metrics agent replays each value handed to it), while
counters keep every count."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest

from reach._runtime import metrics as metrics_module
from reach._runtime.metrics import SAMPLED_PER_S, _Metrics, export_through


class _Recorded:
    """A stand-in for Ray's metric classes that records what it is handed."""

    calls: ClassVar[list[tuple[str, str, float, dict[str, str] | None]]] = []

    def __init__(self, name: str, **_: Any) -> None:
        self.name = name

    def inc(self, value: float, tags: dict[str, str] | None = None) -> None:
        self.calls.append(("inc", self.name, value, tags))

    def observe(self, value: float, tags: dict[str, str] | None = None) -> None:
        self.calls.append(("observe", self.name, value, tags))

    def set(self, value: float, tags: dict[str, str] | None = None) -> None:
        self.calls.append(("set", self.name, value, tags))


@pytest.fixture
def recorded() -> Iterator[list[tuple[str, str, float, dict[str, str] | None]]]:
    before = metrics_module._metric_types
    _Recorded.calls = []
    export_through(lambda: (_Recorded, _Recorded, _Recorded))
    try:
        yield _Recorded.calls
    finally:
        export_through(before)


def observed(calls: list[tuple[str, str, float, dict[str, str] | None]],
             name: str) -> list[float]:
    return [value for kind, metric, value, _ in calls if kind == "observe" and metric == name]


def test_every_value_is_handed_over_below_the_cap(recorded: list[Any]) -> None:
    m = _Metrics()
    for i in range(SAMPLED_PER_S):
        m.observe("reach_request_latency_seconds", i / 1000, "ok")
    m.observe("reach_request_latency_seconds", 9.0, "error")
    m.flush()
    assert observed(recorded, "reach_request_latency_seconds") == [
        *(i / 1000 for i in range(SAMPLED_PER_S)), 9.0]
    tags = {tags["outcome"] for kind, _, _, tags in recorded if kind == "observe" and tags}
    assert tags == {"ok", "error"}


def test_past_the_cap_a_uniform_sample_of_the_cap_is_handed_over(recorded: list[Any]) -> None:
    random.seed(22)
    m = _Metrics()
    seen = 20 * SAMPLED_PER_S
    for i in range(seen):
        m.observe("reach_batch_envelopes", float(i))
    m.flush()
    sample = observed(recorded, "reach_batch_envelopes")
    assert len(sample) == SAMPLED_PER_S
    assert len(set(sample)) == SAMPLED_PER_S
    assert all(0 <= v < seen for v in sample)
    # Uniform over the whole second, not its first values: each tenth of the stream holds
    # about a tenth of the sample.
    tenths = [sum(1 for v in sample if k * seen / 10 <= v < (k + 1) * seen / 10)
              for k in range(10)]
    assert all(SAMPLED_PER_S / 20 <= n <= SAMPLED_PER_S / 5 for n in tenths), tenths


def test_each_flush_starts_a_new_sample_and_counters_keep_every_count(
        recorded: list[Any]) -> None:
    m = _Metrics()
    for second in range(3):
        for _ in range(2 * SAMPLED_PER_S):
            m.count("reach_requests", 1, "ok")
            m.observe("reach_request_latency_seconds", float(second), "ok")
        m.flush()
    assert sorted(set(observed(recorded, "reach_request_latency_seconds"))) == [0.0, 1.0, 2.0]
    assert len(observed(recorded, "reach_request_latency_seconds")) == 3 * SAMPLED_PER_S
    counted = [(value, tags) for kind, name, value, tags in recorded
               if kind == "inc" and name == "reach_requests"]
    assert counted == [(2 * SAMPLED_PER_S, {"outcome": "ok"})] * 3


def test_off_ray_values_are_dropped_at_the_flush() -> None:
    before = metrics_module._metric_types
    export_through(lambda: None)  # no metric classes: nothing to hand over, nothing held on
    try:
        m = _Metrics()
        for _ in range(3 * SAMPLED_PER_S):
            m.observe("reach_batch_envelopes", 1.0)
        assert len(m._samples[("reach_batch_envelopes", ())].values) == SAMPLED_PER_S
        m.flush()
        assert m._samples == {}
    finally:
        export_through(before)
