"""reach's Grafana dashboard and alerting rules against a real Prometheus (Debian's package)
scraping the session's two-node Ray while reach runs traffic through it: requests and their
replies in batches, a refused sender, a supervised agent's restart, a task, a dead letter. Every
panel query of the dashboard, as Grafana sends it with every variable at "All", returns series
through Prometheus's HTTP API; promtool passes the configuration and the rules, Prometheus
evaluates the rules on the live series, and the rules fire on the histories they are meant for.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray
import yaml
from prometheus_tools import Prometheus, needs_prometheus, promtool, write_config, write_targets
from ray_helpers import free_port, kill_and_wait, wait_until
from support_agents import Echo, Recorder, Text, Worker

import reach
from reach import AuthError, ChildSpec, Intensity, SupervisorSpec
from reach.client import Client
from reach.observe import dashboards

pytestmark = [pytest.mark.integration, needs_prometheus]

FAST = reach.Backoff(base_s=0.01, cap_s=0.05)
SUPERVISOR = "prom-sup"
#: Ray hands metrics to its endpoints every few seconds, and Prometheus scrapes them each second.
SERIES_TIMEOUT_S = 90.0


def metrics_targets() -> list[str]:
    """The Prometheus endpoints of the cluster's live nodes (``host:port``), as Ray's dashboard
    lists them in its service discovery file (the session cluster runs without a dashboard)."""
    return [f"{n['NodeManagerAddress']}:{n['MetricsExportPort']}"
            for n in ray.nodes() if n["Alive"] and n.get("MetricsExportPort")]


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The dashboard and the rules, as ``reach grafana`` writes them."""
    return dashboards.write(tmp_path_factory.mktemp("reach-metrics"))


@pytest.fixture(scope="module")
def prometheus(rt: Any, shipped: tuple[Path, Path],
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    folder = tmp_path_factory.mktemp("prometheus")
    targets = metrics_targets()
    assert len(targets) == 2, targets
    write_targets(folder / "targets.json", targets)
    config = write_config(folder, rules=shipped[1])
    checked = promtool("check", "config", str(config))
    assert checked.returncode == 0, checked.stdout
    with Prometheus(config, folder / "data", free_port()) as server:
        yield server


def other_node() -> str:
    """The ID of the session cluster's node that this driver is not on."""
    here = ray.get_runtime_context().get_node_id()
    [node] = [n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeID"] != here]
    return str(node)


async def traffic(rt: Any) -> Any:
    """Runs what makes every panel's series exist; returns the supervisor it started. The
    agents' pool is on the node the driver is not on, so that both nodes count messages."""
    pool = reach.Packed(pool="prom", size=1, node_id=other_node())
    await rt.spawn_many(Echo, ["prom-echo"], placement=pool)
    for i in range(20):
        await rt.client.request("prom-echo", Text(text=f"one by one {i}"))
    # Sent together: the transport coalesces them into fewer Ray calls (batches above 1).
    await asyncio.gather(*(rt.client.request("prom-echo", Text(text=f"together {i}"))
                           for i in range(50)))
    # A sender that is no registered agent (though it signs with the deployment's key).
    with pytest.raises(AuthError):
        await Client(rt.link, "prom-ghost").request("prom-echo", Text(text="let me in"))
    # A supervised agent that ends abnormally, restarted; then a task through its supervisor.
    sup = await rt.supervise(SupervisorSpec(SUPERVISOR, backoff=FAST, intensity=Intensity(10, 5),
                                            children=[ChildSpec(Worker, "prom-worker",
                                                                placement=pool)]))
    await rt.client.request("prom-worker", Text(text="die"))

    async def restarted() -> bool:
        return bool((await sup.status()).restarts)

    await wait_until(restarted, timeout_s=30)

    async def task_done() -> bool:
        try:
            task = await sup.submit("prom-worker", Text(text="a task"))
            await task.result()
        except (reach.AgentUnavailable, reach.AgentNotFound):
            return False  # still coming back
        return True

    await wait_until(task_done, timeout_s=30)
    # An agent whose host is killed, then notified: a dead letter.
    info = await rt.spawn(Recorder, "prom-gone")
    await kill_and_wait(ray.get_actor(info.host, namespace="reach"))
    with contextlib.suppress(reach.AgentUnavailable):
        await rt.client.notify("prom-gone", Text(text="into the void"))
    return sup


def variable_values(server: Prometheus, name: str) -> list[str]:
    """The values Grafana lists for the dashboard's template variable ``name`` (a
    ``label_values(SELECTOR, LABEL)`` query, other variables at "All")."""
    board = json.loads(dashboards.dashboard_text())
    [var] = [v for v in board["templating"]["list"] if v["name"] == name]
    found = re.fullmatch(r"label_values\((.+),\s*(\w+)\)",
                         dashboards.match_all(var["query"]["query"], board))
    assert found, var["query"]
    values: list[str] = server.api(f"label/{found.group(2)}/values", **{"match[]": found.group(1)})
    return values


def missing_series(server: Prometheus) -> list[str]:
    """The panel queries that Prometheus answers with no series (panel title and query), and
    the nodes whose reach series it has none of yet."""
    missing = [f"{q.panel} [{q.ref}]: {q.expr}" for q in dashboards.panel_queries()
               if not server.api("query", query=q.expr)["result"]]
    nodes = set(variable_values(server, "Instance"))
    return missing + [f"node {t}: no messages counted" for t in metrics_targets()
                      if t not in nodes]


async def test_every_panel_query_returns_series_and_prometheus_evaluates_the_rules(
    rt: Any, prometheus: Prometheus, shipped: tuple[Path, Path]
) -> None:
    sup = await traffic(rt)
    try:
        deadline = time.monotonic() + SERIES_TIMEOUT_S
        missing = missing_series(prometheus)
        while missing and time.monotonic() < deadline:
            await asyncio.sleep(1.0)
            missing = missing_series(prometheus)
        assert not missing, "without series:\n" + "\n".join(missing)

        up = prometheus.api("query", query='up{job="ray"}')["result"]
        assert sorted(s["metric"]["instance"] for s in up) == sorted(metrics_targets())
        assert all(s["value"][1] == "1" for s in up), up
        # The dashboard's other choices: this session, the supervisor that restarted.
        assert variable_values(prometheus, "SessionName")
        # Its restart is counted once its process has handed the counter to Ray and Ray's
        # export been scraped, maybe after the other supervisors' series made the panels whole.
        ours = f"reach.sup.{SUPERVISOR}"

        async def listed() -> bool:
            return ours in variable_values(prometheus, "Supervisor")

        await wait_until(listed, timeout_s=SERIES_TIMEOUT_S, poll_s=1.0)

        async def evaluated() -> list[dict[str, Any]]:
            rules = [r for g in prometheus.api("rules")["groups"] for r in g["rules"]]
            return rules if rules and all(r["health"] == "ok" for r in rules) else []

        rules = await wait_until(evaluated, timeout_s=30)
        assert {r["name"] for r in rules} == {
            "ReachRestartStorm", "ReachDeadLettersRising", "ReachAuthRefusals",
            "ReachAgentsOffline"}
    finally:
        await sup.stop()

    checked = promtool("check", "rules", str(shipped[1]))
    assert checked.returncode == 0, checked.stdout
    assert "SUCCESS: 4 rules found" in checked.stdout


#: Histories (one sample a minute) and the alerts due on them at ``at``: a storm and a calm
#: supervisor, a flow and a trickle of dead letters, a burst of refusals, an agent left offline.
ALERT_CASES: list[dict[str, Any]] = [
    {"series": {'ray_reach_restarts_total{SessionName="s",supervisor="reach.sup.loop"}':
                "0+3x10",
                'ray_reach_restarts_total{SessionName="s",supervisor="reach.sup.calm"}':
                "0+1x10"},
     "at": "8m", "firing": [{"alertname": "ReachRestartStorm", "SessionName": "s",
                             "supervisor": "reach.sup.loop"}]},
    {"series": {'ray_reach_dead_letters_total{SessionName="s",reason="agent_unavailable"}':
                "0+3x20",
                'ray_reach_dead_letters_total{SessionName="s",reason="poison"}': "0+0.5x20"},
     "at": "15m", "firing": [{"alertname": "ReachDeadLettersRising", "SessionName": "s",
                              "reason": "agent_unavailable"}]},
    {"series": {'ray_reach_auth_refusals_total{SessionName="s",reason="acl"}': "0+2x10",
                'ray_reach_auth_refusals_total{SessionName="s",reason="unsigned"}': "0+0x10"},
     "at": "6m", "firing": [{"alertname": "ReachAuthRefusals", "SessionName": "s",
                             "reason": "acl"}]},
    {"series": {'ray_reach_registry_agents{SessionName="s",status="offline"}': "0 0 1x10",
                'ray_reach_registry_agents{SessionName="s",status="online"}': "5x12"},
     "at": "8m", "firing": [{"alertname": "ReachAgentsOffline", "SessionName": "s"}]},
    {"series": {'ray_reach_registry_agents{SessionName="s",status="offline"}': "0 0 1x10"},
     "at": "5m", "firing": []},  # offline for 3 minutes only: not yet
]


def test_the_rules_fire_on_the_histories_they_are_meant_for(
    shipped: tuple[Path, Path], tmp_path: Path
) -> None:
    tests = []
    for case in ALERT_CASES:
        expected = [{"labels": "ALERTS{" + ",".join(
            f'{k}="{v}"' for k, v in {**alert, "alertstate": "firing",
                                      "severity": "warning"}.items()) + "}", "value": 1}
                    for alert in case["firing"]]
        tests.append({"interval": "1m",
                      "input_series": [{"series": s, "values": v}
                                       for s, v in case["series"].items()],
                      "promql_expr_test": [{"expr": 'ALERTS{alertstate="firing"}',
                                            "eval_time": case["at"], "exp_samples": expected}]})
    spec = tmp_path / "reach-alerts-test.yml"
    spec.write_text(yaml.safe_dump({"rule_files": [str(shipped[1])], "evaluation_interval": "1m",
                                    "tests": tests}, sort_keys=False), encoding="utf-8")
    done = promtool("test", "rules", str(spec))
    assert done.returncode == 0, done.stdout
