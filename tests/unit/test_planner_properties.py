"""Properties that hold for every plan, whatever the pods."""

import random
from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autoscaler.config import config_from_mapping
from autoscaler.demand import select
from autoscaler.planning import plan
from autoscaler.planning.offerings import OfferingIndex
from autoscaler.resources import Resources
from tests.builders import INSUFFICIENT_GPU, aws_offerings, node, pod, podgroup, snapshot

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


def build(specs, existing_gpus, limit):
    objs = []
    gangs = Counter()
    for i, s in enumerate(specs):
        annotations = {}
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
    config = {
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
)
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(scenario)
def test_every_planned_pod_fits_its_node(case):
    objs, config = build(*case)
    snap = snapshot(*objs)
    result = plan(snap, OFFERINGS, config, NOW)
    index = OfferingIndex(OFFERINGS, config, snap.daemonsets)
    pods = {p.key: p for p in snap.pods}
    for launch in result.launch.launches:
        total = Resources()
        for key in launch.pods:
            total = total + pods[key].requests + {"pods": 1000}
            eligible, _ = index.eligible(result.demand.constraints[key])
            assert launch.offering in eligible
        assert total.fits_in(index.allocatable(launch.offering))


@SETTINGS
@given(scenario)
def test_gpus_after_the_plan_never_exceed_the_limit(case):
    objs, config = build(*case)
    result = plan(snapshot(*objs), OFFERINGS, config, NOW)
    if config.cluster_gpu_limit is not None and result.launch.gpus_before <= config.cluster_gpu_limit:
        assert result.launch.gpus_after <= config.cluster_gpu_limit


@SETTINGS
@given(scenario)
def test_no_launch_could_be_replaced_by_a_cheaper_offering_holding_the_same_pods(case):
    objs, config = build(*case)
    snap = snapshot(*objs)
    result = plan(snap, OFFERINGS, config, NOW)
    index = OfferingIndex(OFFERINGS, config, snap.daemonsets)
    pods = {p.key: p for p in snap.pods}
    for launch in result.launch.launches:
        total = Resources()
        for key in launch.pods:
            total = total + pods[key].requests + {"pods": 1000}
        allowed = set.intersection(
            *(set(index.eligible(result.demand.constraints[k])[0]) for k in launch.pods)
        )
        if launch.mode == "bin-packing":
            allowed = {o for o in allowed if index.packing_node(o)}
        cheaper = [
            o
            for o in allowed
            if o.capacity_type == launch.offering.capacity_type
            and o.price < launch.offering.price
            and o.gpu_count <= launch.offering.gpu_count
            and total.fits_in(index.allocatable(o))
        ]
        assert cheaper == []


@SETTINGS
@given(scenario, st.randoms(use_true_random=False))
def test_the_plan_is_deterministic_whatever_the_input_order(case, rnd: random.Random):
    objs, config = build(*case)
    first = plan(snapshot(*objs), OFFERINGS, config, NOW)
    shuffled = list(objs)
    rnd.shuffle(shuffled)
    second = plan(snapshot(*shuffled), list(reversed(OFFERINGS)), config, NOW)
    assert first.launch == second.launch


@SETTINGS
@given(scenario)
def test_counted_ignored_and_unplaced_account_for_every_pending_pod_once(case):
    objs, config = build(*case)
    snap = snapshot(*objs)
    result = plan(snap, OFFERINGS, config, NOW)
    launched = [k for la in result.launch.launches for k in la.pods]
    accounted = launched + [i.pod for i in result.ignored] + [u.pod for u in result.launch.unplaced]
    pending = [p.key for p in snap.pods if p.phase == "Pending"]
    assert sorted(accounted) == sorted(pending)
    assert len(select(snap, config).counted) == len(launched) + len(result.launch.unplaced) + len(
        result.launch.absorbed
    )
