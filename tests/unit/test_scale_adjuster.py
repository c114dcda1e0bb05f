"""KAI's node-scale-adjuster as the baselines run with it: pending GPU shares summed and rounded up per
batch into scaling pods of whole GPUs, removed once their pods are placed, with a cool-down after each
removal; the baselines buy GPUs for those scaling pods and see the sharing pods as CPU pods."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import pytest

from autoscaler.core.gpu.kai_pods import SCALE_ADJUST_NAMESPACE
from autoscaler.core.gpu.share import GpuShare, ShareSource
from autoscaler.core.model import Condition, Pod, Snapshot, Toleration
from autoscaler.core.planning.planner import PlanInput, plan
from autoscaler.core.resources import NVIDIA_GPU, Resources
from autoscaler.sim.baselines import planner_for
from autoscaler.sim.configuration import build_config
from autoscaler.sim.engine import Simulation
from autoscaler.sim.run import DEFAULT_CATALOG, _provider
from autoscaler.sim.scale_adjuster import COOL_DOWN, ScaleAdjuster, batch_gpus, scaling_pod
from autoscaler.sim.scenario import parse_scenario
from tests.builders import aws_offerings

if TYPE_CHECKING:
    from collections.abc import Callable

    from autoscaler.config.options import Config

NOW = 1_795_168_800.0


def fraction(portion: float, devices: int = 1) -> GpuShare:
    return GpuShare(ShareSource.FRACTION, "main", devices=devices, portion=portion)


def memory(mib: int) -> GpuShare:
    return GpuShare(ShareSource.MEMORY, "main", memory_mib=mib)


def pending_share(name: str, portion: float = 0.5, *, cpu: int = 2000) -> Pod:
    """A pod KAI could not place yet, asking for ``portion`` of a GPU."""
    return Pod(
        namespace="team",
        name=name,
        uid=name,
        annotations={"gpu-fraction": f"{portion:g}"},
        scheduler_name="kai-scheduler",
        requests=Resources({"cpu": cpu, "memory": 4 * 2**30 * 1000}),
        tolerations=(Toleration("nvidia.com/gpu", "Exists", "", "NoSchedule"),),
        scheduled=Condition("False", "Unschedulable", "No node in the default node-pool has GPU resources"),
        gpu_share=fraction(portion),
    )


@pytest.mark.parametrize(
    ("shares", "gpus"),
    [
        ([fraction(0.5), fraction(0.5)], 1),
        ([fraction(0.46)] * 3, 2),  # 1.38 rounded up
        ([fraction(0.125)] * 8, 2),  # each counts 0.13, as KAI rounds it to hundredths: 1.04
        ([fraction(0.3, devices=2)], 1),
        ([memory(2000)] * 10, 1),  # a gpu-memory pod counts 0.1 GPU
        ([], 0),
    ],
)
def test_a_batch_of_pending_shares_asks_for_their_sum_rounded_up(shares: list[GpuShare], gpus: int) -> None:
    assert batch_gpus(shares) == gpus


def test_two_pending_half_gpu_pods_make_one_scaling_pod_of_one_whole_gpu() -> None:
    pods = [pending_share("a"), pending_share("b")]
    scaling: dict[str, Pod] = {}
    assert ScaleAdjuster().adjust(pods, scaling, 0.0)
    [proxy] = scaling.values()
    assert proxy.namespace == SCALE_ADJUST_NAMESPACE and proxy.name == "team-a"
    assert proxy.requests.get(NVIDIA_GPU) == 1000 and proxy.requests.cpu == pods[0].requests.cpu
    assert proxy.tolerations == pods[0].tolerations
    assert proxy.labels["shared-gpu-pod-name"] == "a" and proxy.pending


def test_three_half_gpu_pods_get_two_scaling_pods_the_first_two_in_order() -> None:
    pods = [pending_share("a"), pending_share("b"), pending_share("c")]
    scaling: dict[str, Pod] = {}
    ScaleAdjuster().adjust(pods, scaling, 0.0)
    assert sorted(p.name for p in scaling.values()) == ["team-a", "team-b"]  # 1.5 GPUs -> 2, first come


def test_a_scaling_pod_goes_once_its_pod_is_placed_and_none_is_made_during_the_cool_down() -> None:
    a, b = pending_share("a", 0.75), pending_share("b", 0.75)
    scaling: dict[str, Pod] = {}
    adjuster = ScaleAdjuster()
    adjuster.adjust([a, b], scaling, 0.0)
    assert sorted(scaling) == [f"{SCALE_ADJUST_NAMESPACE}/team-a", f"{SCALE_ADJUST_NAMESPACE}/team-b"]
    placed = replace(a, node_name="gpu-1", phase="Running", scheduled=Condition("True"))
    c = pending_share("c", 0.75)
    adjuster.adjust([placed, b, c], scaling, 100.0)
    assert sorted(scaling) == [f"{SCALE_ADJUST_NAMESPACE}/team-b"]  # a's went; c waits out the cool-down
    adjuster.adjust([placed, b, c], scaling, 100.0 + COOL_DOWN)
    assert f"{SCALE_ADJUST_NAMESPACE}/team-c" in scaling


def test_a_scaling_pod_that_ran_is_deleted() -> None:
    a = pending_share("a")
    scaling = {scaling_pod(a, 0.0).key: replace(scaling_pod(a, 0.0), phase="Succeeded", node_name="gpu-1")}
    adjuster = ScaleAdjuster()
    adjuster.adjust([a], scaling, 10.0)
    assert scaling == {} and adjuster.wakeup(10.0) == 10.0 + COOL_DOWN


@pytest.mark.parametrize("policy", ["ca-like", "karpenter-like"])
def test_a_baseline_sees_share_pods_as_cpu_pods_and_buys_a_gpu_only_for_a_scaling_pod(
    make_config: Callable[..., Config], policy: str
) -> None:
    pods = [pending_share("a", cpu=500), pending_share("b", cpu=500)]
    planner = planner_for(policy)
    assert planner is not None
    alone = planner(PlanInput(Snapshot(pods=tuple(pods)), aws_offerings(), make_config(), NOW))
    assert alone.launch.launches and all(la.offering.gpu_count == 0 for la in alone.launch.launches)

    scaling: dict[str, Pod] = {}
    ScaleAdjuster().adjust(pods, scaling, 0.0)
    result = planner(
        PlanInput(Snapshot(pods=(*pods, *scaling.values())), aws_offerings(), make_config(), NOW)
    )
    [proxy] = scaling
    [gpu_node] = [la for la in result.launch.launches if la.offering.gpu_count]
    assert proxy in gpu_node.pods and gpu_node.offering.gpu_count == 1


def test_tidal_plans_the_shares_itself_and_never_for_the_scaling_pod(
    make_config: Callable[..., Config],
) -> None:
    pods = [pending_share("a"), pending_share("b"), pending_share("c")]
    scaling: dict[str, Pod] = {}
    ScaleAdjuster().adjust(pods, scaling, 0.0)
    result = plan(PlanInput(Snapshot(pods=(*pods, *scaling.values())), aws_offerings(), make_config(), NOW))
    launched = {k for la in result.launch.launches for k in la.pods}
    assert launched == {"team/a", "team/b", "team/c"}


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
            "pods": 6,
            "gpuFraction": 0.5,
            "cpu": "1",
            "memory": "2Gi",
            "duration": "1h",
        }
    ],
}


@pytest.mark.parametrize("policy", ["ca-like", "karpenter-like"])
def test_a_baseline_serves_share_pods_through_the_scale_adjusters_scaling_pods(policy: str) -> None:
    scenario = parse_scenario(SHARE_DAY, "share-day.yaml")
    config = build_config(scenario, {}, catalog=str(DEFAULT_CATALOG), cloud="", region="")
    sim = Simulation(scenario, config, _provider, policy=policy, planner=planner_for(policy))
    rec = sim.run()
    assert sim.adjuster is not None and sim.adjuster.created >= 3  # three GPUs' worth of halves
    assert all(sp.started is not None for sp in rec.pods)
    assert not sim.cluster.scaling  # every scaling pod went once its pod was placed


def test_tidal_runs_without_a_scale_adjuster() -> None:
    scenario = parse_scenario(SHARE_DAY, "share-day.yaml")
    config = build_config(scenario, {}, catalog=str(DEFAULT_CATALOG), cloud="", region="")
    sim = Simulation(scenario, config, _provider)
    rec = sim.run()
    assert sim.adjuster is None and all(sp.started is not None for sp in rec.pods)
