"""One way to layer configuration: every subcommand reads repeated --config files laid over each other, later
files winning, says which files it read, and names an option set in two of them."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import yaml

from autoscaler.cli.main import main
from autoscaler.config.layers import load_layers, read_layers
from autoscaler.config.options import ConfigError
from tests.builders import INSUFFICIENT_CPU, INSUFFICIENT_GPU, pod

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

REPO = Path(__file__).resolve().parents[2]
CATALOG = REPO / "config" / "catalogs" / "aws-us-east-1.csv"
CLOUD = {"cloud": "aws", "region": "us-east-1", "zones": ["us-east-1a"]}


@pytest.fixture
def write(tmp_path: Path) -> Callable[[str, Any], str]:
    def write(name: str, content: Any) -> str:
        path = tmp_path / name
        path.write_text(content if isinstance(content, str) else yaml.safe_dump(content))
        return str(path)

    return write


# --- the layering itself --------------------------------------------------------------------------------


def test_a_later_file_replaces_an_option_and_merges_a_section_option_by_option(
    write: Callable[[str, Any], str],
) -> None:
    base = write("config.yaml", {**CLOUD, "clusterGPULimit": 8, "scaleDown": {"maxParallelDrains": 2}})
    over = write("over.yaml", {"clusterGPULimit": 24, "scaleDown": {"nodeUnneededDuration": "1m"}})
    config, layers = load_layers([base, over])
    assert (config.region, config.cluster_gpu_limit) == ("us-east-1", 24)
    assert (config.scale_down.max_parallel_drains, config.scale_down.node_unneeded_duration) == (2, 60.0)
    assert layers.files == (base, over)


def test_an_option_set_in_two_files_is_named_with_both_files_once(write: Callable[[str, Any], str]) -> None:
    base = write("config.yaml", {**CLOUD, "clusterGPULimit": 8, "scaleDown": {"maxParallelDrains": 2}})
    over = write("kai.yaml", {"clusterGPULimit": 16, "scaleDown": {"maxParallelDrains": 3, "enabled": True}})
    described = [o.describe() for o in read_layers([base, over]).overrides]
    assert described == [
        f"clusterGPULimit is set in {base} and again in {over}; the value in {over} is used",
        f"scaleDown.maxParallelDrains is set in {base} and again in {over}; the value in {over} is used",
    ]


def test_an_option_repeated_with_the_same_value_is_named_as_such(write: Callable[[str, Any], str]) -> None:
    base = write("config.yaml", {**CLOUD, "capacityTypes": ["spot"]})
    over = write("kai.yaml", {"capacityTypes": ["spot"]})
    (override,) = read_layers([base, over]).overrides
    assert override.same_value and "to the same value" in override.describe()


def test_files_that_set_different_options_override_nothing(write: Callable[[str, Any], str]) -> None:
    base = write("config.yaml", {**CLOUD, "clusterGPULimit": 8})
    preset = str(REPO / "config" / "examples" / "kai.yaml")
    assert read_layers([base, preset]).overrides == ()


def test_a_file_given_twice_is_an_error(write: Callable[[str, Any], str]) -> None:
    base = write("config.yaml", CLOUD)
    with pytest.raises(ConfigError, match=r"config\.yaml is given twice"):
        read_layers([base, base])


# --- every subcommand -----------------------------------------------------------------------------------


def test_plan_reads_every_config_file_and_says_which(
    write: Callable[[str, Any], str], capsys: pytest.CaptureFixture[str]
) -> None:
    # The GPU limit is only in the first file, spot only in the second: the plan must honour both.
    snapshot = write(
        "snap.yaml",
        {
            "apiVersion": "v1",
            "kind": "List",
            "items": [
                pod("infer-1", gpu=1, cpu="2", memory="8Gi", message=INSUFFICIENT_GPU),
                pod("web-1", cpu="500m", memory="1Gi", message=INSUFFICIENT_CPU),
            ],
        },
    )
    base = write("config.yaml", {**CLOUD, "clusterGPULimit": 0})
    over = write("spot.yaml", {"capacityTypes": ["spot"]})
    argv = ["plan", "--snapshot", snapshot, "--catalog", str(CATALOG), "--output", "json"]
    assert main([*argv, "--config", base, "--config", over, "--now", "2026-11-20T10:00:00Z"]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert [u["pod"] for u in doc["unplaced"]] == ["default/infer-1"]
    assert [(la["capacityType"], la["pods"]) for la in doc["launches"]] == [("spot", ["default/web-1"])]
    assert f"tidal: configuration: {base}, then {over} (later files win)" in err


def test_plan_names_an_option_set_in_two_files_on_stderr_and_in_the_json(
    write: Callable[[str, Any], str], capsys: pytest.CaptureFixture[str]
) -> None:
    snapshot = write("snap.yaml", {"apiVersion": "v1", "kind": "List", "items": [pod("web-1")]})
    base = write("config.yaml", {**CLOUD, "clusterGPULimit": 16})
    over = write("kai.yaml", {"clusterGPULimit": 8})
    argv = ["plan", "--snapshot", snapshot, "--catalog", str(CATALOG), "--output", "json"]
    assert main([*argv, "--config", base, "--config", over]) == 0
    out, err = capsys.readouterr()
    line = f"clusterGPULimit is set in {base} and again in {over}; the value in {over} is used"
    assert err.count(line) == 1 and err.count("tidal: warning:") == 1
    assert json.loads(out)["warnings"] == [line]


def test_plan_lays_a_later_catalog_over_an_earlier_one_by_instance_type(
    write: Callable[[str, Any], str], capsys: pytest.CaptureFixture[str]
) -> None:
    snapshot = write(
        "snap.yaml",
        {"apiVersion": "v1", "kind": "List", "items": [pod("infer-1", gpu=1, cpu="2", memory="8Gi")]},
    )
    # A negotiated price for one type: every offering of g4dn.xlarge comes from this file only.
    header = CATALOG.read_text(encoding="utf-8").splitlines()[0]
    row = next(
        r for r in CATALOG.read_text(encoding="utf-8").splitlines() if r.split(",")[2] == "g4dn.xlarge"
    )
    fields = row.split(",")
    fields[11], fields[12] = "0.1000", ""  # on-demand only, cheaper
    cheaper = write("negotiated.csv", header + "\n" + ",".join(fields) + "\n")
    config = write("config.yaml", CLOUD)
    argv = ["plan", "--snapshot", snapshot, "--config", config, "--output", "json"]
    assert main([*argv, "--catalog", str(CATALOG), "--catalog", cheaper]) == 0
    out, err = capsys.readouterr()
    (launch,) = json.loads(out)["launches"]
    assert (launch["instanceType"], launch["pricePerHour"]) == ("g4dn.xlarge", 0.1)
    assert "later files win per instance type" in err


def test_simulate_reads_every_config_file_and_says_which(
    write: Callable[[str, Any], str], capsys: pytest.CaptureFixture[str]
) -> None:
    # At most 4 GPUs (first file) and no scale-down (second file): the day must show both.
    limit = write("limit.yaml", {"clusterGPULimit": 4})
    keep = write("keep.yaml", {"scaleDown": {"enabled": False}})
    argv = ["simulate", "--scenario", "kai-day", "--no-bound", "--config", limit, "--config", keep]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    gpus_up = [int(n) for n in re.findall(r"\[GPUs (\d+) up", out)]
    assert gpus_up and max(gpus_up) == 4
    assert not [line for line in out.splitlines() if re.search(r"\d\d:\d\d  remove ", line)]
    assert f"tidal: configuration: {limit}, then {keep} (later files win) over scenario kai-day's" in err


def test_simulate_refuses_a_second_catalog(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "--scenario", "kai-day", "--catalog", str(CATALOG), "--catalog", str(CATALOG)]
    assert main(argv) == 2
    assert "--catalog is given more than once" in capsys.readouterr().err


def test_catalog_reads_every_config_file(
    write: Callable[[str, Any], str], capsys: pytest.CaptureFixture[str]
) -> None:
    cloud = write(
        "config.yaml", {"cloud": "simulated", "region": "us-east-1", "simulated": {"catalog": str(CATALOG)}}
    )
    zones = write("zones.yaml", {"zones": ["us-east-1b"], "simulated": {"catalogCloud": "aws"}})
    assert main(["catalog", "--config", cloud, "--config", zones, "--output", "json"]) == 0
    offerings = json.loads(capsys.readouterr().out)
    assert offerings and {o["zone"] for o in offerings} == {"us-east-1b"}
