"""`tidal plan`: the offline dry run, its outputs, and one-line errors for bad input."""

from __future__ import annotations

import gc
import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import yaml

from autoscaler.cli import snapshot
from autoscaler.cli.main import main
from tests.builders import INSUFFICIENT_GPU, node, pod

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

REPO = Path(__file__).resolve().parents[2]

CATALOG_HEADER = (
    "cloud,region,instance_type,vcpu,memory_mib,gpu_count,gpu_fraction,gpu_vendor,gpu_model,gpu_memory_mib,arch,"
    "on_demand_usd_per_hour,spot_usd_per_hour,zone\n"
)
CATALOG = CATALOG_HEADER + (
    "aws,us-east-1,m6i.2xlarge,8,32768,0,0,,,,x86_64,0.384,0.169,\n"
    "aws,us-east-1,g4dn.xlarge,4,16384,1,1,NVIDIA,T4,16384,x86_64,0.526,0.2104,\n"
    "aws,us-east-1,g5.xlarge,4,16384,1,1,NVIDIA,A10G,24576,x86_64,1.006,0.4527,\n"
    "gcp,us-central1,g2-standard-4,4,16384,1,1,NVIDIA,L4,24576,x86_64,0.7068,0.2827,\n"
)


@pytest.fixture
def files(tmp_path: Path) -> tuple[Callable[[str, Any], str], str, str]:
    def write(name: str, content: Any) -> str:
        path = tmp_path / name
        path.write_text(content if isinstance(content, str) else yaml.safe_dump(content))
        return str(path)

    catalog = write("catalog.csv", CATALOG)
    config = write("config.yaml", {"cloud": "aws", "region": "us-east-1", "zones": ["us-east-1a"]})
    return write, catalog, config


def run_plan(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["plan", *args])
    out, err = capsys.readouterr()
    return code, out, err


def only_what_was_read(config: str, catalog: str) -> str:
    """stderr of a plan with nothing to warn about: the one line naming the files it read."""
    return f"tidal: configuration: {config}; catalog: {catalog}, rows of aws us-east-1\n"


def items(*objs: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "List", "items": list(objs)}


def test_json_output_has_the_documented_shape(
    files: tuple[Callable[[str, Any], str], str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    write, catalog, config = files
    snap = write(
        "snap.yaml",
        items(
            pod("infer-1", gpu=1, cpu="2", memory="8Gi", message=INSUFFICIENT_GPU),
            pod("web-1", gates=["wait"]),
        ),
    )
    code, out, err = run_plan(
        capsys,
        "--snapshot",
        snap,
        "--catalog",
        catalog,
        "--config",
        config,
        "--output",
        "json",
        "--now",
        "2026-11-20T10:00:00Z",
    )
    assert (code, err) == (0, only_what_was_read(config, catalog))
    doc = json.loads(out)
    assert {"launches", "unplaced", "ignored", "removals", "blocked", "costPerHour", "gpuTotalAfter"} <= set(
        doc
    )
    launch = doc["launches"][0]
    assert (
        launch["instanceType"],
        launch["zone"],
        launch["capacityType"],
        launch["pricePerHour"],
        launch["gpus"],
        launch["pods"],
    ) == ("g4dn.xlarge", "us-east-1a", "on-demand", 0.526, 1, ["default/infer-1"])
    assert doc["ignored"][0]["pod"] == "default/web-1"
    assert doc["costPerHour"] == 0.526
    assert doc["gpuTotalAfter"] == 1


def test_the_table_shows_launches_with_prices_then_why_pods_wait(
    files: tuple[Callable[[str, Any], str], str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    write, catalog, config = files
    snap = write(
        "snap.yaml", items(pod("infer-1", gpu=1, cpu="2", memory="8Gi"), pod("web-1", gates=["wait"]))
    )
    code, out, _ = run_plan(capsys, "--snapshot", snap, "--catalog", catalog, "--config", config)
    assert code == 0
    assert out.index("g4dn.xlarge") < out.index("Pending, but no new node is needed:")
    assert "0.5260" in out
    assert "scheduling gates wait" in out


def test_several_snapshots_and_json_files_combine(
    files: tuple[Callable[[str, Any], str], str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    write, catalog, config = files
    nodes = write("nodes.json", json.dumps(items(node("cpu-a"))))
    pods = write("pods.yaml", items(pod("web-1")))
    code, out, _ = run_plan(
        capsys,
        "--snapshot",
        nodes,
        "--snapshot",
        pods,
        "--catalog",
        catalog,
        "--config",
        config,
        "--output",
        "json",
    )
    assert code == 0
    assert json.loads(out)["ignored"][0]["reason"] == "fits free capacity on node cpu-a"


def test_unknown_kinds_are_skipped_and_counted(
    files: tuple[Callable[[str, Any], str], str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    write, catalog, config = files
    snap = write(
        "snap.yaml",
        items({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"}}, pod("web-1")),
    )
    code, out, _ = run_plan(
        capsys, "--snapshot", snap, "--catalog", catalog, "--config", config, "--output", "json"
    )
    assert code == 0
    assert json.loads(out)["skippedObjects"] == {"Service": 1}


def _error(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    code, out, err = run_plan(capsys, *args)
    assert code == 2
    assert out == ""
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    return err.strip()


def test_malformed_yaml_names_the_file_line_and_column(
    files: tuple[Callable[[str, Any], str], str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    write, catalog, config = files
    snap = write("snap.yaml", "apiVersion: v1\nkind: List\nitems:\n  - kind: Pod\n   metadata: {name: x}\n")
    err = _error(capsys, "--snapshot", snap, "--catalog", catalog, "--config", config)
    assert "snap.yaml:5:" in err and "invalid YAML" in err


def test_an_object_without_a_name_is_an_error(
    files: tuple[Callable[[str, Any], str], str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    write, catalog, config = files
    snap = write("snap.yaml", items({"apiVersion": "v1", "kind": "Pod", "metadata": {}}))
    err = _error(capsys, "--snapshot", snap, "--catalog", catalog, "--config", config)
    assert err.endswith("items[0]: Pod has no metadata.name")


def test_an_absurd_cpu_request_is_an_error_naming_the_pod_and_field(
    files: tuple[Callable[[str, Any], str], str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    write, catalog, config = files
    snap = write("snap.yaml", items(pod("web-1", cpu="1e30")))
    err = _error(capsys, "--snapshot", snap, "--catalog", catalog, "--config", config)
    assert "Pod default/web-1: spec.containers[0].resources.requests.cpu: '1e30' is out of range" in err


def test_a_negative_quantity_is_an_error(
    files: tuple[Callable[[str, Any], str], str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    write, catalog, config = files
    snap = write("snap.yaml", items(pod("web-1", memory="-1Gi")))
    err = _error(capsys, "--snapshot", snap, "--catalog", catalog, "--config", config)
    assert "'-1Gi' is negative" in err


def test_a_document_that_is_not_an_object_is_an_error(
    files: tuple[Callable[[str, Any], str], str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    write, catalog, config = files
    snap = write("snap.yaml", "- just\n- a list\n")
    err = _error(capsys, "--snapshot", snap, "--catalog", catalog, "--config", config)
    assert "expected a Kubernetes object" in err


def test_an_invalid_regexp_in_config_is_an_error_naming_the_key(
    files: tuple[Callable[[str, Any], str], str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    write, catalog, _ = files
    config = write(
        "bad.yaml", {"cloud": "aws", "region": "us-east-1", "pendingPodReasonRegexp": "(Insufficient"}
    )
    snap = write("snap.yaml", items(pod("web-1")))
    err = _error(capsys, "--snapshot", snap, "--catalog", catalog, "--config", config)
    assert "pendingPodReasonRegexp" in err


def test_a_missing_snapshot_file_is_an_error(
    files: tuple[Callable[[str, Any], str], str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    _, catalog, config = files
    err = _error(capsys, "--snapshot", "/nonexistent/snap.yaml", "--catalog", catalog, "--config", config)
    assert "/nonexistent/snap.yaml" in err


def test_a_catalog_without_rows_for_the_region_is_an_error(
    files: tuple[Callable[[str, Any], str], str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    write, _, config = files
    catalog = write(
        "other.csv", CATALOG_HEADER + "gcp,us-central1,n2-standard-4,4,16384,0,0,,,,x86_64,0.19,,\n"
    )
    snap = write("snap.yaml", items(pod("web-1")))
    err = _error(capsys, "--snapshot", snap, "--catalog", catalog, "--config", config)
    assert "no rows for cloud 'aws' region 'us-east-1'" in err


def test_a_catalog_with_a_bad_number_names_line_and_column(
    files: tuple[Callable[[str, Any], str], str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    write, _, config = files
    catalog = write("bad.csv", CATALOG_HEADER + "aws,us-east-1,m6i.large,two,8192,0,0,,,,x86_64,0.096,,\n")
    snap = write("snap.yaml", items(pod("web-1")))
    err = _error(capsys, "--snapshot", snap, "--catalog", catalog, "--config", config)
    assert err.endswith("bad.csv:2: vcpu: 'two' is not a number")


def test_a_bad_now_is_an_error(
    files: tuple[Callable[[str, Any], str], str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    write, catalog, config = files
    snap = write("snap.yaml", items(pod("web-1")))
    err = _error(capsys, "--snapshot", snap, "--catalog", catalog, "--config", config, "--now", "yesterday")
    assert "--now: 'yesterday' is not an RFC 3339 time" in err


def test_a_missing_required_argument_is_a_one_line_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["plan", "--catalog", "x.csv"])
    _, err = capsys.readouterr()
    assert code == 2
    assert "the following arguments are required: --snapshot" in err


def test_an_object_in_two_snapshot_files_counts_once_and_the_later_copy_wins(
    files: tuple[Callable[[str, Any], str], str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    write, catalog, config = files
    earlier = write("pods-0900.yaml", items(pod("infer-1", gpu=1, cpu="2", memory="8Gi"), pod("web-1")))
    # A minute later the scheduler has bound web-1; infer-1 still waits.
    later = write(
        "pods-0901.yaml",
        items(pod("infer-1", gpu=1, cpu="2", memory="8Gi"), pod("web-1", node_name="cpu-a", phase="Running")),
    )
    args = ["--snapshot", earlier, "--snapshot", later, "--catalog", catalog, "--config", config]
    code, out, _ = run_plan(capsys, *args, "--output", "json")
    doc = json.loads(out)
    assert code == 0
    assert [la["pods"] for la in doc["launches"]] == [["default/infer-1"]]
    assert doc["ignored"] == [] and doc["unplaced"] == []
    assert doc["duplicateObjects"] == {"Pod": 2}

    code, out, _ = run_plan(capsys, *args)
    assert out.rstrip().endswith("(2 objects given more than once, the later copy used: 2 Pod)")


def test_an_empty_snapshot_is_a_cluster_with_nothing_to_do(
    files: tuple[Callable[[str, Any], str], str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    write, catalog, config = files
    empty = write("empty.yaml", "")
    code, out, err = run_plan(capsys, "--snapshot", empty, "--catalog", catalog, "--config", config)
    assert (code, err) == (0, only_what_was_read(config, catalog))
    assert out.startswith("0 pods need capacity, 0 need no new node, 0 cannot be placed")
    assert "(the snapshot has no objects" in out


def test_now_without_a_time_zone_asks_for_an_offset(
    files: tuple[Callable[[str, Any], str], str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    write, catalog, config = files
    snap = write("snap.yaml", items(pod("web-1")))
    err = _error(
        capsys, "--snapshot", snap, "--catalog", catalog, "--config", config, "--now", "2026-11-20T10:00:00"
    )
    assert "--now: '2026-11-20T10:00:00' has no time zone; give an RFC 3339 time with Z or an offset" in err


def test_a_bug_is_not_reported_as_bad_input(monkeypatch: pytest.MonkeyPatch) -> None:
    import autoscaler.cli.main as cli

    def broken(args: Any) -> int:
        raise ValueError("internal invariant broken")

    monkeypatch.setitem(cli.COMMANDS, "plan", broken)
    with pytest.raises(ValueError, match="internal invariant broken"):
        main(["plan", "--snapshot", "s.yaml", "--catalog", "c.csv"])


def test_a_catalog_saved_by_a_spreadsheet_with_a_byte_order_mark_loads(
    files: tuple[Callable[[str, Any], str], str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    write, _, config = files
    catalog = write("excel.csv", "\ufeff" + CATALOG)
    snap = write("snap.yaml", items(pod("infer-1", gpu=1, cpu="2", memory="8Gi")))
    code, out, _ = run_plan(
        capsys, "--snapshot", snap, "--catalog", catalog, "--config", config, "--output", "json"
    )
    assert code == 0
    assert json.loads(out)["launches"][0]["instanceType"] == "g4dn.xlarge"


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("aws,us-east-1,m6i.large,2,8192,0\n", "bad.csv:3: 6 fields, but the header has 14 columns"),
        (
            "aws,us-east-1,m6i.large,2,8192,0,0,,,,x86_64,,,\n",
            "bad.csv:3: m6i.large has neither on_demand_usd_per_hour nor spot_usd_per_hour",
        ),
        (
            "aws,us-east-1,m6i.2xlarge,8,32768,0,0,,,,x86_64,0.40,0.17,\n",
            "bad.csv:3: m6i.2xlarge in zone us-east-1a is already on line 2",
        ),
    ],
    ids=["short-row", "no-prices", "duplicate"],
)
def test_a_bad_catalog_row_of_the_configured_region_is_reported_with_its_line(
    files: tuple[Callable[[str, Any], str], str, str],
    capsys: pytest.CaptureFixture[str],
    row: str,
    message: str,
) -> None:
    write, _, config = files
    catalog = write(
        "bad.csv", CATALOG_HEADER + "aws,us-east-1,m6i.2xlarge,8,32768,0,0,,,,x86_64,0.384,0.169,\n" + row
    )
    snap = write("snap.yaml", items(pod("web-1")))
    err = _error(capsys, "--snapshot", snap, "--catalog", catalog, "--config", config)
    assert err.endswith(message)


def test_bad_rows_of_other_regions_are_left_out_like_every_other_row_there(
    files: tuple[Callable[[str, Any], str], str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    write, _, config = files
    catalog = write("mixed.csv", CATALOG + "gcp,us-central1,n2-standard-4,4\n")
    snap = write("snap.yaml", items(pod("web-1")))
    code, _, err = run_plan(capsys, "--snapshot", snap, "--catalog", catalog, "--config", config)
    assert (code, err) == (0, only_what_was_read(config, catalog))


def test_an_empty_now_is_an_error_not_the_current_time(
    files: tuple[Callable[[str, Any], str], str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    write, catalog, config = files
    snap = write("snap.yaml", items())
    err = _error(capsys, "--snapshot", snap, "--catalog", catalog, "--config", config, "--now", "")
    assert "--now: '' is not an RFC 3339 time" in err


def test_an_empty_config_path_is_an_error_naming_the_flag(
    files: tuple[Callable[[str, Any], str], str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    write, catalog, _ = files
    snap = write("snap.yaml", items())
    err = _error(capsys, "--snapshot", snap, "--catalog", catalog, "--config", "")
    assert "argument --config: must not be empty" in err


def test_a_simulated_cloud_plans_with_the_catalog_rows_of_its_catalog_cloud(
    files: tuple[Callable[[str, Any], str], str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    write, catalog, _ = files
    config = write(
        "simulated.yaml",
        {
            "cloud": "simulated",
            "region": "us-east-1",
            "simulated": {"catalog": catalog, "catalogCloud": "gcp", "catalogRegion": "us-central1"},
        },
    )
    snap = write("snap.yaml", items(pod("infer-1", gpu=1, cpu="2", memory="8Gi", message=INSUFFICIENT_GPU)))
    code, out, err = run_plan(
        capsys, "--snapshot", snap, "--catalog", catalog, "--config", config, "--output", "json"
    )
    assert code == 0, err
    assert [la["instanceType"] for la in json.loads(out)["launches"]] == ["g2-standard-4"]
    assert "rows of gcp us-central1" in err


def test_a_simulated_cloud_over_a_catalog_of_several_clouds_must_say_which(
    files: tuple[Callable[[str, Any], str], str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    write, catalog, _ = files
    config = write(
        "simulated.yaml", {"cloud": "simulated", "region": "us-east-1", "simulated": {"catalog": catalog}}
    )
    snap = write("snap.yaml", items(pod("web-1")))
    err = _error(capsys, "--snapshot", snap, "--catalog", catalog, "--config", config)
    assert "simulated.catalogCloud: not set" in err and "(aws, gcp)" in err


def test_the_command_the_demo_config_shows_plans_the_example_snapshot(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    text = (REPO / "config" / "examples" / "demo.yaml").read_text(encoding="utf-8")
    command = " ".join(
        line.lstrip("# ").rstrip("\\ ") for line in text.splitlines() if line.startswith("#   ")
    )
    argv = command.split()
    assert argv[:2] == ["tidal", "plan"]
    monkeypatch.chdir(REPO)
    assert main(argv[1:]) == 0
    assert capsys.readouterr().out.startswith("13 pods need capacity")


def test_the_garbage_collector_is_paused_while_planning_and_on_again_after(
    files: tuple[Callable[[str, Any], str], str, str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    write, catalog, config = files
    seen: list[bool] = []
    read = snapshot.SnapshotBuilder.add

    def add(self: snapshot.SnapshotBuilder, obj: Any, where: str) -> None:
        seen.append(gc.isenabled())
        read(self, obj, where)

    monkeypatch.setattr(snapshot.SnapshotBuilder, "add", add)
    good = write("snap.yaml", items(pod("web-1")))
    code, _, _ = run_plan(capsys, "--snapshot", good, "--catalog", catalog, "--config", config)
    assert code == 0 and seen and not any(seen)
    assert gc.isenabled()
    bad = write("bad.yaml", items(pod("web-2", memory="-1Gi")))
    assert "is negative" in _error(capsys, "--snapshot", bad, "--catalog", catalog, "--config", config)
    assert gc.isenabled()  # on again after an error too
