"""The chart's monitoring: the Grafana dashboard and the alerts use only metrics tidal exports, in valid PromQL,
and the ServiceMonitor, PrometheusRule and dashboard ConfigMap come with the values that turn them on."""

from __future__ import annotations

import importlib.util
import json
import re
from typing import TYPE_CHECKING

import pytest
import yaml

from autoscaler.runtime.observability.metrics import METRIC_NAMES, METRIC_SERIES
from tests.fakes.helm_chart import CHART, REPO, find, render

if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

DASHBOARD = CHART / "files" / "tidal-dashboard.json"
RULES = CHART / "files" / "alerts.yaml"
MONITORING_ON = {
    "monitoring": {
        "serviceMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
        "prometheusRule": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
        "dashboard": {"enabled": True},
    }
}
# Any identifier that starts like one of tidal's metrics, wherever it appears (expressions, variables, text).
TIDAL_NAME = re.compile(r"\btidal_[a-z0-9_]+")
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__interval": "1m", "$job": "tidal"}


def dashboard() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return document


def rules() -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = yaml.safe_load(RULES.read_text())["groups"][0]["rules"]
    return found


def dashboard_exprs() -> list[str]:
    return [t["expr"] for p in dashboard()["panels"] for t in p.get("targets", ())]


def promql(expr: str) -> tuple[Any, Any]:
    parser = pytest.importorskip("promql_parser")
    for variable, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    return parser, parser.parse(expr)


def selected_metrics(expr: str) -> list[str]:
    parser, tree = promql(expr)
    names: list[str] = []

    def visit(node: Any) -> None:
        if isinstance(node, parser.VectorSelector):
            names.append(node.name)

    parser.walk(tree, visit)
    return names


@pytest.mark.parametrize("path", [DASHBOARD, RULES], ids=["dashboard", "rules"])
def test_every_tidal_name_they_mention_is_a_series_tidal_exports(path: Path) -> None:
    mentioned = set(TIDAL_NAME.findall(path.read_text()))
    assert mentioned
    assert sorted(mentioned - METRIC_SERIES) == []


def test_every_dashboard_query_parses_and_selects_only_tidal_series() -> None:
    selected = [name for expr in dashboard_exprs() for name in selected_metrics(expr)]
    assert selected and sorted(set(selected) - METRIC_SERIES) == []


def test_every_alert_expression_parses_and_selects_only_tidal_series() -> None:
    selected = [name for rule in rules() for name in selected_metrics(rule["expr"])]
    assert selected and sorted(set(selected) - METRIC_SERIES) == []


def test_the_dashboard_shows_every_metric_family_tidal_exports() -> None:
    text = DASHBOARD.read_text()
    shown = {family for family in METRIC_NAMES if re.search(rf"\b{family}(_bucket|_sum|_count)?\b", text)}
    assert sorted(METRIC_NAMES - shown) == []


@pytest.mark.parametrize(
    ("title", "metric"),
    [
        ("GPUs up vs clusterGPULimit", "tidal_cluster_gpu_limit"),
        ("Pending pods by state and reason", "tidal_pending_pods"),
        ("Successful launches by offering", "tidal_launches_total"),
        ("Failed launches by offering and outcome", "tidal_launches_total"),
        ("Cost per hour", "tidal_cluster_cost_per_hour"),
        ("Reconcile latency", "tidal_reconcile_duration_seconds_bucket"),
        ("GPUs per KAI queue", "tidal_queue_gpus"),
        ("Cost per hour per KAI queue vs its budget", "tidal_queue_budget_per_hour"),
        ("Share of each queue's budget in use", "tidal_queue_cost_per_hour"),
    ],
)
def test_the_dashboard_has_the_panels_operators_need(title: str, metric: str) -> None:
    panel = next(p for p in dashboard()["panels"] if p["title"] == title)
    assert any(metric in t["expr"] for t in panel["targets"])


def test_the_dashboard_file_is_what_its_generator_writes() -> None:
    spec = importlib.util.spec_from_file_location("gen_dashboard", REPO / "scripts" / "gen_dashboard.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert DASHBOARD.read_text() == module.render(), "run: python scripts/gen_dashboard.py"


def test_dashboard_panels_do_not_overlap() -> None:
    cells: set[tuple[int, int]] = set()
    for panel in dashboard()["panels"]:
        grid = panel["gridPos"]
        mine = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert grid["x"] + grid["w"] <= 24 and not cells & mine, panel["title"]
        cells |= mine


@pytest.mark.parametrize(
    ("alert", "needle", "duration"),
    [
        ("TidalGPULimitReached", "tidal_cluster_gpus >= tidal_cluster_gpu_limit", "15m"),
        ("TidalLaunchesFailing", 'tidal_launches_total{outcome="success"}', "5m"),
        ("TidalPodsPendingWithoutCapacity", 'tidal_pending_pods{state="unplaced"}', "10m"),
        ("TidalReconcileStalled", "time() - tidal_last_successful_reconcile_timestamp_seconds > 300", "1m"),
    ],
)
def test_the_required_alerts_exist(alert: str, needle: str, duration: str) -> None:
    rule = next(r for r in rules() if r.get("alert") == alert)
    assert needle in rule["expr"]
    assert rule["for"] == duration


def test_every_alert_has_a_severity_a_summary_and_a_description() -> None:
    for rule in rules():
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule["alert"]


def test_the_service_monitor_scrapes_the_metrics_service_port() -> None:
    objects = render(MONITORING_ON)
    monitor = find(objects, "ServiceMonitor", "tidal")
    service = find(objects, "Service", "tidal-metrics")
    spec = monitor["spec"]
    assert spec["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert spec["namespaceSelector"]["matchNames"] == [service["metadata"]["namespace"]]
    assert [e["port"] for e in spec["endpoints"]] == [p["name"] for p in service["spec"]["ports"]]
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"


def test_the_prometheus_rule_carries_the_alerts_file_unchanged() -> None:
    rule = find(render(MONITORING_ON), "PrometheusRule", "tidal")
    assert rule["spec"] == yaml.safe_load(RULES.read_text())
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"


def test_the_dashboard_configmap_is_labelled_for_the_grafana_sidecar() -> None:
    configmap = find(render(MONITORING_ON), "ConfigMap", "tidal-dashboard")
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(configmap["data"]["tidal-dashboard.json"]) == dashboard()


def test_monitoring_is_off_unless_asked_for() -> None:
    kinds = {(o["kind"], o["metadata"]["name"]) for o in render()}
    assert not kinds & {
        ("ServiceMonitor", "tidal"),
        ("PrometheusRule", "tidal"),
        ("ConfigMap", "tidal-dashboard"),
    }
