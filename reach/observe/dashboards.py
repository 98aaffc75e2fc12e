"""reach's Grafana dashboard and Prometheus alerting rules, as the package ships them (beside this
module: ``grafana/reach.json`` and ``prometheus/reach-alerts.yml``), and writing them to a folder
where a Grafana and a Prometheus find them.

The dashboard charts the ``ray_reach_*`` metrics (see :mod:`reach._runtime.metrics`) through a
``${datasource}`` Prometheus data source variable, as Ray's own dashboards do, so it sits beside
them in the Grafana that Ray's dashboard provisions, or in any other.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from reach.errors import ConfigError

#: The dashboard's and the rules' places in the package (and their names where they are written).
DASHBOARD = ("grafana", "reach.json")
RULES = ("prometheus", "reach-alerts.yml")
#: The subfolders :func:`write` puts them in: Grafana's dashboards folder (what a Ray head's
#: ``RAY_METRICS_GRAFANA_DASHBOARD_OUTPUT_DIR`` names, see cluster.yaml) and Prometheus's rules.
DASHBOARDS_FOLDER = "dashboards"
RULES_FOLDER = "prometheus"
#: Grafana's own variables that a panel query may use, all standing for a time range.
RANGE_VARIABLES = ("__rate_interval", "__interval", "__range")

_VARIABLE = re.compile(r"\$\{(\w+)\}|\$(\w+)")


@dataclass(frozen=True)
class PanelQuery:
    """One query of a dashboard panel, as Grafana sends it to Prometheus."""

    panel: str
    """The panel's title."""
    ref: str
    """The query's ``refId`` within its panel (A, B, ...)."""
    expr: str
    """The PromQL expression, its variables replaced."""


def dashboard_text() -> str:
    """The Grafana dashboard, as JSON text."""
    return _shipped(DASHBOARD)


def rules_text() -> str:
    """The Prometheus alerting rules, as YAML text."""
    return _shipped(RULES)


def write(folder: Path) -> tuple[Path, Path]:
    """Writes the dashboard to ``folder/dashboards/reach.json`` and the rules to
    ``folder/prometheus/reach-alerts.yml``, making the folders as needed and replacing the files.

    Returns:
        The paths of the dashboard and of the rules.

    Raises:
        OSError: a folder or file could not be made or written.
    """
    dashboard = folder / DASHBOARDS_FOLDER / DASHBOARD[1]
    rules = folder / RULES_FOLDER / RULES[1]
    for path, text in ((dashboard, dashboard_text()), (rules, rules_text())):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return dashboard, rules


def panel_queries(dashboard: dict[str, Any] | None = None, *,
                  range_: str = "1m") -> list[PanelQuery]:
    """Every panel query of ``dashboard`` (default: reach's) as Grafana sends it with every
    template variable at "All" (see :func:`match_all`): what to ask a Prometheus to see whether
    it has the series the dashboard charts.

    Raises:
        ConfigError: a query uses a variable that the dashboard does not define with an
            ``allValue``.
    """
    board = json.loads(dashboard_text()) if dashboard is None else dashboard
    return [PanelQuery(panel["title"], target["refId"],
                       match_all(target["expr"], board, range_=range_))
            for panel in _panels(board) for target in panel.get("targets", [])]


def match_all(query: str, dashboard: dict[str, Any], *, range_: str = "1m") -> str:
    """``query`` (a panel's, or a template variable's own) with each of ``dashboard``'s
    template variables at "All" (its ``allValue``, a regular expression matching every value)
    and Grafana's time range variables (:data:`RANGE_VARIABLES`) at ``range_``.

    Raises:
        ConfigError: ``query`` uses a variable that the dashboard does not define with an
            ``allValue``.
    """
    values = dict.fromkeys(RANGE_VARIABLES, range_)
    for var in dashboard.get("templating", {}).get("list", []):
        if var.get("includeAll") and var.get("allValue") is not None:
            values[var["name"]] = var["allValue"]

    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name not in values:
            raise ConfigError(f"a query uses ${name}, which the dashboard does not define "
                              "with an allValue", details={"setting": name})
        return values[name]

    return _VARIABLE.sub(value, query)


def _panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    """The dashboard's panels, those inside collapsed rows included, rows left out."""
    found: list[dict[str, Any]] = []
    for panel in board.get("panels", []):
        if panel.get("type") == "row":
            found.extend(panel.get("panels", []))
        else:
            found.append(panel)
    return found


def _shipped(parts: tuple[str, str]) -> str:
    return resources.files("reach.observe").joinpath(*parts).read_text(encoding="utf-8")
