"""What `tidal plan --explain` and the launch explanations say is the plan's own arithmetic: a candidate that
"holds N like it" is one the plan itself fills with exactly N such pods (GPU shares, MIG instances, time-slice
replicas, DRA devices and anti-affinity counted), its price per pod is its price over N, and the GPUs a launch's
pods use are counted per node, never above the node's own."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from autoscaler.cli.catalog_files import read_catalogs
from autoscaler.cli.render import plan_to_json, story_lines, why_lines
from autoscaler.cli.snapshot import SnapshotBuilder
from autoscaler.config.layers import load_layers
from autoscaler.core.planning.planner import PlanInput, plan
from autoscaler.core.planning.why import LaunchWhy, idle_warning
from autoscaler.runtime.notices import idle_notice
from tests.builders import INSUFFICIENT_GPU, anti_affinity, aws_offerings, offering, pod
from tests.unit.test_dra_plan import DRA, template, trainer
from tests.unit.test_gpu_layouts_plan import A100_MIG, T4_SLICED, mig_pod
from tests.unit.test_snapshot_dra import DEVICE_CLASS

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from autoscaler.config.options import Config
    from autoscaler.core.offering import Offering
    from autoscaler.core.planning.planner import Plan

REPO = Path(__file__).resolve().parents[2]
NOW = 1_795_169_100.0  # 2026-11-20T10:05:00Z, the worked example's --now
HOSTNAME = "kubernetes.io/hostname"
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def build(objects: Sequence[dict[str, Any]]) -> Any:
    builder = SnapshotBuilder()
    for i, obj in enumerate(objects):
        builder.add(copy.deepcopy(obj), f"object {i}")
    return builder.build()


def explained(objects: Sequence[dict[str, Any]], offerings: Sequence[Offering], config: Config) -> Plan:
    """The plan of ``objects``, with the story of every pod it launches for."""
    first = plan(PlanInput(build(objects), offerings, config, NOW))
    pods = [p for la in first.launch.launches for p in la.pods]
    return plan(PlanInput(build(objects), offerings, config, NOW, explain=pods))


def replicas(objects: Sequence[dict[str, Any]], key: str, n: int) -> list[dict[str, Any]]:
    """``n`` pods like the pod ``key`` (namespace/name), with the objects they need (claims, podgroups,
    queues), and no node: the plan must launch for every one."""
    namespace, name = key.split("/")
    source = next(
        o
        for o in objects
        if o["kind"] == "Pod" and (o["metadata"]["namespace"], o["metadata"]["name"]) == (namespace, name)
    )
    out = [o for o in objects if o["kind"] not in ("Pod", "Node")]
    for i in range(n):
        clone = copy.deepcopy(source)
        clone["metadata"]["name"] = f"{name}-like-{i}"
        clone["metadata"]["uid"] = f"{source['metadata'].get('uid', name)}-like-{i}"
        out.append(clone)
    return out


def check_every_story(
    objects: Sequence[dict[str, Any]], offerings: Sequence[Offering], config: Config
) -> int:
    """Check every explanation of the plan of ``objects`` against the plan; the number of candidates checked."""
    result = explained(objects, offerings, config)
    assert result.launch.launches, "the example launches nothing: nothing to check"
    for la in result.launch.launches:
        assert la.why is not None
        # A launch's figures are one node's: the GPUs its pods use are some of that node's GPUs.
        assert la.why.gpus_used <= la.offering.gpu_count
        assert la.why.idle_gpus <= la.offering.gpu_count - la.why.gpus_used
        if la.offering.gpu_count:
            assert la.why.gpus_used >= 1
    doc = plan_to_json(result)
    for launch in doc["launches"]:
        assert launch["why"]["gpusUsed"] <= launch["gpus"]
    checked = 0
    seen_kinds: set[tuple[str, ...]] = set()
    for key, story in result.stories.items():
        launch = next(la for la in result.launch.launches if key in la.pods)
        (chosen,) = [c for c in story.candidates if c.chosen]
        assert chosen.offering == launch.offering
        # The node the plan launched holds no more pods like it than the explanation says one node holds.
        alike = [p for p in launch.pods if p.rsplit("-", 1)[0] == key.rsplit("-", 1)[0]]
        assert len(alike) <= chosen.holds
        assert f"launched for {len(launch.pods)} pod" in chosen.verdict
        kind = (key.rsplit("-", 1)[0], launch.offering.key)
        if kind in seen_kinds:
            continue
        seen_kinds.add(kind)
        for c in story.candidates:
            assert c.holds >= 1
            assert c.per_pod == pytest.approx(c.offering.price / c.holds)
            if c.holds > 1:
                assert f"holds {c.holds} like it" in c.verdict
                assert f"${c.offering.price / c.holds:.4f}/h each when full" in c.verdict
            else:
                assert "holds it alone" in c.verdict
            # The plan's own numbers: given only this offering, it puts exactly `holds` such pods on one node.
            only = [
                o
                for o in offerings
                if (o.instance_type, o.capacity_type) == (c.offering.instance_type, c.offering.capacity_type)
            ]
            full = plan(PlanInput(build(replicas(objects, key, c.holds)), only, config, NOW))
            assert [len(la.pods) for la in full.launch.launches] == [c.holds], (key, c.offering.key)
            more = plan(PlanInput(build(replicas(objects, key, c.holds + 1)), only, config, NOW))
            assert max(len(la.pods) for la in more.launch.launches) == c.holds, (key, c.offering.key)
            checked += 1
        lines = story_lines(story)
        assert not any(" 1 pods" in line or " 1 nodes" in line or " 1 GPUs" in line for line in lines)
    assert not any(" 1 GPUs" in line for line in why_lines(result.launch.launches))
    return checked


def kai_sharing_example() -> tuple[list[dict[str, Any]], list[Offering], Config]:
    """docs/gpu-sharing.md's worked example, as `tidal plan` reads it."""
    objects = yaml.safe_load((REPO / "config/examples/snapshot-kai-sharing.yaml").read_text())["items"]
    config, _ = load_layers([])
    catalogs = read_catalogs([str(REPO / "config/catalogs/aws-us-east-1.csv")], config)
    return objects, list(catalogs.offerings), config


def test_the_gpu_sharing_worked_example_explains_with_the_plans_own_numbers() -> None:
    objects, offerings, config = kai_sharing_example()
    assert check_every_story(objects, offerings, config) >= 10


def test_a_half_gpu_pod_on_one_gpu_nodes_is_said_to_fit_two_a_node(
    make_config: Callable[..., Config],
) -> None:
    half = [
        pod(
            f"chat-{i}",
            cpu="500m",
            memory="2Gi",
            scheduler="kai-scheduler",
            annotations={"gpu-fraction": "0.5"},
            tolerations=[GPU_TOLERATION],
            message=INSUFFICIENT_GPU,
        )
        for i in range(3)
    ]
    offerings = [o for o in aws_offerings() if o.instance_type.startswith("g4dn")] + [
        offering("g4dn.2xlarge", 8, 32, 0.752, gpus=1, gpu_model="T4", gpu_memory_gib=16),
        offering(
            "g4dn.2xlarge", 8, 32, 0.2933, gpus=1, gpu_model="T4", gpu_memory_gib=16, capacity_type="spot"
        ),
    ]
    config = make_config(capacityTypes=["spot"], schedulerNames=["kai-scheduler"])
    result = explained(half, offerings, config)
    story = result.stories["default/chat-0"]
    verdicts = {c.offering.instance_type: (c.holds, c.per_pod) for c in story.candidates}
    # One T4 each: two half-GPU pods a node, however many cores the bigger size has.
    assert verdicts["g4dn.xlarge"][0] == verdicts["g4dn.2xlarge"][0] == 2
    assert verdicts["g4dn.xlarge"][1] == pytest.approx(0.2104 / 2)
    assert verdicts["g4dn.2xlarge"][1] == pytest.approx(0.2933 / 2)
    cheapest = min(story.candidates, key=lambda c: c.per_pod or 0.0)
    assert cheapest.chosen
    assert check_every_story(half, offerings, config) >= 2


def test_mig_instances_are_counted_per_node_and_per_gpu(make_config: Callable[..., Config]) -> None:
    pods = [mig_pod(f"infer-{i}") for i in range(9)]
    config = make_config(**A100_MIG)
    result = explained(pods, aws_offerings(), config)
    (launch,) = result.launch.launches
    assert launch.why is not None
    # Nine 1g.5gb instances of seven an A100: two of the node's eight GPUs, not none and not nine.
    assert (launch.offering.gpu_count, launch.why.gpus_used) == (8, 2)
    assert check_every_story(pods, aws_offerings(), config) >= 1


def test_time_slice_replicas_are_counted_per_physical_gpu(make_config: Callable[..., Config]) -> None:
    pods = [pod(f"infer-{i}", gpu=1, cpu="500m", memory="1Gi") for i in range(3)]
    config = make_config(gpuSkus=["T4"], **T4_SLICED)
    result = explained(pods, aws_offerings(), config)
    (launch,) = result.launch.launches
    assert launch.why is not None
    assert (launch.offering.gpu_count, launch.why.gpus_used) == (1, 1)
    chosen = next(c for c in result.stories["default/infer-0"].candidates if c.chosen)
    assert chosen.holds == 4  # one T4 of four time slices (its 4 vCPUs would take seven)
    assert check_every_story(pods, aws_offerings(), config) >= 1


def test_dra_devices_are_counted_per_node(make_config: Callable[..., Config]) -> None:
    h100 = template("two-h100", 2, 'device.attributes["gpu.nvidia.com"].productName.matches("H100")')
    objects = [DEVICE_CLASS, h100, *(trainer(f"trainer-{i}", "two-h100") for i in range(3))]
    config = make_config(**DRA)
    result = explained(objects, aws_offerings(), config)
    (launch,) = result.launch.launches
    assert launch.why is not None
    assert (launch.offering.gpu_count, launch.why.gpus_used) == (8, 6)
    chosen = next(c for c in result.stories["research/trainer-0"].candidates if c.chosen)
    assert chosen.holds == 4
    assert check_every_story(objects, aws_offerings(), config) >= 1


def test_pods_kept_apart_by_anti_affinity_are_said_to_hold_a_node_alone(
    make_config: Callable[..., Config],
) -> None:
    pods = [
        pod(
            f"web-{i}",
            cpu="1",
            memory="1Gi",
            labels={"app": "web"},
            pod_anti_affinity=[anti_affinity(HOSTNAME, {"app": "web"})],
        )
        for i in range(3)
    ]
    config = make_config()
    result = explained(pods, aws_offerings(), config)
    assert [len(la.pods) for la in result.launch.launches] == [1, 1, 1]
    chosen = next(c for c in result.stories["default/web-0"].candidates if c.chosen)
    assert chosen.holds == 1
    assert "anti-affinity" in chosen.verdict
    mode = next(line for line in why_lines(result.launch.launches) if line.startswith("  mode:"))
    assert "each of these nodes holds one pod" in mode and "shared by small pods" not in mode
    assert check_every_story(pods, aws_offerings(), config) >= 1


# --- a launch with no pods ------------------------------------------------------------------------------------


def test_the_idle_gpu_warning_of_a_launch_with_no_pods_says_so_instead_of_failing() -> None:
    from autoscaler.core.model import CapacityType
    from autoscaler.core.planning.decisions import Launch, LaunchMode

    big = offering("g6.12xlarge", 48, 192, 4.6016, gpus=4, gpu_model="L4", gpu_memory_gib=24)
    assert big.capacity_type == CapacityType("on-demand")
    why = LaunchWhy(mode_reason="it requests GPUs", gpus_used=0, idle_gpus=4)
    assert idle_warning(big, (), why) == (
        "a launch for no pods gets g6.12xlarge (on-demand) with 4 GPUs at $4.6016/h: 4 GPUs idle"
    )
    launch = Launch(big, (), LaunchMode("bin-selection"), (), "", why)
    assert idle_notice(launch).startswith("a launch for no pods gets g6.12xlarge")
