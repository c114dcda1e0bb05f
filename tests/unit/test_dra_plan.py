"""DRA claims in plans: a pod whose ResourceClaims ask for GPUs of NVIDIA's DRA driver gets a node whose GPUs
satisfy them, and a claim tidal cannot evaluate is a reason, never a launch."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

from autoscaler.cli.snapshot import SnapshotBuilder
from autoscaler.core.demand import Reason
from autoscaler.core.planning.planner import PlanInput, plan
from tests.builders import INSUFFICIENT_GPU, aws_offerings, node, pod
from tests.unit.test_snapshot_dra import DEVICE_CLASS

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from autoscaler.config.options import Config
    from autoscaler.core.planning.planner import Plan

NOW = 1_795_168_800.0
DRA = {"gpuSharing": {"dra": True}}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def template(name: str, count: int = 1, *selectors: str, mode: str = "") -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": "gpu.nvidia.com"}
    if mode:
        exactly["allocationMode"] = mode
    else:
        exactly["count"] = count
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": "research"},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpus", "exactly": exactly}]}}},
    }


def trainer(
    name: str, claim_template: str, cpu: str = "4", memory: str = "16Gi", **kw: Any
) -> dict[str, Any]:
    obj = pod(
        name,
        namespace="research",
        cpu=cpu,
        memory=memory,
        message=INSUFFICIENT_GPU,
        tolerations=[GPU_TOLERATION],
        **kw,
    )
    obj["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": claim_template}]
    return obj


def run(make_config: Callable[..., Config], *objs: dict[str, Any], **cfg: Any) -> Plan:
    builder = SnapshotBuilder()
    for i, obj in enumerate(objs):
        builder.add(copy.deepcopy(obj), f"object {i}")
    return plan(PlanInput(builder.build(), aws_offerings(), make_config(**cfg), NOW))


def test_a_claim_for_two_h100s_gets_a_node_of_h100s_labelled_for_dra(
    make_config: Callable[..., Config],
) -> None:
    h100 = template("two-h100", 2, 'device.attributes["gpu.nvidia.com"].productName.matches("H100")')
    result = run(make_config, DEVICE_CLASS, h100, trainer("trainer-0", "two-h100"), **DRA)
    assert result.launch.unplaced == () and result.demand.ignored == []
    [launch] = result.launch.launches
    assert launch.offering.gpu_model == "H100"
    assert launch.offering.layout is not None
    assert ("tidal.dev/gpu-allocation", "dra") in launch.offering.layout.labels


def test_two_pods_each_claiming_two_gpus_share_one_eight_gpu_node(make_config: Callable[..., Config]) -> None:
    h100 = template("two-h100", 2, 'device.attributes["gpu.nvidia.com"].productName.matches("H100")')
    pods = [trainer(f"trainer-{i}", "two-h100") for i in range(2)]
    result = run(make_config, DEVICE_CLASS, h100, *pods, **DRA)
    [launch] = result.launch.launches
    assert len(launch.pods) == 2 and launch.offering.gpu_count == 8


def test_a_memory_selector_rules_out_gpus_with_less_memory(make_config: Callable[..., Config]) -> None:
    big = template("big", 1, 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0')
    result = run(make_config, DEVICE_CLASS, big, trainer("trainer-0", "big"), **DRA)
    [launch] = result.launch.launches
    assert launch.offering.gpu_memory_mib >= 40 * 1024


def test_a_selector_tidal_cannot_evaluate_is_a_reason_and_never_a_launch(
    make_config: Callable[..., Config],
) -> None:
    uuid = template("pinned", 1, 'device.attributes["gpu.nvidia.com"].uuid == "GPU-1"')
    result = run(make_config, DEVICE_CLASS, uuid, trainer("trainer-0", "pinned"), **DRA)
    assert result.launch.launches == ()
    [ignored] = result.demand.ignored
    assert ignored.reason == Reason.UNSUPPORTED_CLAIM
    assert "uuid" in ignored.detail


def test_a_claim_template_that_does_not_exist_is_a_reason(make_config: Callable[..., Config]) -> None:
    result = run(make_config, DEVICE_CLASS, trainer("trainer-0", "missing"), **DRA)
    assert result.launch.launches == ()
    assert "ResourceClaimTemplate research/missing does not exist" in result.demand.ignored[0].detail


def test_allocation_mode_all_plans_the_smallest_node_that_satisfies_it(
    make_config: Callable[..., Config],
) -> None:
    every = template(
        "every-a10", 1, 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA A10G"', mode="All"
    )
    result = run(
        make_config, DEVICE_CLASS, every, trainer("trainer-0", "every-a10", cpu="2", memory="8Gi"), **DRA
    )
    [launch] = result.launch.launches
    # A10G nodes come with 1 or 4 GPUs: taking every GPU of the node, the pod is planned the 1-GPU one.
    assert launch.offering.gpu_model == "A10G" and launch.offering.gpu_count == 1


def test_without_dra_enabled_a_claim_pod_is_unplaced_naming_the_setting(
    make_config: Callable[..., Config],
) -> None:
    result = run(make_config, DEVICE_CLASS, template("one", 1), trainer("trainer-0", "one"))
    assert result.launch.launches == ()
    [ignored] = result.demand.ignored
    assert ignored.reason == Reason.UNSUPPORTED_CLAIM and "gpuSharing.dra: true" in ignored.detail


def test_a_dra_node_already_launched_holds_the_pods_its_gpus_fit(make_config: Callable[..., Config]) -> None:
    dra_node = node(
        "gpu-a", instance_type="p5.48xlarge", cpu="192", memory="2048Gi", managed=True, gpu_label=8
    )
    dra_node["metadata"]["labels"]["tidal.dev/gpu-allocation"] = "dra"
    result = run(make_config, DEVICE_CLASS, template("two", 2), dra_node, trainer("trainer-0", "two"), **DRA)
    assert result.launch.launches == ()
    assert [a.node for a in result.launch.absorbed] == ["gpu-a"]


def test_whole_gpu_device_plugin_nodes_never_hold_a_claim_pod(make_config: Callable[..., Config]) -> None:
    plugin = node("gpu-b", instance_type="p5.48xlarge", cpu="192", memory="2048Gi", gpu=8)
    result = run(make_config, DEVICE_CLASS, template("two", 2), plugin, trainer("trainer-0", "two"), **DRA)
    assert len(result.launch.launches) == 1
