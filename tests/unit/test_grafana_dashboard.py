"""reach's Grafana dashboard and Prometheus alerting rules, as shipped: valid, every panel with a
query, every metric they name one that reach exports (under the name Ray gives it), every
variable defined, and ``reach grafana`` writing both to a folder. Whether Prometheus has the
series is for tests/integration/test_prometheus_on_ray.py, against a real one."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from reach._runtime.metrics import KINDS, MetricKind
from reach.errors import ConfigError
from reach.observe import dashboards
from reach.tools.cli import main

#: The suffixes Ray's Prometheus endpoint gives each kind of metric.
SUFFIXES = {MetricKind.COUNTER: ("_total",), MetricKind.GAUGE: ("",),
            MetricKind.HISTOGRAM: ("_bucket", "_sum", "_count")}
EXPORTED = {f"ray_{name}{suffix}": name for name, kind in KINDS.items()
            for suffix in SUFFIXES[kind]}
#: A name that may be a metric's, and where label names stand in PromQL (`{...}`, `by (...)`).
METRIC = re.compile(r"\bray_[a-z_]+")
LABELS = re.compile(r"\{[^}]*\}|\b(?:by|without|on|ignoring)\s*\([^)]*\)")
#: A template variable's query: the values of a label (group 2) on series (group 1).
LABEL_VALUES = re.compile(r"label_values\((.+),\s*(\w+)\)")
ALERTS = {"ReachRestartStorm", "ReachDeadLettersRising", "ReachAuthRefusals",
          "ReachAgentsOffline"}


@pytest.fixture(scope="module")
def board() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(dashboards.dashboard_text())
    return loaded


@pytest.fixture(scope="module")
def rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(dashboards.rules_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def metrics_in(expr: str) -> list[str]:
    """The metric names in a PromQL expression (``ray_io_cluster`` is a label, not one)."""
    return METRIC.findall(LABELS.sub(" ", expr))


def panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in board["panels"] if p["type"] != "row"]


def variables(board: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in board["templating"]["list"]}


def test_the_dashboard_charts_through_a_prometheus_datasource_variable(
        board: dict[str, Any]) -> None:
    assert board["uid"] == "reach"
    datasource = variables(board)["datasource"]
    assert (datasource["type"], datasource["query"]) == ("datasource", "prometheus")
    for panel in panels(board):
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert all(t["datasource"] == panel["datasource"] for t in panel["targets"])


def test_every_panel_has_a_query_and_a_place_of_its_own(board: dict[str, Any]) -> None:
    shown = panels(board)
    assert len(shown) >= 8
    for panel in shown:
        assert panel["targets"], panel["title"]
        assert all(t["expr"].strip() for t in panel["targets"]), panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert len(set(refs)) == len(refs), panel["title"]
    ids = [p["id"] for p in board["panels"]]
    assert len(set(ids)) == len(ids)
    assert len({p["title"] for p in shown}) == len(shown)


def test_every_metric_a_query_names_is_one_reach_exports_and_each_is_charted(
        board: dict[str, Any]) -> None:
    charted = set()
    for panel in panels(board):
        for target in panel["targets"]:
            names = metrics_in(target["expr"])
            assert names, f"{panel['title']}: no reach metric in {target['expr']}"
            unknown = [n for n in names if n not in EXPORTED]
            assert not unknown, f"{panel['title']}: {unknown} are not exported by reach"
            charted.update(EXPORTED[n] for n in names)
    assert charted == set(KINDS)


def test_every_variable_a_query_uses_is_defined_and_can_be_all(board: dict[str, Any]) -> None:
    defined = variables(board)
    queries = dashboards.panel_queries(board)
    assert len(queries) == sum(len(p["targets"]) for p in panels(board))
    for query in queries:
        assert "$" not in query.expr, query
    used = {m for p in panels(board) for t in p["targets"]
            for m in re.findall(r"\$\{?(\w+)", t["expr"])}
    for name in used - set(dashboards.RANGE_VARIABLES):
        assert defined[name]["includeAll"], name
        assert defined[name]["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
    # Per node everywhere the metric has one (all but the registry's); per supervisor where
    # the metric has the label.
    assert {"Instance", "Supervisor"} <= used


def test_every_query_variable_lists_label_values_of_a_reach_metric(
        board: dict[str, Any]) -> None:
    for name, var in variables(board).items():
        if var["type"] == "datasource":
            continue
        assert var["query"]["query"] == var["definition"], name
        found = LABEL_VALUES.fullmatch(dashboards.match_all(var["definition"], board))
        assert found, var["definition"]
        selector = found.group(1)
        by_name = re.findall(r'__name__=~"([^"]+)"', selector)
        named = metrics_in(selector) or [n for alt in by_name for n in alt.split("|")]
        assert named, selector
        assert all(n in EXPORTED for n in named), selector


def test_panel_queries_refuses_a_variable_the_dashboard_does_not_define() -> None:
    board = {"panels": [{"type": "timeseries", "title": "t", "targets": [
        {"refId": "A", "expr": 'sum(ray_reach_tasks{state=~"$State"})'}]}]}
    with pytest.raises(ConfigError, match=r"\$State"):
        dashboards.panel_queries(board)


def test_panel_queries_reads_panels_inside_collapsed_rows() -> None:
    board = {"templating": {"list": [{"name": "Node", "includeAll": True, "allValue": ".+"}]},
             "panels": [{"type": "row", "title": "r", "panels": [
                 {"type": "timeseries", "title": "t", "targets": [
                     {"refId": "A", "expr": 'rate(x{instance=~"${Node}"}[$__rate_interval])'}]}]}]}
    [query] = dashboards.panel_queries(board, range_="30s")
    assert query == dashboards.PanelQuery("t", "A", 'rate(x{instance=~".+"}[30s])')


def test_the_alerting_rules_are_the_four_with_thresholds_explained(
        rules: list[dict[str, Any]]) -> None:
    assert {r["alert"] for r in rules} == ALERTS
    for rule in rules:
        assert rule["labels"]["severity"] in ("warning", "critical")
        assert rule["annotations"]["summary"]
        assert "threshold" in rule["annotations"]["description"], rule["alert"]
        names = metrics_in(rule["expr"])
        assert names, rule["expr"]
        assert all(n in EXPORTED for n in names), rule["expr"]


def test_reach_grafana_writes_the_dashboard_and_the_rules_to_a_folder(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["grafana", str(tmp_path / "metrics")]) == 0
    dashboard = tmp_path / "metrics" / "dashboards" / "reach.json"
    rules = tmp_path / "metrics" / "prometheus" / "reach-alerts.yml"
    assert dashboard.read_text(encoding="utf-8") == dashboards.dashboard_text()
    assert rules.read_text(encoding="utf-8") == dashboards.rules_text()
    out = capsys.readouterr().out
    assert str(dashboard) in out
    assert str(rules) in out


def test_reach_grafana_says_why_it_cannot_write(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("", encoding="utf-8")
    assert main(["grafana", str(blocker)]) == 2
    assert "reach grafana:" in capsys.readouterr().err
