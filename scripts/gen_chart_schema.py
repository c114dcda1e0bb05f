#!/usr/bin/env python3
"""Write charts/tidal/values.schema.json, the JSON Schema helm checks the chart's values against.

    python scripts/gen_chart_schema.py           # rewrite the file
    python scripts/gen_chart_schema.py --check   # exit 1 when the file is not what this script writes

Its ``config`` value is tidal's configuration document, so that part is ``tidal config schema`` (built from
autoscaler/config/models.py and the providers' sections): a misspelt option or a wrong type fails
``helm install`` with the option's path, before anything reaches the cluster. The rest describes the chart's
own values (charts/tidal/values.yaml), written here.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from autoscaler.config.generated import write_or_check
from autoscaler.config.reference import SCHEMA_DIALECT, json_schema

__all__ = ["OUTPUT", "main", "render", "values_schema"]

REPO = Path(__file__).resolve().parents[1]
OUTPUT = REPO / "charts" / "tidal" / "values.schema.json"

STRING = {"type": "string"}
BOOLEAN = {"type": "boolean"}
STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
ANY_LIST = {"type": "array"}
ANY_MAP = {"type": "object"}


def _object(properties: dict[str, Any], description: str = "") -> dict[str, Any]:
    node: dict[str, Any] = {"type": "object", "additionalProperties": False, "properties": properties}
    if description:
        node["description"] = description
    return node


def _described(node: dict[str, Any], description: str) -> dict[str, Any]:
    return {**node, "description": description}


def _identity() -> dict[str, Any]:
    """Each cloud's identity, with the shape its annotation takes (empty means none)."""
    return _object(
        {
            "aws": _object(
                {
                    "roleArn": {
                        "type": "string",
                        "pattern": r"^(arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]+)?$",
                        "description": "IRSA: the IAM role (annotation eks.amazonaws.com/role-arn); empty "
                        "for EKS Pod Identity or none.",
                    },
                    "stsRegionalEndpoints": _described(
                        BOOLEAN, "Annotate eks.amazonaws.com/sts-regional-endpoints: true with the role."
                    ),
                }
            ),
            "gcp": _object(
                {
                    "serviceAccount": {
                        "type": "string",
                        "pattern": r"^([a-z][-a-z0-9]{4,28}[a-z0-9]@[-a-z0-9.]+\.iam\.gserviceaccount\.com)?$",
                        "description": "GKE Workload Identity: the Google service account "
                        "(annotation iam.gke.io/gcp-service-account).",
                    }
                }
            ),
            "azure": _object(
                {
                    "clientId": {
                        "type": "string",
                        "pattern": r"^([0-9a-fA-F]{8}-([0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12})?$",
                        "description": "AKS Workload Identity: the managed identity's client ID (annotation "
                        "azure.workload.identity/client-id, pod label azure.workload.identity/use).",
                    }
                }
            ),
        },
        "The cloud identity of the service account; set only the one of config.cloud.",
    )


def _monitoring() -> dict[str, Any]:
    def toggle(extra: dict[str, Any]) -> dict[str, Any]:
        return _object({"enabled": BOOLEAN, "labels": STRING_MAP, **extra})

    return _object(
        {
            "serviceMonitor": toggle({"interval": _described(STRING, "How often Prometheus scrapes.")}),
            "prometheusRule": toggle({}),
            "dashboard": toggle({}),
        },
        "ServiceMonitor, PrometheusRule alerts and Grafana dashboard, for the Prometheus Operator.",
    )


def values_schema() -> dict[str, Any]:
    """The schema of the chart's values, tidal's configuration schema under ``config``."""
    config = json_schema()
    definitions = config.pop("$defs")
    config.pop("$schema")
    config.pop("title")
    config["description"] = (
        "tidal's configuration: the config.yaml of the tidal-config ConfigMap (docs/configuration.md)."
    )
    properties: dict[str, Any] = {
        # helm passes it to every chart, subchart or not.
        "global": ANY_MAP,
        "image": _object(
            {
                "repository": _described(STRING, "Required: the repository of the tidal image."),
                "tag": _described(STRING, "Empty: <appVersion>-<config.cloud>."),
                "pullPolicy": {"enum": ["Always", "IfNotPresent", "Never"]},
            }
        ),
        "imagePullSecrets": ANY_LIST,
        "replicaCount": {
            "type": "integer",
            "minimum": 1,
            "description": "Replicas; more than one elect a leader (config.leaderElection).",
        },
        "config": config,
        "kaiPreset": _described(BOOLEAN, "Lay config/examples/kai.yaml over config (docs/kai.md)."),
        "extraArgs": {"type": "array", "items": STRING},
        "serviceAccount": _object({"name": STRING, "annotations": STRING_MAP}),
        "identity": _identity(),
        "priorityClass": _object(
            {"name": {"type": "string", "minLength": 1}, "create": BOOLEAN, "value": {"type": "integer"}}
        ),
        "podDisruptionBudget": _object(
            {"enabled": BOOLEAN, "maxUnavailable": {"type": ["integer", "string"]}}
        ),
        "topologySpread": _object(
            {"enabled": BOOLEAN, "whenUnsatisfiable": {"enum": ["ScheduleAnyway", "DoNotSchedule"]}}
        ),
        "resources": ANY_MAP,
        "podLabels": STRING_MAP,
        "podAnnotations": STRING_MAP,
        "nodeSelector": STRING_MAP,
        "tolerations": ANY_LIST,
        "service": _object({"port": {"type": "integer", "minimum": 1, "maximum": 65535}}),
        "crds": _object(
            {
                "provisioningRequest": _object({"install": BOOLEAN}),
                "capacityBuffer": _object({"install": BOOLEAN}),
                "keep": _described(BOOLEAN, "Leave the CRDs in place on helm uninstall."),
            },
            "The CRDs tidal serves; install=false where another component installs them.",
        ),
        "monitoring": _monitoring(),
    }
    return {
        "$schema": SCHEMA_DIALECT,
        "title": "tidal chart values",
        "description": "Values of the tidal Helm chart (charts/tidal/values.yaml).",
        "type": "object",
        "additionalProperties": False,
        "properties": properties,
        # The configuration's definitions, where its "#/$defs/..." references find them.
        "$defs": definitions,
    }


def render() -> str:
    """The file's text: the schema, indented, with a final newline."""
    return json.dumps(values_schema(), indent=2) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the file is out of date")
    args = parser.parse_args(argv)
    text = render()
    return write_or_check(
        OUTPUT,
        text,
        check=args.check,
        shown_as=f"{OUTPUT.relative_to(REPO)}",
        regenerate="python scripts/gen_chart_schema.py",
    )


if __name__ == "__main__":
    sys.exit(main())
