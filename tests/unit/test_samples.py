"""The sample catalogs, example snapshots and example configs under config/ are valid and say what they claim."""

from __future__ import annotations

import csv
import re
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import yaml

from autoscaler.cli.snapshot import load_snapshot
from autoscaler.config.options import load_config
from autoscaler.runtime.catalog import read_catalog_csv

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

REPO = Path(__file__).resolve().parents[2]
CATALOGS = REPO / "config" / "catalogs"
EXAMPLES = REPO / "config" / "examples"
SHARED_CATALOG = REPO.parent / "shared" / "data" / "catalog" / "instance_catalog.csv"

SHARED_HEADER = [
    "cloud",
    "region",
    "instance_type",
    "vcpu",
    "memory_mib",
    "gpu_count",
    "gpu_fraction",
    "gpu_vendor",
    "gpu_model",
    "gpu_memory_mib",
    "arch",
    "on_demand_usd_per_hour",
    "spot_usd_per_hour",
    "spot_price_kind",
    "spot_savings_pct",
    "spot_interruption_bucket",
    "local_ssd_gb",
    "on_demand_source",
    "spot_source",
    "price_date",
]
CATALOG_FILES = {
    "aws-us-east-1.csv": ("aws", "us-east-1"),
    "gcp-us-central1.csv": ("gcp", "us-central1"),
    "azure-eastus.csv": ("azure", "eastus"),
}
SNAPSHOTS = [
    "snapshot-kai.yaml",
    "snapshot-empty-cluster.yaml",
    "snapshot-idle-gpu-nodes.yaml",
    "snapshot-kai-sharing.yaml",
]


def catalog_rows(name: str) -> tuple[Sequence[str] | None, list[dict[str, str]]]:
    with (CATALOGS / name).open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        return reader.fieldnames, list(reader)


def snapshot_items(name: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = yaml.safe_load((EXAMPLES / name).read_text(encoding="utf-8"))["items"]
    return items


def kai_regexp() -> re.Pattern[str]:
    return re.compile(
        yaml.safe_load((EXAMPLES / "kai.yaml").read_text(encoding="utf-8"))["pendingPodReasonRegexp"]
    )


def pending_messages() -> list[tuple[str, str, str]]:
    """(pod, reason, message) of every PodScheduled=False condition in the example snapshots."""
    out: list[tuple[str, str, str]] = []
    for name in SNAPSHOTS:
        for item in snapshot_items(name):
            if item["kind"] != "Pod":
                continue
            for cond in item["status"].get("conditions", []):
                if cond["type"] == "PodScheduled" and cond["status"] == "False":
                    key = f"{item['metadata']['namespace']}/{item['metadata']['name']}"
                    out.append((key, cond.get("reason", ""), cond.get("message", "")))
    return out


# --- catalogs -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", CATALOG_FILES)
def test_a_catalog_has_the_shared_header_plus_a_trailing_zone_column(name: str) -> None:
    header, rows = catalog_rows(name)
    assert header == [*SHARED_HEADER, "zone"]
    assert len(rows) >= 20


@pytest.mark.parametrize("name", CATALOG_FILES)
def test_every_catalog_row_is_of_the_files_cloud_and_region(name: str) -> None:
    _, rows = catalog_rows(name)
    assert {(r["cloud"], r["region"]) for r in rows} == {CATALOG_FILES[name]}


@pytest.mark.parametrize("name", CATALOG_FILES)
def test_every_catalog_price_is_positive_and_spot_is_cheaper(name: str) -> None:
    _, rows = catalog_rows(name)
    for row in rows:
        on_demand = float(row["on_demand_usd_per_hour"])
        assert on_demand > 0, row["instance_type"]
        if row["spot_usd_per_hour"]:
            assert 0 < float(row["spot_usd_per_hour"]) <= on_demand, row["instance_type"]


@pytest.mark.parametrize("name", CATALOG_FILES)
def test_every_gpu_row_names_its_model_vendor_and_memory(name: str) -> None:
    _, rows = catalog_rows(name)
    gpu_rows = [r for r in rows if int(r["gpu_count"]) > 0]
    assert gpu_rows
    for row in gpu_rows:
        assert row["gpu_model"] and row["gpu_vendor"], row["instance_type"]
        assert int(row["gpu_memory_mib"]) > 0, row["instance_type"]
        assert 0 < float(row["gpu_fraction"]) <= int(row["gpu_count"]), row["instance_type"]


@pytest.mark.parametrize("name", CATALOG_FILES)
def test_a_type_appears_once_unless_it_is_listed_per_zone(name: str) -> None:
    _, rows = catalog_rows(name)
    seen = [(r["instance_type"], r["zone"]) for r in rows]
    assert len(seen) == len(set(seen))
    for instance_type in {t for t, zone in seen if not zone}:
        assert [z for t, z in seen if t == instance_type] == [""], instance_type


def test_some_scarce_gpu_types_are_restricted_to_explicit_zones() -> None:
    _, rows = catalog_rows("aws-us-east-1.csv")
    assert [r["zone"] for r in rows if r["instance_type"] == "p5.48xlarge"] == ["us-east-1a"]


@pytest.mark.parametrize("name", CATALOG_FILES)
def test_tidal_reads_every_catalog_row_as_offerings(name: str) -> None:
    cloud, region = CATALOG_FILES[name]
    _, rows = catalog_rows(name)
    offerings = read_catalog_csv(CATALOGS / name, cloud=cloud, region=region, zones=["zone-x"])
    assert {o.instance_type for o in offerings} == {r["instance_type"] for r in rows}


@pytest.fixture(scope="module")
def shared_catalog() -> dict[tuple[str, str, str], dict[str, str]]:
    if not SHARED_CATALOG.is_file():
        pytest.skip(f"shared catalog {SHARED_CATALOG} is not present")
    with SHARED_CATALOG.open(newline="", encoding="utf-8") as fh:
        return {(r["cloud"], r["region"], r["instance_type"]): r for r in csv.DictReader(fh)}


@pytest.mark.parametrize("name", CATALOG_FILES)
def test_every_catalog_price_equals_the_shared_catalogs_price(
    name: str, shared_catalog: dict[tuple[str, str, str], dict[str, str]]
) -> None:
    _, rows = catalog_rows(name)
    for row in rows:
        shared = shared_catalog[(row["cloud"], row["region"], row["instance_type"])]
        for column in ("on_demand_usd_per_hour", "spot_usd_per_hour", "spot_price_kind", "price_date"):
            assert row[column] == shared[column], (row["instance_type"], column)


@pytest.mark.parametrize("name", CATALOG_FILES)
def test_every_catalog_row_except_its_zone_is_copied_from_the_shared_catalog(
    name: str, shared_catalog: dict[tuple[str, str, str], dict[str, str]]
) -> None:
    _, rows = catalog_rows(name)
    for row in rows:
        shared = shared_catalog[(row["cloud"], row["region"], row["instance_type"])]
        assert {k: v for k, v in row.items() if k != "zone"} == shared, row["instance_type"]


# --- the KAI pending-reason regexp ---------------------------------------------------------------------

# Capacity messages, as kube-scheduler and KAI write them: a new node would let the pod run.
CAPACITY_MESSAGES = {
    "kube-cpu": "0/3 nodes are available: 3 Insufficient cpu.",
    "kube-mixed": (
        "0/5 nodes are available: 2 Insufficient memory, 3 Insufficient nvidia.com/gpu. preemption: 0/5 nodes are "
        "available: 5 No preemption victims found for incoming pod."
    ),
    "kube-taint": (
        "0/4 nodes are available: 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }, "
        "3 Insufficient nvidia.com/gpu. preemption: 0/4 nodes are available: 1 Preemption is not helpful for "
        "scheduling, 3 No preemption victims found for incoming pod."
    ),
    "kube-selector": (
        "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector. preemption: 0/3 nodes are "
        "available: 3 Preemption is not helpful for scheduling."
    ),
    "kube-no-nodes": "no nodes available to schedule pods",
    "kube-too-many-pods": "0/6 nodes are available: 6 Too many pods. preemption: 0/6 nodes are available: "
    "6 No preemption victims found for incoming pod.",
    "kube-ephemeral": "0/4 nodes are available: 4 Insufficient ephemeral-storage.",
    "kai-node-pool": (
        "The pod team-a/infer-0 requires GPU: 1, CPU: 0 (cores), memory: 0 (GB), pods: 1. "
        "No node in the default node-pool has GPU resources"
    ),
    "kai-node-pool-full": (
        "Scheduling conditions were not met for pod slurm/slurm-worker-gpu-0:\nMaxNodePoolResources: The pod "
        "slurm/slurm-worker-gpu-0 requires GPU: 4, CPU: 0 (cores), memory: 0 (GB), pods: 1. No node in the "
        "default node-pool has GPU resources."
    ),
    "kai-named-pool": (
        "The pod ml/train-0 requires GPU: 8, CPU: 32 (cores), memory: 512 (GB), pods: 1. "
        "No node in the a100-pool node-pool has GPU resources"
    ),
    "kai-0-of-n": "0/2 nodes are available: 2 node(s) didn't have enough resources: GPUs.",
    "kai-fit-errors": "no nodes with enough resources were found: 5 node(s) didn't have enough resources: GPUs.",
    "kai-gang": (
        "PodSchedulingErrors: Resources were found for 2 pods while 3 are required for gang scheduling. Additional "
        "pods cannot be scheduled due to: no nodes with enough resources were found: 3 node(s) didn't have enough "
        "resources: GPUs.."
    ),
}

# KAI queue holds: the queue is over its quota or limit; more nodes would not let the pod run.
QUEUE_MESSAGES = {
    "over-limit-gpu": (
        "OverLimit: research quota has reached the allowable limit of GPUs. Limit is 8 GPUs, currently 8 GPUs "
        "allocated and workload requested 2 GPUs."
    ),
    "over-limit-cpu": (
        "OverLimit: team-a quota has reached the allowable limit of CPU cores. Limit is 64 cores, currently 60 "
        "cores allocated and workload requested 8 cores"
    ),
    "over-limit-memory": (
        "OverLimit: team-a quota has reached the allowable limit of memory. Limit is 256 GB, currently 200 GB "
        "allocated and workload requested 64 GB"
    ),
    "non-preemptible-reason": (
        "NonPreemptibleOverQuota: Non-preemptible workload is over quota. Workload requested 4 GPUs, but "
        "production quota is 8 GPUs, while 6 GPUs are already allocated for non-preemptible pods. Use a "
        "preemptible workload to go over quota."
    ),
    "non-preemptible-bare": (
        "Non-preemptible workload is over quota. Workload requested 2 GPUs, but research quota is 4 GPUs, while "
        "4 GPUs are already allocated for non-preemptible pods. Use a preemptible workload to go over quota."
    ),
    "parent-queue": (
        "parent queue 'ml' quota has reached the allowable limit of GPUs. Limit is 16 GPUs, workload requested "
        "20 GPUs"
    ),
    "over-quota": "OverQuota: queue research is over quota: 6 GPUs allocated, quota is 4 GPUs.",
    "prefixed-over-limit": (
        "Scheduling conditions were not met for pod research/sweep-0:\nOverLimit: research quota has reached the "
        "allowable limit of GPUs. Limit is 8 GPUs, currently 8 GPUs allocated and workload requested 1 GPUs"
    ),
    "over-limit-then-capacity": (
        "OverLimit: research quota has reached the allowable limit of GPUs. Limit is 8 GPUs, currently 6 GPUs "
        "allocated and workload requested 4 GPUs\nMaxNodePoolResources: The pod research/x-0 requires GPU: 4, "
        "CPU: 0 (cores), memory: 0 (GB), pods: 1. No node in the default node-pool has GPU resources."
    ),
    "capacity-then-quota": (
        "0/2 nodes are available: 2 Insufficient nvidia.com/gpu. Non-preemptible workload is over quota."
    ),
}

# Neither: a new node would not help (or the pod is not waiting on a scheduler decision at all).
OTHER_MESSAGES = {
    "unbound-pvc": "0/3 nodes are available: 3 pod has unbound immediate PersistentVolumeClaims. preemption: "
    "0/3 nodes are available: 3 Preemption is not helpful for scheduling.",
    "gated": "Scheduling is blocked due to non-empty scheduling gates",
    "empty": "",
}


@pytest.mark.parametrize("message", CAPACITY_MESSAGES.values(), ids=CAPACITY_MESSAGES.keys())
def test_the_kai_regexp_matches_capacity_messages(message: str) -> None:
    assert kai_regexp().search(message)


@pytest.mark.parametrize("message", QUEUE_MESSAGES.values(), ids=QUEUE_MESSAGES.keys())
def test_the_kai_regexp_never_matches_a_kai_queue_message(message: str) -> None:
    assert not kai_regexp().search(message)


@pytest.mark.parametrize("message", OTHER_MESSAGES.values(), ids=OTHER_MESSAGES.keys())
def test_the_kai_regexp_ignores_messages_a_new_node_would_not_fix(message: str) -> None:
    assert not kai_regexp().search(message)


def test_the_kai_regexp_matches_every_capacity_message_in_the_snapshots() -> None:
    capacity = [
        (pod, m)
        for pod, reason, m in pending_messages()
        if reason == "Unschedulable" and not m.startswith("OverLimit")
    ]
    assert len(capacity) >= 10
    assert [pod for pod, m in capacity if not kai_regexp().search(m)] == []


def test_the_kai_regexp_rejects_the_queue_holds_in_the_snapshots() -> None:
    held = [(pod, m) for pod, _, m in pending_messages() if m.startswith("OverLimit")]
    assert len(held) == 2
    assert [pod for pod, m in held if kai_regexp().search(m)] == []


def test_the_demo_config_and_the_kai_preset_set_no_option_in_common() -> None:
    # So that `--config demo.yaml --config kai.yaml` overrides nothing: the preset only adds.
    preset = yaml.safe_load((EXAMPLES / "kai.yaml").read_text(encoding="utf-8"))
    demo = yaml.safe_load((EXAMPLES / "demo.yaml").read_text(encoding="utf-8"))
    assert set(preset) & set(demo) == set()


def test_the_kai_preset_loads_as_tidal_configuration() -> None:
    config = load_config(EXAMPLES / "kai.yaml")
    assert config.scheduler_names == ("kai-scheduler", "default-scheduler")


def test_the_demo_config_loads_as_a_complete_configuration() -> None:
    config = load_config(EXAMPLES / "demo.yaml")
    assert (config.cloud, config.region, config.cluster_name) == ("aws", "us-east-1", "demo")
    assert config.capacity_types == ("spot", "on-demand")
    assert config.cluster_gpu_limit == 16


# --- snapshots ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", SNAPSHOTS)
def test_a_snapshot_is_a_kubernetes_list(name: str) -> None:
    doc = yaml.safe_load((EXAMPLES / name).read_text(encoding="utf-8"))
    assert (doc["apiVersion"], doc["kind"]) == ("v1", "List")
    assert isinstance(doc["items"], list)
    assert doc["items"]


@pytest.mark.parametrize("name", SNAPSHOTS)
def test_every_snapshot_item_has_api_version_kind_and_name(name: str) -> None:
    for i, item in enumerate(snapshot_items(name)):
        assert item.get("apiVersion") and item.get("kind"), i
        assert item.get("metadata", {}).get("name"), i


@pytest.mark.parametrize("name", SNAPSHOTS)
def test_every_namespaced_snapshot_item_has_a_namespace_and_uid(name: str) -> None:
    cluster_scoped = {"Node", "Queue"}
    for item in snapshot_items(name):
        meta = item["metadata"]
        assert meta.get("uid") and meta.get("creationTimestamp"), meta["name"]
        assert bool(meta.get("namespace")) == (item["kind"] not in cluster_scoped), meta["name"]


@pytest.mark.parametrize("name", SNAPSHOTS)
def test_tidal_loads_every_snapshot_object_without_skipping_any(name: str) -> None:
    snapshot, skipped = load_snapshot([EXAMPLES / name])
    assert not skipped
    assert len(snapshot.pods) + len(snapshot.nodes) + len(snapshot.pdbs) + len(snapshot.daemonsets) + len(
        snapshot.podgroups
    ) + len(snapshot.queues) == len(snapshot_items(name))


def test_the_kai_snapshot_has_a_four_pod_gang_with_its_podgroup() -> None:
    items = snapshot_items("snapshot-kai.yaml")
    group = next(i for i in items if i["kind"] == "PodGroup" and i["metadata"]["name"] == "pg-train-llama")
    members = [
        i
        for i in items
        if i["kind"] == "Pod"
        and i["metadata"].get("annotations", {}).get("pod-group-name") == "pg-train-llama"
    ]
    assert (group["spec"]["minMember"], group["spec"]["queue"], len(members)) == (4, "production", 4)


def test_the_kai_snapshot_queues_have_the_documented_gpu_quota_and_limit() -> None:
    queues = {
        i["metadata"]["name"]: i["spec"] for i in snapshot_items("snapshot-kai.yaml") if i["kind"] == "Queue"
    }
    gpu = {
        name: (spec["resources"]["gpu"]["quota"], spec["resources"]["gpu"]["limit"])
        for name, spec in queues.items()
    }
    assert (gpu["research"], gpu["production"]) == ((4, 8), (8, 12))
    assert queues["research"]["parentQueue"] == queues["production"]["parentQueue"] == "ml"


def test_the_empty_cluster_snapshot_has_no_nodes_and_only_no_nodes_messages() -> None:
    items = snapshot_items("snapshot-empty-cluster.yaml")
    assert not [i for i in items if i["kind"] == "Node"]
    pods = [i for i in items if i["kind"] == "Pod"]
    assert len(pods) == 4
    assert {p["status"]["conditions"][0]["message"] for p in pods} == {"no nodes available to schedule pods"}


def test_the_idle_gpu_snapshot_nodes_are_tidal_managed_and_unneeded_since_nine() -> None:
    nodes = [
        i
        for i in snapshot_items("snapshot-idle-gpu-nodes.yaml")
        if i["kind"] == "Node" and i["metadata"]["labels"].get("tidal.dev/managed") == "true"
    ]
    assert len(nodes) == 3
    for node in nodes:
        assert node["metadata"]["labels"]["tidal.dev/capacity-type"] == "on-demand"
        assert node["metadata"]["annotations"]["tidal.dev/unneeded-since"] == "2026-11-20T09:00:00Z"
        assert int(node["status"]["allocatable"]["nvidia.com/gpu"]) >= 1
