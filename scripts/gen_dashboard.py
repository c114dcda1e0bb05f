#!/usr/bin/env python3
"""Write charts/tidal/files/tidal-dashboard.json, the Grafana dashboard over tidal's metrics.

    python scripts/gen_dashboard.py           # rewrite the file
    python scripts/gen_dashboard.py --check   # exit 1 when the file is not what this script writes

Both replicas export metrics, but only the leader acts: panels about the fleet and the demand keep the
leader's series (``and on(instance) tidal_leader == 1``); counters only ever move on the leader anyway.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from autoscaler.config.generated import write_or_check

OUTPUT = Path(__file__).resolve().parents[1] / "charts" / "tidal" / "files" / "tidal-dashboard.json"

JOB = 'job="$job"'
LEADER = f"on(instance) (tidal_leader{{{JOB}}} == 1)"
FAILED = 'outcome=~"capacity_unavailable|quota_exceeded|throttled|invalid_request|error|deferred"'
WIDTH = 24


def leader(expr: str) -> str:
    """The series of ``expr`` that the current leader exports."""
    return f"({expr} and {LEADER})"


def target(expr: str, legend: str, ref: str) -> dict[str, Any]:
    return {
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "expr": expr,
        "legendFormat": legend,
        "refId": ref,
    }


def panel(
    title: str,
    description: str,
    targets: list[tuple[str, str]],
    *,
    kind: str = "timeseries",
    unit: str = "short",
    width: int = 12,
    height: int = 8,
    stack: bool = False,
    bars: bool = False,
    thresholds: list[tuple[float | None, str]] | None = None,
) -> dict[str, Any]:
    defaults: dict[str, Any] = {"unit": unit}
    if kind == "timeseries":
        defaults["custom"] = {
            "drawStyle": "bars" if bars else "line",
            "fillOpacity": 60 if bars else 10,
            "lineWidth": 1,
            "showPoints": "never",
            "stacking": {"mode": "normal" if stack else "none", "group": "A"},
        }
    steps = thresholds or [(None, "green")]
    defaults["thresholds"] = {
        "mode": "absolute",
        "steps": [{"color": color, "value": value} for value, color in steps],
    }
    options: dict[str, Any] = {"tooltip": {"mode": "multi", "sort": "desc"}}
    if kind == "timeseries":
        options["legend"] = {"displayMode": "table", "placement": "bottom", "calcs": ["lastNotNull", "max"]}
    else:
        options["reduceOptions"] = {"calcs": ["lastNotNull"], "fields": "", "values": False}
    return {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": options,
        "targets": [target(expr, legend, chr(ord("A") + i)) for i, (expr, legend) in enumerate(targets)],
        "gridPos": {"w": width, "h": height},
    }


def row(title: str) -> dict[str, Any]:
    return {"type": "row", "title": title, "collapsed": False, "panels": [], "gridPos": {"w": WIDTH, "h": 1}}


def quantiles(histogram: str, selector: str) -> list[tuple[str, str]]:
    return [
        (
            f"histogram_quantile({q}, sum by (le) (rate({histogram}_bucket{{{selector}}}[$__rate_interval])))",
            f"p{round(q * 100)}",
        )
        for q in (0.5, 0.9, 0.99)
    ]


def panels() -> list[dict[str, Any]]:
    return [
        row("Capacity"),
        panel(
            "GPUs up vs clusterGPULimit",
            "GPUs on nodes tidal manages (counting nodes still launching), GPUs requested by running and "
            "waiting pods, and the configured clusterGPULimit (absent when unlimited).",
            [
                (f"max({leader(f'tidal_cluster_gpus{{{JOB}}}')})", "GPUs up (incl. launching)"),
                (f"max({leader(f'tidal_cluster_gpus_requested{{{JOB}}}')})", "GPUs requested"),
                (f"max(tidal_cluster_gpu_limit{{{JOB}}} >= 0)", "clusterGPULimit"),
            ],
            width=16,
        ),
        panel(
            "Share of the GPU limit in use",
            "GPUs up divided by clusterGPULimit; empty when no limit is set.",
            [
                (
                    f"max({leader(f'tidal_cluster_gpus{{{JOB}}}')}) / max(tidal_cluster_gpu_limit{{{JOB}}} > 0)",
                    "used",
                )
            ],
            kind="gauge",
            unit="percentunit",
            width=8,
            thresholds=[(None, "green"), (0.8, "orange"), (1.0, "red")],
        ),
        panel(
            "Cost per hour",
            "Estimated USD per hour of every node tidal manages, at the prices it launched them for.",
            [(f"max({leader(f'tidal_cluster_cost_per_hour{{{JOB}}}')})", "USD per hour")],
            unit="currencyUSD",
        ),
        panel(
            "Managed nodes by state",
            "Nodes tidal launched, by lifecycle state: launching, registered, ready, idle, draining.",
            [(f"max by (state) ({leader(f'tidal_nodes{{{JOB}}}')})", "{{state}}")],
            stack=True,
        ),
        row("Demand"),
        panel(
            "Pending pods by state and reason",
            "counted: tidal is launching for them; unplaced: they need a node tidal may not launch (limit, "
            "no fitting offering, incomplete gang); ignored: they need no new node, with the reason.",
            [
                (
                    f"sum by (state, reason) ({leader(f'tidal_pending_pods{{{JOB}}}')})",
                    "{{state}}: {{reason}}",
                )
            ],
            stack=True,
        ),
        panel(
            "Scale-up latency",
            "From a pod becoming unschedulable to the launch call made for it (includes batching).",
            quantiles("tidal_scale_up_latency_seconds", JOB),
            unit="s",
        ),
        panel(
            "Unschedulable pods pendingPodReasonRegexp matched",
            "Unschedulable pods of the last 10 minutes whose PodScheduled message pendingPodReasonRegexp "
            "matched (tidal may launch for them) or did not. None matched while some wait means the regexp is "
            "wrong; the tidal-status ConfigMap and the log say so too.",
            [
                (
                    f"max by (result) ({leader(f'tidal_pending_reason_regexp_pods{{{JOB}}}')})",
                    "{{result}}",
                )
            ],
            width=24,
        ),
        row("KAI queues"),
        panel(
            "GPUs per KAI queue",
            "Per queue: GPUs its pods hold on nodes (allocated), wait for (pending, scheduling gates aside), "
            "and, of those, have a node launching for them (launching); requested is allocated + pending.",
            [
                (
                    f"max by (queue, state) ({leader(f'tidal_queue_gpus{{{JOB}}}')})",
                    "{{queue}} {{state}}",
                )
            ],
            width=24,
        ),
        panel(
            "Cost per hour per KAI queue vs its budget",
            "USD per hour of the nodes serving each queue: of every node its pods run on or a launch is for, "
            "the share of the price its pods' GPU requests are (cpu requests on nodes without GPU pods); and "
            "the queue's queueBudgets entry, beyond which tidal launches no node for its pods.",
            [
                (f"max by (queue) ({leader(f'tidal_queue_cost_per_hour{{{JOB}}}')})", "{{queue}}"),
                (f"max by (queue) (tidal_queue_budget_per_hour{{{JOB}}})", "{{queue}} budget"),
            ],
            unit="currencyUSD",
            width=16,
        ),
        panel(
            "Share of each queue's budget in use",
            "Cost per hour of the nodes serving a queue over its queueBudgets entry; only queues with a budget.",
            [
                (
                    f"max by (queue) ({leader(f'tidal_queue_cost_per_hour{{{JOB}}}')}) / "
                    f"max by (queue) (tidal_queue_budget_per_hour{{{JOB}}} > 0)",
                    "{{queue}}",
                )
            ],
            kind="bargauge",
            unit="percentunit",
            width=8,
            thresholds=[(None, "green"), (0.8, "orange"), (1.0, "red")],
        ),
        row("Launches"),
        panel(
            "Successful launches by offering",
            "Nodes launched, by instance type, zone and capacity type.",
            [
                (
                    "sum by (instance_type, zone, capacity_type) "
                    f'(increase(tidal_launches_total{{{JOB}, outcome="success"}}[$__rate_interval]))',
                    "{{instance_type}} {{zone}} {{capacity_type}}",
                )
            ],
            bars=True,
            stack=True,
        ),
        panel(
            "Failed launches by offering and outcome",
            "Launch attempts the cloud refused: capacity_unavailable benches the offering, quota_exceeded its "
            "quota's scope, and tidal falls back in the same reconcile; throttled and deferred launches wait for "
            "the cloud's retry_after.",
            [
                (
                    "sum by (instance_type, zone, capacity_type, outcome) "
                    f"(increase(tidal_launches_total{{{JOB}, {FAILED}}}[$__rate_interval]))",
                    "{{instance_type}} {{zone}} {{capacity_type}}: {{outcome}}",
                )
            ],
            bars=True,
            stack=True,
            thresholds=[(None, "red")],
        ),
        panel(
            "Terminations by reason",
            "Nodes tidal terminated, by reason and outcome.",
            [
                (
                    f"sum by (reason, outcome) (increase(tidal_terminations_total{{{JOB}}}[$__rate_interval]))",
                    "{{reason}}: {{outcome}}",
                )
            ],
            bars=True,
            stack=True,
        ),
        panel(
            "Cloud and Kubernetes API errors",
            "Errors by cloud operation and kind, and by Kubernetes API verb, resource and HTTP status.",
            [
                (
                    "sum by (provider, operation, kind) "
                    f"(increase(tidal_cloud_errors_total{{{JOB}}}[$__rate_interval]))",
                    "cloud {{provider}} {{operation}}: {{kind}}",
                ),
                (
                    "sum by (verb, resource, code) "
                    f"(increase(tidal_kube_api_errors_total{{{JOB}}}[$__rate_interval]))",
                    "kube {{verb}} {{resource}}: {{code}}",
                ),
            ],
            bars=True,
        ),
        panel(
            "Refusals by kind",
            "Candidate offerings the cloud refused, at launch or reported later (GCE and ARM operations): "
            "no-capacity, invalid-request and other bench the offering, quota benches its whole scope, "
            "throttled holds every launch back.",
            [
                (
                    "sum by (provider, refusal) "
                    f"(increase(tidal_launch_refusals_total{{{JOB}}}[$__rate_interval]))",
                    "{{provider}}: {{refusal}}",
                )
            ],
            bars=True,
            stack=True,
        ),
        panel(
            "Gang rollbacks and refused lifecycle transitions",
            "Gangs whose partial launch was terminated after gangLaunchTimeout, and node lifecycle "
            "transitions the fleet refused as illegal (each logged as fleet_transition_refused).",
            [
                (f"sum(increase(tidal_gang_rollbacks_total{{{JOB}}}[$__rate_interval]))", "gang rollbacks"),
                (
                    "sum by (from_state, to_state) "
                    f"(increase(tidal_fleet_transitions_refused_total{{{JOB}}}[$__rate_interval]))",
                    "refused {{from_state}} -> {{to_state}}",
                ),
            ],
            bars=True,
        ),
        row("Controller"),
        panel(
            "Reconcile latency",
            "How long one reconcile takes (observe the cluster and the cloud, plan, act).",
            quantiles("tidal_reconcile_duration_seconds", JOB),
            unit="s",
            width=8,
        ),
        panel(
            "Reconciles by outcome",
            "Reconciles per second; any error is logged with its cause.",
            [(f"sum by (outcome) (rate(tidal_reconcile_total{{{JOB}}}[$__rate_interval]))", "{{outcome}}")],
            unit="ops",
            width=8,
        ),
        panel(
            "Since the last successful reconcile",
            "Seconds since each replica's last successful reconcile (alert above 300).",
            [(f"time() - tidal_last_successful_reconcile_timestamp_seconds{{{JOB}}}", "{{instance}}")],
            kind="stat",
            unit="s",
            width=8,
            thresholds=[(None, "green"), (60, "orange"), (300, "red")],
        ),
        panel(
            "Leader",
            "1 for the replica that holds the Lease and acts; the others wait.",
            [(f"tidal_leader{{{JOB}}}", "{{instance}}")],
            width=8,
        ),
        panel(
            "Configuration reloads",
            "Reloads of the mounted ConfigMap; an invalid one keeps the last good configuration.",
            [
                (
                    f"sum by (outcome) (increase(tidal_config_reloads_total{{{JOB}}}[$__rate_interval]))",
                    "{{outcome}}",
                ),
                (f"min(tidal_config_last_reload_success{{{JOB}}})", "last reload valid"),
            ],
            width=16,
        ),
    ]


def layout(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Give every panel an id and a grid position, filling rows left to right."""
    x = y = row_height = 0
    for number, item in enumerate(items, start=1):
        grid = item["gridPos"]
        if item["type"] == "row" or x + grid["w"] > WIDTH:
            x, y, row_height = 0, y + row_height, 0
        grid.update({"x": x, "y": y})
        item["id"] = number
        x += grid["w"]
        row_height = max(row_height, grid["h"])
        if item["type"] == "row":
            x, y, row_height = 0, y + grid["h"], 0
    return items


def dashboard() -> dict[str, Any]:
    return {
        "title": "tidal",
        "uid": "tidal-overview",
        "description": "tidal autoscaler: capacity vs limits, pending demand, launches, cost and controller health.",
        "tags": ["tidal", "autoscaler", "kubernetes"],
        "editable": True,
        "graphTooltip": 1,
        "refresh": "30s",
        "schemaVersion": 39,
        "version": 1,
        "time": {"from": "now-6h", "to": "now"},
        "timepicker": {},
        "timezone": "browser",
        "annotations": {"list": []},
        "links": [],
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Data source",
                    "type": "datasource",
                    "query": "prometheus",
                    "refresh": 1,
                    "hide": 0,
                },
                {
                    "name": "job",
                    "label": "Job",
                    "type": "query",
                    "datasource": {"type": "prometheus", "uid": "${datasource}"},
                    "definition": "label_values(tidal_leader, job)",
                    "query": {"query": "label_values(tidal_leader, job)", "refId": "job"},
                    "refresh": 2,
                    "sort": 1,
                    "hide": 0,
                    "includeAll": False,
                    "multi": False,
                },
            ]
        },
        "panels": layout(panels()),
    }


def render() -> str:
    """The dashboard file's exact content."""
    return json.dumps(dashboard(), indent=2) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the file is out of date")
    args = parser.parse_args(argv)
    text = render()
    return write_or_check(
        OUTPUT, text, check=args.check, shown_as=str(OUTPUT), regenerate="python scripts/gen_dashboard.py"
    )


if __name__ == "__main__":
    sys.exit(main())
