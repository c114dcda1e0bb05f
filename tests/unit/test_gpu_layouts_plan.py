"""MIG and time-slicing in plans: pods asking for MIG instances get nodes of a GPU model cut by the configured
layout, labelled so the GPU operator cuts them; a time-sliced GPU model's nodes hold GPUs x replicas pods."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from autoscaler.config.options import ConfigError
from autoscaler.core.demand import pod_gpus
from autoscaler.core.planning.planner import PlanInput, plan
from autoscaler.runtime.kube.convert import pod_from_dict
from tests.builders import aws_offerings, node, pod, snapshot

if TYPE_CHECKING:
    from collections.abc import Callable

    from autoscaler.config.options import Config
    from autoscaler.core.planning.planner import Plan

NOW = 1_795_168_800.0
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
MIG_1G = "nvidia.com/mig-1g.5gb"
TS4 = {
    "version": "v1",
    "sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}},
}


def mig_pod(name: str, profile: str = MIG_1G, count: str = "1", **kw: Any) -> dict[str, Any]:
    """A pod asking for a MIG instance; it tolerates the GPU taint itself (the admission plugin would give it
    a toleration for the MIG resource, not for nvidia.com/gpu)."""
    return pod(
        name,
        cpu="1",
        memory="4Gi",
        extra_requests={profile: count},
        tolerations=[GPU_TOLERATION],
        message="0/3 nodes are available: 3 Insufficient " + profile + ".",
        **kw,
    )


def run(make_config: Callable[..., Config], *objs: dict[str, Any], **cfg: Any) -> Plan:
    return plan(PlanInput(snapshot(*objs), aws_offerings(), make_config(**cfg), NOW))


A100_MIG = {"gpuSharing": {"migLayouts": {"A100": "all-1g.5gb"}}}
T4_SLICED = {"gpuSharing": {"devicePluginConfigs": {"ts4": TS4}, "devicePluginConfigByModel": {"T4": "ts4"}}}


def test_pods_asking_for_mig_instances_get_one_node_cut_by_the_configured_layout(
    make_config: Callable[..., Config],
) -> None:
    result = run(make_config, *[mig_pod(f"infer-{i}") for i in range(20)], **A100_MIG)
    assert result.launch.unplaced == ()
    [launch] = result.launch.launches
    # 8 A100 40GB x 7 instances of 1g.5gb: one p4d.24xlarge holds all twenty.
    assert launch.offering.instance_type == "p4d.24xlarge"
    assert launch.offering.layout is not None
    assert dict(launch.offering.layout.resources) == {MIG_1G: 56}
    assert ("nvidia.com/mig.config", "all-1g.5gb") in launch.offering.layout.labels


def test_a_mig_pod_without_a_layout_for_its_profile_is_unplaced_naming_the_setting(
    make_config: Callable[..., Config],
) -> None:
    result = run(make_config, mig_pod("infer-0"))
    assert result.launch.launches == ()
    [unplaced] = result.launch.unplaced
    assert MIG_1G in unplaced.reason and "gpuSharing.migLayouts" in unplaced.reason


def test_a_layout_the_gpu_cannot_take_offers_nothing(make_config: Callable[..., Config]) -> None:
    # 3g.40gb is a profile of the 80 GB A100 and H100; the catalog's A100 has 40 GB.
    cfg = {"gpuSharing": {"migLayouts": {"A100": "all-3g.40gb", "H100": "all-3g.40gb"}}}
    result = run(make_config, mig_pod("big-0", "nvidia.com/mig-3g.40gb"), **cfg)
    [launch] = result.launch.launches
    assert launch.offering.gpu_model == "H100"


def test_whole_gpu_pods_never_get_a_node_cut_for_mig(make_config: Callable[..., Config]) -> None:
    result = run(make_config, pod("train-0", gpu=8, cpu="8", memory="64Gi"), **A100_MIG)
    [launch] = result.launch.launches
    assert launch.offering.layout is None


def test_a_mig_node_still_being_cut_counts_as_launching_not_as_a_node_without_room(
    make_config: Callable[..., Config],
) -> None:
    cut = node("gpu-a", instance_type="p4d.24xlarge", cpu="96", memory="1152Gi", managed=True, gpu_label=8)
    cut["metadata"]["labels"].update(
        {"nvidia.com/mig.config": "all-1g.5gb", "nvidia.com/mig.config.state": "pending"}
    )
    result = run(make_config, cut, mig_pod("infer-0"), **A100_MIG)
    assert result.launch.launches == ()
    assert [(a.pod, a.node) for a in result.launch.absorbed] == [("default/infer-0", "gpu-a")]


def test_a_cut_mig_node_takes_pods_up_to_its_free_instances(make_config: Callable[..., Config]) -> None:
    cut = node("gpu-a", instance_type="p4d.24xlarge", cpu="96", memory="1152Gi", managed=True, gpu_label=8)
    cut["metadata"]["labels"].update(
        {"nvidia.com/mig.config": "all-1g.5gb", "nvidia.com/mig.config.state": "success"}
    )
    cut["status"]["allocatable"][MIG_1G] = "2"
    cut["status"]["capacity"][MIG_1G] = "2"
    result = run(make_config, cut, *[mig_pod(f"infer-{i}") for i in range(3)], **A100_MIG)
    assert len(result.launch.absorbed) == 2
    assert sum(len(la.pods) for la in result.launch.launches) == 1


def test_a_mig_node_is_counted_by_its_physical_gpus_against_the_cluster_limit(
    make_config: Callable[..., Config],
) -> None:
    cut = node("gpu-a", instance_type="p4d.24xlarge", cpu="96", memory="1152Gi", managed=True, gpu_label=8)
    cut["metadata"]["labels"].update(
        {"nvidia.com/mig.config": "all-1g.5gb", "nvidia.com/mig.config.state": "success"}
    )
    cut["status"]["allocatable"][MIG_1G] = "1"
    busy = mig_pod("run-0", node_name="gpu-a", phase="Running")
    result = run(make_config, cut, busy, mig_pod("infer-0"), clusterGPULimit=8, **A100_MIG)
    assert result.launch.launches == ()
    assert result.launch.unplaced[0].limited


def test_kai_counts_a_mig_instance_by_its_compute_slices_against_queue_quota() -> None:
    three = pod_from_dict(mig_pod("big-0", "nvidia.com/mig-3g.20gb", count="2"))
    media = pod_from_dict(mig_pod("media-0", "nvidia.com/mig-1g.5gb.me"))
    assert pod_gpus(three) == 6
    assert pod_gpus(media) == 0  # KAI does not parse media-extension names, so they count nothing


def test_a_time_sliced_gpu_model_holds_replicas_pods_per_gpu(make_config: Callable[..., Config]) -> None:
    pods = [pod(f"infer-{i}", gpu=1, cpu="500m", memory="1Gi") for i in range(4)]
    result = run(make_config, *pods, gpuSkus=["T4"], **T4_SLICED)
    [launch] = result.launch.launches
    assert launch.offering.instance_type == "g4dn.xlarge"
    assert len(launch.pods) == 4
    assert launch.offering.layout is not None
    assert dict(launch.offering.layout.labels) == {"nvidia.com/device-plugin.config": "ts4"}
    assert result.launch.gpus_after - result.launch.gpus_before == 1


def test_a_time_sliced_node_counts_its_physical_gpus_against_the_cluster_limit(
    make_config: Callable[..., Config],
) -> None:
    sliced = node("gpu-a", instance_type="g4dn.xlarge", cpu="4", memory="16Gi", gpu=4)
    sliced["metadata"]["labels"]["nvidia.com/gpu.replicas"] = "4"
    busy = [pod(f"run-{i}", gpu=1, node_name="gpu-a", phase="Running", message=None) for i in range(4)]
    result = run(
        make_config,
        sliced,
        *busy,
        pod("infer-0", gpu=1),
        clusterGPULimit=2,
        gpuSkus=["T4"],
        **T4_SLICED,
    )
    assert result.launch.gpus_before == 1
    assert len(result.launch.launches) == 1


@pytest.mark.parametrize(
    ("section", "message"),
    [
        (
            {"migLayouts": {"T4": "all-1g.5gb"}},
            "gpuSharing.migLayouts.T4: GPU model 'T4' cannot be cut with MIG",
        ),
        ({"migLayouts": {"A100": "half"}}, "gpuSharing.migLayouts.A100: 'half' is not a layout"),
        ({"migStrategy": "none"}, "gpuSharing.migStrategy: 'none' is not one of single, mixed"),
        (
            {"devicePluginConfigByModel": {"T4": "ts8"}},
            "gpuSharing.devicePluginConfigByModel.T4: 'ts8' is not in devicePluginConfigs",
        ),
        (
            {
                "devicePluginConfigs": {
                    "ts": {
                        "sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 1}]}}
                    }
                }
            },
            "replicas: 1 is not a whole number >= 2",
        ),
    ],
)
def test_a_bad_gpu_sharing_setting_is_one_line_naming_it(
    make_config: Callable[..., Config],
    section: dict[str, dict[str, str]]
    | dict[str, str]
    | dict[str, dict[str, dict[str, dict[str, dict[str, list[dict[str, Any]]]]]]],
    message: str,
) -> None:
    with pytest.raises(ConfigError) as caught:
        make_config(gpuSharing=section)
    assert len(caught.value.errors) == 1
    assert message in caught.value.errors[0]


def test_a_node_launched_for_mig_carries_the_layout_label_the_gpu_operator_reads(
    make_config: Callable[..., Config],
) -> None:
    from autoscaler.core.fit import node_labels

    config = make_config(**A100_MIG)
    [launch] = run(make_config, mig_pod("infer-0"), **A100_MIG).launch.launches
    assert node_labels(launch.offering, config)["nvidia.com/mig.config"] == "all-1g.5gb"
