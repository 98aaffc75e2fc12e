"""reach's metrics on a real Prometheus endpoint: a local Ray exporting metrics, real traffic, a
restart, tasks and dead letters, then a scrape (the scenario runs in a process of its own, since
it starts a Ray with a metrics port)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from reach._runtime.metrics import LATENCY_BOUNDARIES, SAMPLED_PER_S

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

HERE = Path(__file__).parent


def value(found: dict[str, float], name: str, **labels: str) -> float:
    """The sum of a metric's samples whose labels include ``labels``."""
    total = 0.0
    for key, v in found.items():
        metric, _, rest = key.partition("{")
        have = dict(p.split("=", 1) for p in rest.rstrip("}").split(",") if p)
        if metric == name and all(have.get(k) == f'"{w}"' for k, w in labels.items()):
            total += v
    return total


@pytest.fixture(scope="module")
def found() -> dict[str, float]:
    out = subprocess.run([sys.executable, str(HERE / "metrics_scenario.py")], check=True,
                         capture_output=True, text=True, timeout=600)
    scraped: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return scraped


def test_messages_are_counted_by_type_and_direction(found: dict[str, float]) -> None:
    sent = value(found, "ray_reach_messages_total", direction="sent", type="request")
    received = value(found, "ray_reach_messages_total", direction="received", type="request")
    assert sent >= 500 + 3
    assert received >= 500 + 3
    assert value(found, "ray_reach_messages_total", direction="received", type="response") >= 500
    assert value(found, "ray_reach_messages_total", type="error") >= 3


def test_requests_are_counted_by_outcome(found: dict[str, float]) -> None:
    assert value(found, "ray_reach_requests_total", outcome="ok") >= 500
    assert value(found, "ray_reach_requests_total", outcome="error") >= 3


def test_request_latency_is_a_histogram_by_outcome(found: dict[str, float]) -> None:
    # Sampled past SAMPLED_PER_S values a second (the 300 requests sent at once are): every
    # second's sample holds min(seen, SAMPLED_PER_S) of them, never more than were made.
    ok = value(found, "ray_reach_request_latency_seconds_count", outcome="ok")
    assert SAMPLED_PER_S <= ok <= value(found, "ray_reach_requests_total", outcome="ok")
    assert value(found, "ray_reach_request_latency_seconds_count", outcome="error") >= 3
    assert value(found, "ray_reach_request_latency_seconds_sum", outcome="ok") > 0
    # Exported with reach's boundaries, which are in seconds (the name's unit).
    bounds = {float(key.split('le="')[1].split('"')[0]) for key in found
              if key.startswith("ray_reach_request_latency_seconds_bucket{") and 'le="' in key}
    assert bounds - {float("inf")} == set(LATENCY_BOUNDARIES)
    assert value(found, "ray_reach_request_latency_seconds_bucket", outcome="ok",
                 le="+Inf") == ok


def test_batches_carry_at_least_one_envelope_each(found: dict[str, float]) -> None:
    calls = value(found, "ray_reach_batch_envelopes_count")
    assert calls > 0
    assert value(found, "ray_reach_batch_envelopes_sum") >= calls


def test_restarts_tasks_dead_letters_and_registry_size(found: dict[str, float]) -> None:
    assert value(found, "ray_reach_restarts_total", supervisor="reach.sup.metrics-sup") >= 1
    assert value(found, "ray_reach_tasks", supervisor="reach.sup.metrics-sup",
                 state="completed") == 5
    assert value(found, "ray_reach_dead_letters_total") >= 1
    assert value(found, "ray_reach_registry_agents", status="online") >= 5
