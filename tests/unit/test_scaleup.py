"""Scale-up: exact plans for small, realistic cases."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from autoscaler.core.demand import Reason
from autoscaler.core.planning.decisions import Launching
from autoscaler.core.planning.planner import PlanInput, plan
from tests.builders import INSUFFICIENT_GPU, aws_offerings, daemonset, node, offering, pod, podgroup, snapshot

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from autoscaler.config.options import Config
    from autoscaler.core.offering import Offering
    from autoscaler.core.planning.planner import Plan

NOW = 1_795_168_800.0  # 2026-11-20T10:00:00Z


def launched(result: Plan) -> Counter[str]:
    return Counter(
        f"{la.offering.instance_type}/{la.offering.capacity_type}" for la in result.launch.launches
    )


def gpu_pod(name: str, gpus: int = 1, **kw: Any) -> dict[str, Any]:
    return pod(name, cpu="2", memory="8Gi", gpu=gpus, message=INSUFFICIENT_GPU, **kw)


def run(
    make_config: Callable[..., Config],
    *objs: dict[str, Any],
    offerings: list[Offering] | None = None,
    **cfg: Any,
) -> Plan:
    return plan(PlanInput(snapshot(*objs), offerings or aws_offerings(), make_config(**cfg), NOW))


def test_one_gpu_pod_gets_the_cheapest_gpu_node(make_config: Callable[..., Config]) -> None:
    result = run(make_config, gpu_pod("infer-1"))
    assert launched(result) == {"g4dn.xlarge/on-demand": 1}
    assert result.launch.launches[0].pods == ("default/infer-1",)
    assert result.launch.cost_per_hour == 0.526


def test_a_pod_that_allows_spot_gets_spot(make_config: Callable[..., Config]) -> None:
    result = run(
        make_config, gpu_pod("infer-1", annotations={"tidal.dev/instance-offerings": "spot,on-demand"})
    )
    assert launched(result) == {"g4dn.xlarge/spot": 1}


def test_luna_annotation_spellings_are_honoured(make_config: Callable[..., Config]) -> None:
    result = run(make_config, gpu_pod("infer-1", annotations={"node.elotl.co/instance-gpu-skus": "L4"}))
    assert launched(result) == {"g6.xlarge/on-demand": 1}


def test_spot_falls_back_to_on_demand_only_when_the_pod_allows_it(make_config: Callable[..., Config]) -> None:
    od_only = [o for o in aws_offerings() if o.capacity_type == "on-demand"]
    both = gpu_pod("a-1", annotations={"tidal.dev/instance-offerings": "spot,on-demand"})
    spot_only = gpu_pod("b-1", annotations={"tidal.dev/instance-offerings": "spot"})
    result = run(make_config, both, spot_only, offerings=od_only)
    assert launched(result) == {"g4dn.xlarge/on-demand": 1}
    assert [(u.pod, u.reason) for u in result.launch.unplaced] == [
        ("default/b-1", "capacity type not in spot")
    ]


def test_identical_gpu_pods_share_a_node_when_only_large_nodes_have_that_gpu(
    make_config: Callable[..., Config],
) -> None:
    pods = [gpu_pod(f"train-{i}", annotations={"tidal.dev/instance-gpu-skus": "H100"}) for i in range(8)]
    result = run(make_config, *pods)
    assert launched(result) == {"p5.48xlarge/on-demand": 1}
    assert len(result.launch.launches[0].pods) == 8


def test_gpu_pods_get_dedicated_right_sized_nodes_when_that_is_cheapest(
    make_config: Callable[..., Config],
) -> None:
    result = run(make_config, *[gpu_pod(f"infer-{i}") for i in range(3)])
    assert launched(result) == {"g4dn.xlarge/on-demand": 3}


def test_small_pods_are_bin_packed_onto_nodes_of_the_configured_size(
    make_config: Callable[..., Config],
) -> None:
    pods = [pod(f"web-{i}", cpu="500m", memory="1Gi") for i in range(20)]
    result = run(make_config, *pods)
    # binPackingNodeCpu 6 / binPackingNodeMemory 24Gi: m6i.2xlarge is the cheapest; 15 pods of 500m fit one.
    assert launched(result) == {"m6i.2xlarge/on-demand": 2}
    assert sorted(len(la.pods) for la in result.launch.launches) == [5, 15]
    assert {la.mode for la in result.launch.launches} == {"bin-packing"}


def test_many_small_pods_go_to_the_packing_size_with_the_lowest_price_per_pod(
    make_config: Callable[..., Config],
) -> None:
    pods = [pod(f"web-{i}", cpu="1", memory="2Gi") for i in range(60)]
    result = run(make_config, *pods)
    # Kubelet and system reservations take a fixed share of every node, so one m6i.4xlarge holds 15 of
    # these pods for the price of two m6i.2xlarge, which hold 7 each.
    assert launched(result) == {"m6i.4xlarge/on-demand": 4}
    assert result.launch.cost_per_hour == 3.072


def test_the_gpu_limit_counts_existing_nodes_and_is_never_exceeded(
    make_config: Callable[..., Config],
) -> None:
    existing = node("gpu-a", instance_type="g4dn.xlarge", cpu="4", memory="16Gi", gpu=1)
    busy = pod("old-1", gpu=1, cpu="2", memory="8Gi", node_name="gpu-a", phase="Running", message=None)
    pods = [gpu_pod(f"infer-{i}", created=f"2026-11-20T10:0{i}:00Z") for i in range(3)]
    result = run(make_config, existing, busy, *pods, clusterGPULimit=2)
    assert launched(result) == {"g4dn.xlarge/on-demand": 1}
    assert result.launch.gpus_after == 2
    assert [u.pod for u in result.launch.unplaced] == ["default/infer-1", "default/infer-2"]
    assert (
        result.launch.unplaced[0].reason == "clusterGPULimit 2 reached (2 GPUs in use, launching or planned)"
    )


def test_a_gang_that_does_not_fit_the_limit_gets_nothing(make_config: Callable[..., Config]) -> None:
    members = [gpu_pod(f"llama-{i}", annotations={"pod-group-name": "pg-llama"}) for i in range(4)]
    result = run(make_config, podgroup("pg-llama", min_member=4, queue="prod"), *members, clusterGPULimit=3)
    assert result.launch.launches == ()
    assert len(result.launch.unplaced) == 4
    assert result.launch.unplaced[0].reason.startswith(
        "gang default/pg-llama (4 pods) cannot be placed whole"
    )


def test_a_gang_that_fits_gets_all_its_nodes(make_config: Callable[..., Config]) -> None:
    members = [gpu_pod(f"llama-{i}", annotations={"pod-group-name": "pg-llama"}) for i in range(4)]
    result = run(make_config, podgroup("pg-llama", min_member=4, queue="prod"), *members, clusterGPULimit=4)
    assert sum(len(la.pods) for la in result.launch.launches) == 4
    assert {la.gang for la in result.launch.launches} == {"default/pg-llama"}
    assert result.launch.gpus_after == 4


def test_no_offering_big_enough_is_named_with_the_resource(make_config: Callable[..., Config]) -> None:
    result = run(make_config, gpu_pod("huge-1", gpus=12))
    assert [(u.pod, u.reason) for u in result.launch.unplaced] == [
        ("default/huge-1", "no offering fits 12 nvidia.com/gpu")
    ]


def test_a_gpu_model_nobody_offers_is_named(make_config: Callable[..., Config]) -> None:
    result = run(make_config, gpu_pod("x-1", annotations={"tidal.dev/instance-gpu-skus": "B200"}))
    assert result.launch.unplaced[0].reason == "no offering with GPU model B200"


def test_a_pending_pod_that_fits_free_room_on_a_node_causes_no_launch(
    make_config: Callable[..., Config],
) -> None:
    existing = node("cpu-a", cpu="8", memory="32Gi")
    result = run(make_config, existing, pod("web-1"))
    assert result.launch.launches == ()
    assert [(i.pod, i.reason, i.node) for i in result.launch.absorbed] == [
        ("default/web-1", Reason.FITS_EXISTING, "cpu-a")
    ]


def test_a_managed_node_still_starting_absorbs_the_pods_it_was_launched_for(
    make_config: Callable[..., Config],
) -> None:
    starting = node(
        "gpu-new", instance_type="g4dn.xlarge", cpu="4", memory="16Gi", managed=True, ready=False, gpu_label=1
    )
    result = run(make_config, starting, gpu_pod("infer-1"))
    assert result.launch.launches == ()
    assert result.launch.absorbed[0].detail == "fits free capacity on launching node gpu-new"


def test_a_cordoned_node_absorbs_nothing(make_config: Callable[..., Config]) -> None:
    result = run(make_config, node("cpu-a", unschedulable=True), pod("web-1"))
    assert len(result.launch.launches) == 1


def test_max_nodes_caps_the_number_of_launches(make_config: Callable[..., Config]) -> None:
    result = run(make_config, *[gpu_pod(f"infer-{i}") for i in range(3)], maxNodes=2)
    assert len(result.launch.launches) == 2
    assert result.launch.unplaced[0].reason == "maxNodes 2 reached"


def test_a_node_selector_picks_the_zone(make_config: Callable[..., Config]) -> None:
    pinned = gpu_pod("infer-1", node_selector={"topology.kubernetes.io/zone": "us-east-1b"})
    result = run(
        make_config,
        pinned,
        offerings=aws_offerings(("us-east-1a", "us-east-1b")),
        zones=["us-east-1a", "us-east-1b"],
    )
    assert [la.offering.zone for la in result.launch.launches] == ["us-east-1b"]


def test_required_affinity_on_instance_family_is_respected(make_config: Callable[..., Config]) -> None:
    terms = [
        [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["g6.xlarge", "g5.xlarge"]}]
    ]
    result = run(make_config, gpu_pod("infer-1", affinity_terms=terms))
    assert launched(result) == {"g6.xlarge/on-demand": 1}


def test_configured_node_taints_require_a_toleration(make_config: Callable[..., Config]) -> None:
    taint = ["dedicated=gpu:NoSchedule"]
    tolerated = gpu_pod(
        "a-1", tolerations=[{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]
    )
    result = run(make_config, tolerated, gpu_pod("b-1"), nodeTaints=taint)
    assert [la.pods for la in result.launch.launches] == [("default/a-1",)]
    assert result.launch.unplaced[0].reason == "no offering whose node taints the pod tolerates"


def test_partial_gpu_sizes_go_only_to_pods_that_ask_for_them(make_config: Callable[..., Config]) -> None:
    offerings = [*aws_offerings(), offering("g6f.large", 2, 8, 0.2, gpus=1, gpu_model="L4", fraction=0.125)]
    plain = pod("a-1", cpu="1", memory="2Gi", gpu=1)
    asks = pod("b-1", cpu="1", memory="2Gi", gpu=1, annotations={"tidal.dev/instance-partial-gpu": "true"})
    result = run(make_config, plain, asks, offerings=offerings)
    by_pod = {la.pods[0]: la.offering.instance_type for la in result.launch.launches}
    assert by_pod == {"default/a-1": "g4dn.xlarge", "default/b-1": "g6f.large"}


def test_daemonset_overhead_is_subtracted_from_new_nodes(make_config: Callable[..., Config]) -> None:
    pods = [pod(f"web-{i}", cpu="500m", memory="1Gi") for i in range(15)]
    without = run(make_config, *pods)
    with_ds = run(make_config, daemonset("node-exporter", cpu="500m", memory="256Mi"), *pods)
    assert len(without.launch.launches) == 1
    assert len(with_ds.launch.launches) == 2


def test_configured_daemonset_overhead_replaces_the_derived_one(make_config: Callable[..., Config]) -> None:
    pods = [pod(f"web-{i}", cpu="500m", memory="1Gi") for i in range(15)]
    exporter = daemonset("node-exporter", cpu="500m", memory="256Mi")
    derived = run(make_config, exporter, *pods)
    configured = run(make_config, exporter, *pods, daemonSetOverhead={"cpu": "0"})
    assert len(derived.launch.launches) == 2
    assert len(configured.launch.launches) == 1


def test_each_launch_carries_fallbacks_for_capacity_errors_cheapest_first(
    make_config: Callable[..., Config],
) -> None:
    result = run(
        make_config,
        gpu_pod("infer-1"),
        offerings=aws_offerings(("us-east-1a", "us-east-1b")),
        zones=["us-east-1a", "us-east-1b"],
    )
    launch = result.launch.launches[0]
    assert launch.offering.key == "g4dn.xlarge/us-east-1a/on-demand"
    assert [o.key for o in launch.alternatives[:3]] == [
        "g4dn.xlarge/us-east-1b/on-demand",
        "g6.xlarge/us-east-1a/on-demand",
        "g6.xlarge/us-east-1b/on-demand",
    ]
    assert all(o.gpu_count <= launch.offering.gpu_count for o in launch.alternatives)


def test_max_node_cost_per_hour_removes_expensive_offerings(make_config: Callable[..., Config]) -> None:
    result = run(make_config, gpu_pod("big-1", gpus=8), maxNodeCostPerHour=30)
    assert launched(result) == {"p4d.24xlarge/on-demand": 1}


def test_config_wide_family_filters_do_not_stop_small_pods_sharing_nodes(
    make_config: Callable[..., Config],
) -> None:
    pods = [pod(f"web-{i}", cpu="500m", memory="1Gi") for i in range(6)]
    result = run(make_config, *pods, instanceFamilyExclusions=["t2"])
    assert launched(result) == {"m6i.2xlarge/on-demand": 1}
    assert result.launch.launches[0].mode == "bin-packing"


def _aws_catalog(config: Config) -> list[Offering]:
    from autoscaler.runtime.catalog import read_catalog_csv
    from providers.aws import offering_template

    return read_catalog_csv(
        "config/catalogs/aws-us-east-1.csv", cloud="aws", region="us-east-1", template=offering_template
    )


def test_fallbacks_never_cost_more_than_max_fallback_price_ratio_times_the_chosen_offering(
    make_config: Callable[..., Config],
) -> None:
    config = make_config(zones=[])
    result = plan(PlanInput(snapshot(gpu_pod("infer-1")), _aws_catalog(config), config, NOW))
    launch = result.launch.launches[0]
    assert (launch.offering.instance_type, launch.offering.capacity_type) == ("g4dn.xlarge", "on-demand")
    assert launch.alternatives
    assert max(o.price for o in launch.alternatives) <= 2.0 * launch.offering.price
    assert "p5.4xlarge" not in {o.instance_type for o in launch.alternatives}


def test_without_a_fallback_price_ratio_a_t4_pod_may_fall_back_to_an_h100(
    make_config: Callable[..., Config],
) -> None:
    config = make_config(zones=[], maxFallbackPriceRatio=None)
    result = plan(PlanInput(snapshot(gpu_pod("infer-1")), _aws_catalog(config), config, NOW))
    launch = result.launch.launches[0]
    assert "p5.4xlarge" in {o.instance_type for o in launch.alternatives}


def test_a_lower_fallback_price_ratio_keeps_only_the_near_priced_fallbacks(
    make_config: Callable[..., Config],
) -> None:
    result = run(
        make_config,
        gpu_pod("infer-1"),
        offerings=aws_offerings(("us-east-1a", "us-east-1b")),
        zones=["us-east-1a", "us-east-1b"],
        maxFallbackPriceRatio=1.6,
    )
    launch = result.launch.launches[0]
    # g4dn.xlarge $0.526/h: g6.xlarge at $0.8048/h is within 1.6x ($0.8416/h), g5.xlarge at $1.006/h is not.
    assert [o.key for o in launch.alternatives] == [
        "g4dn.xlarge/us-east-1b/on-demand",
        "g6.xlarge/us-east-1a/on-demand",
        "g6.xlarge/us-east-1b/on-demand",
    ]


def test_a_node_coming_up_takes_the_first_of_the_pods_it_was_launched_for_that_fit_and_no_more(
    make_config: Callable[..., Config],
) -> None:
    xlarge = next(
        o for o in aws_offerings() if o.instance_type == "m6i.xlarge" and o.capacity_type == "on-demand"
    )
    pods = snapshot(*[pod(f"web-{i}", cpu="1500m", memory="2Gi") for i in range(1, 5)])
    coming = Launching("launch-a", xlarge)
    result = plan(
        PlanInput(
            pods,
            aws_offerings(),
            make_config(),
            NOW,
            launching=[coming],
            launched_for={p.key: "launch-a" for p in pods.pods},
        )
    )
    # 4 vCPU hold two pods of 1.5 CPU (three would need 4.5): the first two in order, the others are launched for.
    assert [(a.pod, a.node) for a in result.launch.absorbed] == [
        ("default/web-1", "launch-a"),
        ("default/web-2", "launch-a"),
    ]
    assert sorted(p for la in result.launch.launches for p in la.pods) == ["default/web-3", "default/web-4"]
