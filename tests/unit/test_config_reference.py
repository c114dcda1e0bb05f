"""The configuration describes itself: `tidal config schema` is the JSON Schema that deploy/ ships for editors,
`tidal config docs` is docs/configuration.md, and both come from the models, so neither can go stale."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoscaler.cli import main as cli
from autoscaler.config.fields import keys_of
from autoscaler.config.models import SECTION_MODELS, ConfigDocument
from autoscaler.config.reference import json_schema

REPO = Path(__file__).resolve().parents[2]
SHIPPED_SCHEMA = REPO / "deploy" / "config.schema.json"
REFERENCE = REPO / "docs" / "configuration.md"
CONFIG_FILES = [
    REPO / "config" / "default.yaml",
    REPO / "config" / "examples" / "demo.yaml",
    REPO / "config" / "examples" / "kai.yaml",
    REPO / "charts" / "tidal" / "files" / "kai.yaml",
]
# The chart's example values: their config sections are configuration documents too.
CHART_EXAMPLES = sorted((REPO / "charts" / "tidal" / "examples").glob("*.yaml"))


def printed(capsys: pytest.CaptureFixture[str], what: str) -> str:
    assert cli.main(["config", what]) == 0
    return capsys.readouterr().out


def validator() -> Any:
    jsonschema = pytest.importorskip("jsonschema")
    return jsonschema.Draft202012Validator(json_schema())


def test_the_shipped_schema_is_what_tidal_config_schema_prints(capsys: pytest.CaptureFixture[str]) -> None:
    assert SHIPPED_SCHEMA.read_text(encoding="utf-8") == printed(capsys, "schema"), (
        "run: tidal config schema > deploy/config.schema.json"
    )


def test_the_reference_is_what_tidal_config_docs_prints(capsys: pytest.CaptureFixture[str]) -> None:
    assert REFERENCE.read_text(encoding="utf-8") == printed(capsys, "docs"), (
        "run: tidal config docs > docs/configuration.md"
    )


def test_the_schema_is_a_valid_2020_12_json_schema() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.Draft202012Validator.check_schema(json.loads(SHIPPED_SCHEMA.read_text(encoding="utf-8")))


def test_every_option_in_the_schema_has_a_description_and_a_default() -> None:
    schema = json_schema()
    undocumented = []
    for key in keys_of(ConfigDocument):
        node = schema["properties"][key]
        if "description" not in node or ("default" not in node and key not in SECTION_MODELS):
            undocumented.append(key)
        if key in SECTION_MODELS:
            section = schema["$defs"][SECTION_MODELS[key].__name__]["properties"]
            undocumented += [
                f"{key}.{k}" for k, v in section.items() if not {"description", "default"} <= set(v)
            ]
    assert undocumented == []


def test_the_schema_names_every_provider_section() -> None:
    properties = json_schema()["properties"]
    assert {"simulated", "aws", "gcp", "azure"} <= set(properties)
    assert properties["aws"]["description"].startswith("AWS (checked by the provider")


@pytest.mark.parametrize("path", CONFIG_FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_the_shipped_configurations_satisfy_the_schema(path: Path) -> None:
    document = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    assert [error.message for error in validator().iter_errors(document)] == []


@pytest.mark.parametrize("path", CHART_EXAMPLES, ids=lambda p: p.stem)
def test_the_chart_examples_configurations_satisfy_the_schema(path: Path) -> None:
    document = yaml.safe_load(path.read_text(encoding="utf-8"))["config"]
    assert [error.message for error in validator().iter_errors(document)] == []


@pytest.mark.parametrize(
    "document",
    [
        {"clusterGpuLimit": 8},
        {"scaleDown": {"nodeUneededDuration": "10m"}},
        {"capacityTypes": ["preemptible"]},
        {"maxPodsPerNode": 0},
        {"gpuNodeTaint": "yes"},
    ],
    ids=["misspelt-key", "misspelt-nested-key", "unknown-choice", "below-minimum", "wrong-type"],
)
def test_an_editor_using_the_schema_flags_what_tidal_would_refuse(document: dict[str, Any]) -> None:
    assert list(validator().iter_errors(document))


PROVIDER_SECTIONS: dict[str, dict[str, Any]] = {
    "aws": {
        "subnetIds": ["subnet-0123456789abcdef0"],
        "launchTemplate": {"name": "tidal-gpu-nodes"},
        "spotAllocationStrategy": "price-capacity-optimized",
        "priceRefreshInterval": "1h",
    },
    "gcp": {"project": "ml-platform-prod", "nodePool": {"name": "gpu-pool"}, "gpuDriverVersion": "latest"},
    "azure": {
        "subscriptionId": "00000000-0000-0000-0000-000000000000",
        "resourceGroup": "MC_ml_prod_eastus",
        "scaleSets": {"Standard_NC24ads_A100_v4": "aks-gpu-vmss"},
        "operationWait": "2s",
    },
    "simulated": {"catalog": "config/catalogs/aws-us-east-1.csv", "quotaGPUs": 16, "registerNodes": False},
}


@pytest.mark.parametrize("cloud", sorted(PROVIDER_SECTIONS))
def test_a_providers_section_as_its_provider_takes_it_satisfies_the_schema(cloud: str) -> None:
    assert [e.message for e in validator().iter_errors({cloud: PROVIDER_SECTIONS[cloud]})] == []


@pytest.mark.parametrize("cloud", sorted(PROVIDER_SECTIONS))
def test_an_editor_flags_a_misspelt_key_in_a_providers_section(cloud: str) -> None:
    assert list(validator().iter_errors({cloud: {**PROVIDER_SECTIONS[cloud], "priceRefreshIntervall": "1h"}}))


MANAGED_TEMPLATE = {
    "instanceProfile": "eks-gpu-nodes",
    "blockDevices": [{"deviceName": "/dev/xvda", "volumeSize": 200, "volumeType": "gp3"}],
}


def test_an_aws_managed_launch_template_as_the_provider_takes_it_satisfies_the_schema() -> None:
    section = {"subnetIds": ["subnet-0123456789abcdef0"], "managedLaunchTemplate": MANAGED_TEMPLATE}
    assert [e.message for e in validator().iter_errors({"aws": section})] == []


@pytest.mark.parametrize(
    "template",
    [
        {"launchTemplate": {"name": "eks-gpu-nodes", "verison": 3}},
        {"launchTemplate": None},
        {"managedLaunchTemplate": {**MANAGED_TEMPLATE, "amiFamly": "AL2023"}},
        {
            "managedLaunchTemplate": {
                **MANAGED_TEMPLATE,
                "blockDevices": [{"deviceName": "/dev/xvda", "size": 9}],
            }
        },
        {
            "managedLaunchTemplate": {
                **MANAGED_TEMPLATE,
                "blockDevices": [{"volumeSize": 9, "volumeType": "st1"}],
            }
        },
    ],
)
def test_an_editor_flags_a_mistake_inside_an_aws_launch_template(template: dict[str, Any]) -> None:
    assert list(validator().iter_errors({"aws": {"subnetIds": ["subnet-0123456789abcdef0"], **template}}))


@pytest.mark.parametrize(
    "entries",
    [
        {"capacityFailures": [{"instanceType": "g5.xlarge", "capacityTyp": "spot"}]},
        {"capacityFailures": [{"capacityType": "cheap"}]},
        {"reservations": [{"id": "r1", "instanceType": "g5.xlarge", "zone": "us-east-1a", "count": 0}]},
        {"reservations": [{"id": "r1", "instanceType": "g5.xlarge", "zone": "us-east-1a", "cuont": 2}]},
    ],
)
def test_an_editor_flags_a_mistake_in_an_entry_of_a_simulated_list(entries: dict[str, Any]) -> None:
    assert list(validator().iter_errors({"simulated": {**PROVIDER_SECTIONS["simulated"], **entries}}))
