"""`tidal plan --snapshot` files carry DRA objects (`kubectl get pods,deviceclasses,resourceclaims,
resourceclaimtemplates -A -o yaml`): they are decoded and kept beside the snapshot, and bad ones are one line."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
import yaml

from autoscaler.cli.main import main
from autoscaler.cli.snapshot import SnapshotError, read_snapshots
from tests.builders import INSUFFICIENT_GPU, pod

if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

    from autoscaler.core.dra import DeviceRequest

DEVICE_CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "gpu.nvidia.com"},
    "spec": {
        "selectors": [
            {
                "cel": {
                    "expression": "device.driver == 'gpu.nvidia.com' && "
                    "device.attributes['gpu.nvidia.com'].type == 'gpu'"
                }
            }
        ]
    },
}
TEMPLATE = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaimTemplate",
    "metadata": {"name": "two-gpus", "namespace": "research"},
    "spec": {
        "spec": {
            "devices": {
                "requests": [{"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}}]
            }
        }
    },
}


def claim(count: int) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "team-gpu", "namespace": "research"},
        "spec": {
            "devices": {
                "requests": [
                    {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": count}}
                ]
            }
        },
    }


def trainer() -> dict[str, Any]:
    obj = pod("trainer-0", namespace="research", cpu="8", memory="32Gi", message=INSUFFICIENT_GPU)
    obj["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "two-gpus"}]
    return obj


def kubectl_list(*objs: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "List", "items": list(objs)}


def write(tmp_path: Path, name: str, content: dict[str, Any]) -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(content))
    return str(path)


def test_dra_objects_in_a_snapshot_are_decoded_beside_it(tmp_path: Path) -> None:
    path = write(tmp_path, "snap.yaml", kubectl_list(trainer(), DEVICE_CLASS, TEMPLATE, claim(1)))
    loaded = read_snapshots([path])
    assert [p.name for p in loaded.snapshot.pods] == ["trainer-0"]
    assert loaded.dra.served
    assert [c.name for c in loaded.dra.device_classes] == ["gpu.nvidia.com"]
    exactly = loaded.dra.claim_templates[0].spec.requests[0].exactly
    assert exactly is not None
    assert exactly.count == 2
    assert [c.name for c in loaded.dra.claims] == ["team-gpu"]
    assert loaded.skipped == {} and loaded.objects == 4


def test_a_snapshot_without_dra_objects_says_dra_was_not_seen(tmp_path: Path) -> None:
    loaded = read_snapshots([write(tmp_path, "snap.yaml", kubectl_list(trainer()))])
    assert not loaded.dra.served and loaded.dra.claims == ()


def test_a_resource_slice_is_skipped_and_counted(tmp_path: Path) -> None:
    slice_ = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "gpu-node-3-gpu"},
    }
    loaded = read_snapshots([write(tmp_path, "snap.yaml", kubectl_list(DEVICE_CLASS, slice_))])
    assert loaded.skipped == {"ResourceSlice": 1}


def _exact_count(request: DeviceRequest) -> int:
    assert request.exactly is not None
    return request.exactly.count


def test_a_claim_given_in_two_files_is_taken_from_the_later_one(tmp_path: Path) -> None:
    first = write(tmp_path, "a.yaml", claim(1))
    second = write(tmp_path, "b.yaml", claim(4))
    loaded = read_snapshots([first, second])
    assert [_exact_count(c.spec.requests[0]) for c in loaded.dra.claims] == [4]
    assert loaded.duplicates == {"ResourceClaim": 1}


def test_a_malformed_claim_names_file_item_object_and_field(tmp_path: Path) -> None:
    path = write(tmp_path, "snap.yaml", kubectl_list(DEVICE_CLASS, claim(0)))
    with pytest.raises(SnapshotError) as raised:
        read_snapshots([path])
    assert str(raised.value) == (
        f"{path}: items[1]: ResourceClaim research/team-gpu: spec.devices.requests[0].exactly.count: 0 is not a "
        "whole number above 0"
    )


def test_a_dra_object_of_an_earlier_api_version_is_refused_by_name(tmp_path: Path) -> None:
    old = {**DEVICE_CLASS, "apiVersion": "resource.k8s.io/v1beta1"}
    path = write(tmp_path, "snap.yaml", old)
    with pytest.raises(SnapshotError) as raised:
        read_snapshots([path])
    assert str(raised.value) == (
        f"{path}: DeviceClass gpu.nvidia.com: apiVersion 'resource.k8s.io/v1beta1' is not read "
        "(export it as resource.k8s.io/v1, served from Kubernetes 1.34)"
    )


def test_tidal_plan_reads_a_snapshot_with_dra_objects(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snap = write(tmp_path, "snap.yaml", kubectl_list(trainer(), DEVICE_CLASS, TEMPLATE))
    catalog = tmp_path / "catalog.csv"
    catalog.write_text(
        "cloud,region,instance_type,vcpu,memory_mib,gpu_count,arch,on_demand_usd_per_hour\n"
        "aws,us-east-1,m6i.4xlarge,16,65536,0,x86_64,0.768\n"
    )
    assert main(["plan", "--snapshot", snap, "--catalog", str(catalog)]) == 0
    out, err = capsys.readouterr()
    assert "error" not in err and "skipped" not in out


def test_tidal_plan_reports_a_malformed_dra_object_in_one_line_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snap = write(tmp_path, "snap.yaml", claim(0))
    catalog = tmp_path / "catalog.csv"
    catalog.write_text(
        "cloud,region,instance_type,vcpu,memory_mib,gpu_count,arch,on_demand_usd_per_hour\n"
        "aws,us-east-1,m6i.4xlarge,16,65536,0,x86_64,0.768\n"
    )
    code = main(["plan", "--snapshot", snap, "--catalog", str(catalog)])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert err == (
        f"tidal: error: {snap}: ResourceClaim research/team-gpu: spec.devices.requests[0].exactly.count: 0 is not "
        "a whole number above 0\n"
    )
