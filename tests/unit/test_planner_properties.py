"""Properties that hold for every plan, whatever the pods."""

from __future__ import annotations

import random
from collections import Counter
from typing import TYPE_CHECKING, Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autoscaler.config.options import config_from_mapping
from autoscaler.core.demand import select
from autoscaler.core.planning.offerings import OfferingIndex
from autoscaler.core.planning.planner import PlanInput, plan
from autoscaler.core.resources import Resources
from tests.builders import INSUFFICIENT_GPU, T0, aws_offerings, node, pod, podgroup, snapshot

if TYPE_CHECKING:
    from autoscaler.config.options import Config

NOW = 1_795_168_800.0
OFFERINGS = aws_offerings(("us-east-1a", "us-east-1b"))

pod_spec = st.fixed_dictionaries(
    {
        "cpu": st.sampled_from(["100m", "500m", "1", "2", "4", "7", "30"]),
        "memory": st.sampled_from(["256Mi", "1Gi", "4Gi", "16Gi", "60Gi"]),
        "gpu": st.sampled_from([0, 0, 0, 1, 1, 2, 4, 8]),
        "sku": st.sampled_from(["", "", "T4", "L4", "A100", "H100"]),
        "offerings": st.sampled_from(["", "spot", "spot,on-demand", "on-demand"]),
        "gang": st.sampled_from(["", "", "", "pg-a", "pg-b"]),
        "count": st.integers(min_value=1, max_value=6),
    }
)


def build(
    specs: list[dict[str, Any]], existing_gpus: int, limit: int | None, extra: str = ""
) -> tuple[list[dict[str, Any]], Config]:
    objs: list[dict[str, Any]] = []
    gangs: Counter[str] = Counter()
    for i, s in enumerate(specs):
        annotations: dict[str, str] = {}
        if s["sku"] and s["gpu"]:
            annotations["tidal.dev/instance-gpu-skus"] = s["sku"]
        if s["offerings"]:
            annotations["tidal.dev/instance-offerings"] = s["offerings"]
        if s["gang"]:
            annotations["pod-group-name"] = s["gang"]
            gangs[s["gang"]] += s["count"]
        for j in range(s["count"]):
            objs.append(
                pod(
                    f"w{i}-{j}",
                    cpu=s["cpu"],
                    memory=s["memory"],
                    gpu=s["gpu"],
                    annotations=annotations,
                    message=INSUFFICIENT_GPU,
                    created=f"2026-11-20T10:{i % 60:02d}:00Z",
                )
            )
    for name, n in gangs.items():
        objs.append(podgroup(name, min_member=n, queue="prod"))
    if existing_gpus:
        objs.append(node("gpu-old", instance_type="g5.12xlarge", cpu="48", memory="192Gi", gpu=existing_gpus))
    if extra in ("launching", "both"):
        # A node tidal launched that has not become Ready: its GPUs count before the device plugin shows them.
        objs.append(
            node(
                "gpu-new",
                instance_type="g6.12xlarge",
                cpu="48",
                memory="192Gi",
                managed=True,
                ready=False,
                gpu_label=4,
            )
        )
    if extra in ("idle", "both"):
        # An empty node tidal launched, unneeded for an hour: scale-down removes it.
        objs.append(
            node("cpu-idle", managed=True, annotations={"tidal.dev/unneeded-since": T0.replace("10:", "09:")})
        )
    config: dict[str, Any] = {
        "cloud": "aws",
        "region": "us-east-1",
        "zones": ["us-east-1a", "us-east-1b"],
        "capacityTypes": ["spot", "on-demand"],
    }
    if limit is not None:
        config["clusterGPULimit"] = limit
    return objs, config_from_mapping(config)


scenario = st.tuples(
    st.lists(pod_spec, min_size=1, max_size=8),
    st.sampled_from([0, 0, 4]),
    st.sampled_from([None, 0, 4, 8, 16, 64]),
    st.sampled_from(["", "", "launching", "idle", "both"]),
)
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# What the scenario strategy draws: pod specs, GPUs already running, the cluster GPU limit, extra nodes.
Case = tuple[list[dict[str, Any]], int, int | None, str]


@SETTINGS
@given(scenario)
def test_every_planned_pod_fits_its_node(case: Case) -> None:
    objs, config = build(*case)
    snap = snapshot(*objs)
    result = plan(PlanInput(snap, OFFERINGS, config, NOW))
    index = OfferingIndex(OFFERINGS, config, snap.daemonsets)
    pods = {p.key: p for p in snap.pods}
    for launch in result.launch.launches:
        total = Resources()
        for key in launch.pods:
            total = total + pods[key].requests + {"pods": 1000}
            eligible, _ = index.eligible(result.demand.constraints[key])
            assert launch.offering in eligible
        assert total.fits_in(index.allocatable(launch.offering))


def node_gpus(obj: dict[str, Any]) -> int:
    """GPUs of a Node object as written: its capacity, or the GPU-count label of a node still starting."""
    capacity = int(obj["status"]["capacity"].get("nvidia.com/gpu", "0"))
    return max(capacity, int(obj["metadata"]["labels"].get("tidal.dev/gpu-count", "0")))


@SETTINGS
@given(scenario)
def test_gpus_after_the_plan_never_exceed_the_limit(case: Case) -> None:
    objs, config = build(*case)
    result = plan(PlanInput(snapshot(*objs), OFFERINGS, config, NOW))
    # Counted from the objects themselves, not from the plan's own gpus_before/gpus_after.
    existing = sum(node_gpus(o) for o in objs if o["kind"] == "Node")
    launched = sum(la.offering.gpu_count for la in result.launch.launches)
    assert result.launch.gpus_after == existing + launched
    if config.cluster_gpu_limit is not None:
        if existing >= config.cluster_gpu_limit:
            assert launched == 0
        else:
            assert existing + launched <= config.cluster_gpu_limit


@SETTINGS
@given(scenario)
def test_no_launch_could_be_replaced_by_a_cheaper_offering_holding_the_same_pods(case: Case) -> None:
    objs, config = build(*case)
    snap = snapshot(*objs)
    result = plan(PlanInput(snap, OFFERINGS, config, NOW))
    index = OfferingIndex(OFFERINGS, config, snap.daemonsets)
    pods = {p.key: p for p in snap.pods}
    for launch in result.launch.launches:
        total = Resources()
        for key in launch.pods:
            total = total + pods[key].requests + {"pods": 1000}
        # Every offering all of the node's pods may get, in any capacity type they allow (spot and on-demand).
        allowed = set.intersection(
            *(set(index.eligible(result.demand.constraints[k])[0]) for k in launch.pods)
        )
        if launch.mode == "bin-packing":
            allowed = {o for o in allowed if index.packing_node(o)}
        assert {o.capacity_type for o in allowed} >= {launch.offering.capacity_type}
        cheaper = [
            o.key
            for o in allowed
            if o.price < launch.offering.price
            and o.gpu_count <= launch.offering.gpu_count  # never more GPUs against the limit
            and total.fits_in(index.allocatable(o))
        ]
        assert cheaper == [], f"{launch.offering.key} at {launch.offering.price} holds {launch.pods}"


@SETTINGS
@given(scenario, st.randoms(use_true_random=False))
def test_the_plan_is_deterministic_whatever_the_input_order(case: Case, rnd: random.Random) -> None:
    objs, config = build(*case)
    first = plan(PlanInput(snapshot(*objs), OFFERINGS, config, NOW))
    shuffled = list(objs)
    rnd.shuffle(shuffled)
    second = plan(PlanInput(snapshot(*shuffled), list(reversed(OFFERINGS)), config, NOW))
    assert first.launch == second.launch  # launches, unplaced pods with reasons, GPUs before and after
    assert first.ignored == second.ignored
    assert first.removal == second.removal  # removals, blocked nodes, unneeded-since times


@SETTINGS
@given(scenario)
def test_counted_ignored_and_unplaced_account_for_every_pending_pod_once(case: Case) -> None:
    objs, config = build(*case)
    snap = snapshot(*objs)
    result = plan(PlanInput(snap, OFFERINGS, config, NOW))
    launched = [k for la in result.launch.launches for k in la.pods]
    accounted = launched + [i.pod for i in result.ignored] + [u.pod for u in result.launch.unplaced]
    pending = [p.key for p in snap.pods if p.phase == "Pending"]
    assert sorted(accounted) == sorted(pending)
    assert len(select(snap, config).counted) == len(launched) + len(result.launch.unplaced) + len(
        result.launch.absorbed
    )
