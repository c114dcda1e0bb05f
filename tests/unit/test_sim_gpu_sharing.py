"""The emulated cluster shares GPUs as KAI does: fractions packed onto devices held by reservation pods,
compute modes kept apart, memory shares bounded by the device's memory. Written apart from tidal's planner,
so a simulation can catch the planner placing shares differently from the scheduler that binds them."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from autoscaler.core.fit import GPU_TAINT
from autoscaler.core.gpu.kai_pods import GPU_GROUP_LABEL, RESERVATION_NAMESPACE
from autoscaler.core.model import Pod
from autoscaler.core.planning.cluster import node_devices
from autoscaler.sim.cluster import EmulatedCluster
from autoscaler.sim.kai_sharing import SharedGpus, pod_groups
from autoscaler.sim.run import simulate
from autoscaler.sim.scenario import JobSpec, ScenarioError, parse_scenario
from autoscaler.sim.workload import KAI
from tests.builders import node

T4_MEMORY = "15360"
GPU_TAINT_SPEC = {"key": GPU_TAINT.key, "value": GPU_TAINT.value, "effect": GPU_TAINT.effect}


def cluster_with(*nodes: dict[str, Any]) -> EmulatedCluster:
    cluster = EmulatedCluster(lambda: 0.0)
    for n in nodes:
        cluster.create(n)
    return cluster


def t4_node(name: str, gpus: int = 1, *, memory_label: str | None = T4_MEMORY) -> dict[str, Any]:
    labels = {"nvidia.com/gpu.memory": memory_label} if memory_label else {}
    return node(
        name,
        instance_type="g4dn.12xlarge" if gpus > 1 else "g4dn.xlarge",
        cpu="48" if gpus > 1 else "4",
        memory="192Gi" if gpus > 1 else "16Gi",
        gpu=gpus,
        labels=labels,
        taints=[GPU_TAINT_SPEC],
    )


def share_job(name: str, pods: int, fraction: float = 0.25, **kw: Any) -> JobSpec:
    return JobSpec(
        at=0,
        name=name,
        pods=pods,
        gpus=0,
        cpu_milli=500,
        memory_milli=1024**3 * 1000,
        duration=3600,
        gpu_fraction=fraction,
        **kw,
    )


def bound(cluster: EmulatedCluster, job: str) -> dict[str, str]:
    return {sp.pod.name: sp.pod.node_name for sp in cluster.pods.values() if sp.job == job}


def groups(cluster: EmulatedCluster, job: str) -> set[str]:
    return {sp.pod.labels.get(GPU_GROUP_LABEL, "") for sp in cluster.pods.values() if sp.job == job}


def test_four_quarter_gpu_pods_share_one_gpu_held_by_one_reservation_pod() -> None:
    cluster = cluster_with(t4_node("gpu-a"))
    cluster.submit(share_job("infer", 4), 0.0)
    cluster.schedule(0.0)
    assert set(bound(cluster, "infer").values()) == {"gpu-a"}
    [reservation] = cluster.sharing.reservations.values()
    assert reservation.namespace == RESERVATION_NAMESPACE
    assert reservation.node_name == "gpu-a" and reservation.requests.gpus == 1
    assert groups(cluster, "infer") == {reservation.labels[GPU_GROUP_LABEL]}


def test_a_fifth_quarter_gpu_pod_waits_when_the_only_gpu_is_shared_out() -> None:
    cluster = cluster_with(t4_node("gpu-a"))
    cluster.submit(share_job("infer", 5), 0.0)
    cluster.schedule(0.0)
    placed = bound(cluster, "infer")
    assert sorted(placed.values()).count("gpu-a") == 4
    [waiting] = [sp for sp in cluster.pods.values() if not sp.pod.node_name]
    assert waiting.pod.scheduled is not None and waiting.pod.scheduled.status == "False"


def test_pods_of_different_compute_modes_never_share_a_gpu() -> None:
    cluster = cluster_with(t4_node("gpu-a"))
    cluster.submit(share_job("train", 1), 0.0)
    cluster.schedule(0.0)
    cluster.submit(share_job("sim", 1, compute_mode="sm-sharing"), 0.0)
    cluster.schedule(0.0)
    assert bound(cluster, "train") == {"train-0": "gpu-a"}
    assert bound(cluster, "sim") == {"sim-0": ""}  # the GPU has room, but for time-slicing pods only


def test_pods_of_different_compute_modes_take_different_gpus_of_one_node() -> None:
    cluster = cluster_with(t4_node("gpu-a", gpus=4))
    cluster.submit(share_job("train", 1), 0.0)
    cluster.submit(share_job("sim", 1, compute_mode="sm-sharing"), 0.0)
    cluster.schedule(0.0)
    assert bound(cluster, "train")["train-0"] == bound(cluster, "sim")["sim-0"] == "gpu-a"
    assert groups(cluster, "train") != groups(cluster, "sim")
    assert len(cluster.sharing.reservations) == 2


def test_a_share_goes_to_the_fullest_gpu_it_fits_before_opening_another() -> None:
    cluster = cluster_with(t4_node("gpu-a", gpus=4))
    cluster.submit(share_job("half", 1, fraction=0.5), 0.0)
    cluster.submit(share_job("big", 1, fraction=0.75), 0.0)
    cluster.schedule(0.0)
    cluster.submit(share_job("small", 1, fraction=0.25), 0.0)
    cluster.schedule(0.0)
    assert groups(cluster, "small") == groups(cluster, "big")  # 0.75 + 0.25 fills a device exactly


def test_eight_eighth_gpu_pods_fit_one_gpu_as_kai_accounts_memory() -> None:
    # KAI gives a fraction int(0.125 x 15300) MiB of a 15,360 MiB T4 (floored to 15,300): eight fit.
    cluster = cluster_with(t4_node("gpu-a"))
    cluster.submit(share_job("tiny", 8, fraction=0.125), 0.0)
    cluster.schedule(0.0)
    assert set(bound(cluster, "tiny").values()) == {"gpu-a"}
    assert len(cluster.sharing.reservations) == 1


def test_a_memory_share_larger_than_the_gpus_memory_never_lands() -> None:
    cluster = cluster_with(t4_node("gpu-a"))
    big = share_job("llm", 1, fraction=0.0, gpu_memory_mib=20000)
    cluster.submit(big, 0.0)
    cluster.schedule(0.0)
    assert bound(cluster, "llm") == {"llm-0": ""}


def test_memory_shares_fill_a_gpu_up_to_its_memory() -> None:
    cluster = cluster_with(t4_node("gpu-a"))
    cluster.submit(share_job("embed", 3, fraction=0.0, gpu_memory_mib=5000), 0.0)
    cluster.submit(share_job("more", 1, fraction=0.0, gpu_memory_mib=1000), 0.0)
    cluster.schedule(0.0)
    assert set(bound(cluster, "embed").values()) == {"gpu-a"}
    assert bound(cluster, "more") == {"more-0": ""}  # 3 x 5000 + 1000 MiB > 15,300


def test_share_pods_tolerate_the_gpu_taint_and_go_to_kai() -> None:
    cluster = cluster_with(t4_node("gpu-a"))
    [key] = cluster.submit(share_job("infer", 1), 0.0)
    pod = cluster.pods[key].pod
    assert pod.scheduler_name == KAI
    assert any(t.key == GPU_TAINT.key and t.operator == "Exists" for t in pod.tolerations)
    assert pod.annotations["gpu-fraction"] == "0.25" and pod.gpu_share is not None


def test_a_share_pod_never_lands_on_a_node_without_gpus() -> None:
    cluster = cluster_with(node("cpu-a", cpu="16", memory="64Gi"))
    cluster.submit(share_job("infer", 1), 0.0)
    cluster.schedule(0.0)
    assert bound(cluster, "infer") == {"infer-0": ""}


def test_a_shared_gpu_is_not_a_whole_gpu_for_a_whole_gpu_pod() -> None:
    cluster = cluster_with(t4_node("gpu-a"))
    cluster.submit(share_job("infer", 1), 0.0)
    cluster.schedule(0.0)
    whole = JobSpec(at=0, name="train", pods=1, gpus=1, cpu_milli=500, memory_milli=10**12, duration=60)
    cluster.submit(whole, 0.0)
    cluster.schedule(0.0)
    assert bound(cluster, "train") == {"train-0": ""}


def test_the_reservation_pod_goes_with_the_last_pod_of_its_gpu() -> None:
    cluster = cluster_with(t4_node("gpu-a"))
    cluster.submit(share_job("infer", 2), 0.0)
    cluster.schedule(0.0)
    assert len(cluster.sharing.reservations) == 1
    cluster.finish_due(3600.0)
    assert cluster.sharing.reservations == {}
    assert not [p for p in cluster.snapshot().pods if p.namespace == RESERVATION_NAMESPACE]


def test_gpu_feature_discovery_labels_a_node_with_its_gpu_memory_once_its_gpus_work() -> None:
    cluster = cluster_with(node("gpu-b", instance_type="g5.xlarge", taints=[GPU_TAINT_SPEC]))
    cluster.gpu_memory = {"g5.xlarge": 22888}
    cluster.patch_status(
        "gpu-b", {"capacity": {"nvidia.com/gpu": "1"}, "allocatable": {"nvidia.com/gpu": "1"}}
    )
    assert cluster.nodes["gpu-b"].labels["nvidia.com/gpu.memory"] == "22888"


SHARE_DAY = {
    "name": "share-day",
    "duration": "04:00",
    "config": {
        "cloud": "aws",
        "region": "us-east-1",
        "zones": ["us-east-1a"],
        "capacityTypes": ["on-demand"],
        "instanceFamilyInclusions": ["g4dn", "m6i"],
    },
    "jobs": [
        {
            "at": "01:00",
            "name": "infer",
            "pods": 8,
            "gpuFraction": 0.25,
            "cpu": "500m",
            "memory": "1Gi",
            "duration": "1h",
        }
    ],
}


def test_eight_quarter_gpu_pods_run_on_two_gpus_in_a_simulated_day() -> None:
    out = simulate(parse_scenario(SHARE_DAY, "share-day.yaml"), bound=False)
    assert out.summary["pods"]["ran"] == 8 and out.summary["podsNeverServed"] == 0
    assert max(s.gpus_up for s in out.record.samples) == 2
    assert max(s.gpus_used for s in out.record.samples) == 2.0  # eight quarters


@pytest.mark.parametrize(
    ("job", "message"),
    [
        ({"gpuFraction": 1.5}, "jobs[0].gpuFraction: 1.5 is not a number above 0 and below 1"),
        ({"gpuFraction": 0.5, "gpus": 1}, "jobs[0].gpus: 1 is set beside a GPU share"),
        ({"gpuFraction": 0.5, "gpuMemory": 2000}, "jobs[0].gpuMemory: 2000 is set beside gpuFraction"),
        ({"gpuFraction": 0.5, "computeMode": "mps"}, "jobs[0].computeMode: 'mps' is not time-slicing"),
    ],
)
def test_a_bad_share_in_a_scenario_is_one_line_naming_the_field(job: dict[str, Any], message: str) -> None:
    with pytest.raises(ScenarioError) as err:
        parse_scenario({"jobs": [{"at": "01:00", "name": "x", **job}]}, "s.yaml")
    assert message in str(err.value) and "\n" not in str(err.value)


def _planner_free(cluster: EmulatedCluster, name: str) -> list[tuple[int, str]]:
    """What tidal's planner reads of a node's shared GPUs: (free hundredths, compute mode) per device."""
    on = [p for p in cluster.snapshot().pods if p.node_name == name]
    slots, opened = node_devices(cluster.nodes[name], cluster.nodes[name].allocatable.gpus, on, None)
    assert opened == 0  # every share it sees is held by a reservation pod, as in a real cluster
    return sorted((d.free, d.mode.value) for d in slots.shared)


def _emulated_free(cluster: EmulatedCluster, name: str) -> list[tuple[int, str]]:
    running = [sp.pod for sp in cluster.pods.values() if sp.pod.node_name]
    book = SharedGpus.of(
        cluster.sharing.reservations.values(), running, {n: v.labels for n, v in cluster.nodes.items()}
    )
    return sorted((round(100 * d.free / d.memory), d.mode.value) for d in book.by_node.get(name, ()))


def test_the_planner_reads_the_free_shares_the_emulated_kai_left() -> None:
    cluster = cluster_with(t4_node("gpu-a", gpus=4), t4_node("gpu-b"))
    cluster.submit(share_job("a", 3, fraction=0.3), 0.0)
    cluster.submit(share_job("b", 2, fraction=0.45), 0.0)
    cluster.submit(share_job("c", 1, fraction=0.2, compute_mode="sm-sharing"), 0.0)
    cluster.schedule(0.0)
    assert all(sp.pod.node_name for sp in cluster.pods.values())
    for name in ("gpu-a", "gpu-b"):
        assert _planner_free(cluster, name) == _emulated_free(cluster, name)


def test_the_planner_never_sees_more_room_than_kai_left_beside_memory_shares() -> None:
    # KAI accounts a gpu-memory share in MiB of the labelled memory floored to 100 MiB; the planner in
    # hundredths of the label, rounded up: it may see a little less room, never more.
    cluster = cluster_with(t4_node("gpu-a"))
    cluster.submit(share_job("d", 2, fraction=0.0, gpu_memory_mib=4000), 0.0)
    cluster.schedule(0.0)
    [(planned, _)] = _planner_free(cluster, "gpu-a")
    [(emulated, _)] = _emulated_free(cluster, "gpu-a")
    assert planned <= emulated


def test_the_planner_reads_a_share_on_two_devices_as_the_emulated_kai_placed_it() -> None:
    cluster = cluster_with(t4_node("gpu-a", gpus=4))
    two = replace(share_job("dist", 1, fraction=0.5), name="dist")
    [key] = cluster.submit(two, 0.0)
    sp = cluster.pods[key]
    assert sp.pod.gpu_share is not None
    sp.pod = replace(
        sp.pod,
        annotations={**sp.pod.annotations, "gpu-fraction-num-devices": "2"},
        gpu_share=replace(sp.pod.gpu_share, devices=2),
    )
    cluster.submit(share_job("half", 1, fraction=0.5), 0.0)
    cluster.schedule(0.0)
    assert len(cluster.sharing.reservations) == 2  # the second half joins one of the two devices
    assert set(cluster.pods[key].pod.labels) >= {
        f"runai-gpu-group/{g}" for g in pod_groups(cluster.pods[key].pod.labels)
    }
    assert _planner_free(cluster, "gpu-a") == _emulated_free(cluster, "gpu-a")


def test_a_scheduling_pass_starts_from_the_groups_kai_reserved_and_the_shares_bound_to_them() -> None:
    cluster = cluster_with(t4_node("gpu-a", gpus=4))
    cluster.submit(share_job("a", 3, fraction=0.3), 0.0)
    cluster.schedule(0.0)
    assert cluster.sharing.reservations
    cluster.sharing.start((sp.pod for sp in cluster.pods.values() if sp.pod.node_name), cluster.nodes)
    started = sorted(
        (round(100 * d.free / d.memory), d.mode.value) for d in cluster.sharing.gpus.by_node["gpu-a"]
    )
    assert started == _emulated_free(cluster, "gpu-a")


def test_without_reservation_pods_a_scheduling_pass_starts_with_no_groups_and_reads_no_pod() -> None:
    cluster = cluster_with(t4_node("gpu-a"))

    def bound() -> Iterator[Pod]:
        raise AssertionError("the bound pods were read")
        yield  # a generator

    cluster.sharing.start(bound(), cluster.nodes)
    assert (cluster.sharing.gpus.devices, cluster.sharing.gpus.by_node) == ({}, {})
