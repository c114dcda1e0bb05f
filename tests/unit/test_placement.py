"""The placement engine in plans: where pods go when other pods, launching nodes and new nodes are involved."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from autoscaler.core.placement.reasons import Filter
from autoscaler.core.planning.planner import PlanInput, plan
from autoscaler.runtime.fleet import Fleet
from tests.builders import (
    INSUFFICIENT_GPU,
    anti_affinity,
    aws_offerings,
    daemonset,
    node,
    pod,
    snapshot,
    zone_spread,
)

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from autoscaler.config.options import Config
    from autoscaler.core.offering import Offering
    from autoscaler.core.planning.planner import Plan

NOW = 1_795_168_800.0  # 2026-11-20T10:00:00Z
HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
ANTI_AFFINITY_REFUSED = (
    "0/1 nodes are available: 1 node(s) didn't match pod anti-affinity rules. preemption: 0/1 nodes are "
    "available: 1 No preemption victims found for incoming pod."
)


def run(
    make_config: Callable[..., Config],
    *objs: dict[str, Any],
    offerings: list[Offering] | None = None,
    **cfg: Any,
) -> Plan:
    return plan(PlanInput(snapshot(*objs), offerings or aws_offerings(), make_config(**cfg), NOW))


def launched(result: Plan) -> Counter[str]:
    return Counter(
        f"{la.offering.instance_type}/{la.offering.capacity_type}" for la in result.launch.launches
    )


def test_a_pod_whose_anti_affinity_refuses_the_node_with_room_gets_a_new_node(
    make_config: Callable[..., Config],
) -> None:
    running = pod("db-0", labels={"app": "db"}, node_name="node-a", phase="Running", message=None)
    pending = pod(
        "db-1",
        labels={"app": "db"},
        message=ANTI_AFFINITY_REFUSED,
        pod_anti_affinity=[anti_affinity(HOSTNAME, {"app": "db"})],
    )
    result = run(make_config, node("node-a"), running, pending)
    assert result.launch.absorbed == ()
    assert [la.pods for la in result.launch.launches] == [("default/db-1",)]


def test_pods_that_differ_only_in_an_irrelevant_toleration_share_a_new_node(
    make_config: Callable[..., Config],
) -> None:
    tolerant = pod("web-2", tolerations=[{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}])
    result = run(make_config, pod("web-0"), pod("web-1"), tolerant)
    assert launched(result) == {"m6i.2xlarge/on-demand": 1}
    assert result.launch.cost_per_hour == 0.384
    assert sorted(result.launch.launches[0].pods) == ["default/web-0", "default/web-1", "default/web-2"]


def test_a_launching_node_holds_what_it_will_hold_once_its_daemonsets_run(
    make_config: Callable[..., Config],
) -> None:
    config = make_config()
    m6i = next(o for o in aws_offerings() if o.key == "m6i.2xlarge/us-east-1a/on-demand")
    fleet = Fleet(config)
    fleet.record_launch("token-1", m6i, [], None, NOW)
    # m6i.2xlarge leaves 7,910m cpu after EKS's reservation; the DaemonSet takes 1,000m of it: six 1-cpu pods fit.
    pods = [pod(f"web-{i}", cpu="1", memory="1Gi") for i in range(7)]
    snap = snapshot(daemonset("node-exporter", cpu="1", memory="100Mi"), *pods)
    result = plan(
        PlanInput(
            snap,
            aws_offerings(),
            config,
            NOW,
            launching=fleet.launching_capacity(),
            launching_usage=fleet.launching_usage(),
        )
    )
    assert len(result.launch.absorbed) == 6
    assert {a.node for a in result.launch.absorbed} == {"token:token-1"}
    assert sum(len(la.pods) for la in result.launch.launches) == 1


def test_three_replicas_with_hostname_anti_affinity_get_three_nodes(
    make_config: Callable[..., Config],
) -> None:
    term = anti_affinity(HOSTNAME, {"app": "web"})
    pods = [pod(f"web-{i}", labels={"app": "web"}, pod_anti_affinity=[term]) for i in range(3)]
    result = run(make_config, *pods)
    assert len(result.launch.launches) == 3
    assert sorted(len(la.pods) for la in result.launch.launches) == [1, 1, 1]


def test_replicas_without_anti_affinity_still_share_one_node(make_config: Callable[..., Config]) -> None:
    result = run(make_config, *[pod(f"web-{i}", labels={"app": "web"}) for i in range(3)])
    assert len(result.launch.launches) == 1


def test_a_zone_spread_gets_a_node_in_each_configured_zone(make_config: Callable[..., Config]) -> None:
    spread = zone_spread({"app": "web"})
    pods = [pod(f"web-{i}", labels={"app": "web"}, spread=[spread]) for i in range(3)]
    result = run(make_config, *pods, offerings=aws_offerings(ZONES), zones=list(ZONES))
    assert sorted(la.offering.zone for la in result.launch.launches) == list(ZONES)
    # Each node's fallbacks stay in its zone, or a capacity error would undo the spread.
    for la in result.launch.launches:
        assert {o.zone for o in la.alternatives} <= {la.offering.zone}


def test_small_spread_replicas_fill_one_node_in_each_zone_evenly(make_config: Callable[..., Config]) -> None:
    # Each replica after the first three finds the nodes of a zone already one ahead refused by the spread
    # before their room is weighed, and joins the node of a zone behind.
    spread = zone_spread({"app": "web"})
    pods = [
        pod(f"web-{i}", cpu="100m", memory="128Mi", labels={"app": "web"}, spread=[spread]) for i in range(9)
    ]
    result = run(make_config, *pods, offerings=aws_offerings(ZONES), zones=list(ZONES))
    assert sorted((la.offering.zone, len(la.pods)) for la in result.launch.launches) == [
        (z, 3) for z in ZONES
    ]


def test_a_zone_spread_counts_the_replicas_already_running(make_config: Callable[..., Config]) -> None:
    # Two full nodes, in zones a and b, each running a replica: the next one belongs in zone c.
    running = [
        pod(
            f"web-{z[-1]}",
            cpu="1",
            labels={"app": "web"},
            node_name=f"node-{z[-1]}",
            phase="Running",
            message=None,
        )
        for z in ZONES[:2]
    ]
    nodes = [node(f"node-{z[-1]}", zone=z, cpu="1", memory="2Gi") for z in ZONES[:2]]
    pending = pod("web-x", labels={"app": "web"}, spread=[zone_spread({"app": "web"})])
    result = run(make_config, *nodes, *running, pending, offerings=aws_offerings(ZONES), zones=list(ZONES))
    assert [la.offering.zone for la in result.launch.launches] == ["us-east-1c"]


def test_a_pod_with_affinity_to_a_running_pod_goes_to_its_node(make_config: Callable[..., Config]) -> None:
    cache = pod("cache-0", labels={"app": "cache"}, node_name="node-a", phase="Running", message=None)
    app = pod("app-0", pod_affinity=[anti_affinity(HOSTNAME, {"app": "cache"})])
    result = run(make_config, node("node-a"), node("node-b"), cache, app)
    assert [(a.pod, a.node) for a in result.launch.absorbed] == [("default/app-0", "node-a")]


def test_a_pod_with_affinity_to_a_pod_on_a_full_node_is_unplaced_with_the_filter(
    make_config: Callable[..., Config],
) -> None:
    cache = pod(
        "cache-0", cpu="8", labels={"app": "cache"}, node_name="node-a", phase="Running", message=None
    )
    app = pod("app-0", pod_affinity=[anti_affinity(HOSTNAME, {"app": "cache"})])
    result = run(make_config, node("node-a"), cache, app)
    assert result.launch.launches == ()
    [unplaced] = result.launch.unplaced
    assert unplaced.rejection is not None and unplaced.rejection.filter == Filter.INTER_POD_AFFINITY
    assert unplaced.reason == "node(s) didn't match pod affinity rules"


def test_a_pod_that_needs_a_host_port_in_use_gets_another_node(make_config: Callable[..., Config]) -> None:
    exporter = pod("exporter-0", host_ports=[9100], node_name="node-a", phase="Running", message=None)
    pending = pod("exporter-1", host_ports=[9100])
    result = run(make_config, node("node-a"), exporter, pending)
    assert result.launch.absorbed == ()
    assert len(result.launch.launches) == 1


def test_two_pods_that_bind_the_same_host_port_never_share_a_new_node(
    make_config: Callable[..., Config],
) -> None:
    result = run(make_config, *[pod(f"exporter-{i}", host_ports=[9100]) for i in range(2)])
    assert sorted(len(la.pods) for la in result.launch.launches) == [1, 1]


def test_an_existing_pods_anti_affinity_keeps_matching_pods_off_its_node(
    make_config: Callable[..., Config],
) -> None:
    guard = pod(
        "guard-0",
        node_name="node-a",
        phase="Running",
        message=None,
        pod_anti_affinity=[anti_affinity(HOSTNAME, {"app": "noisy"})],
    )
    noisy = pod("noisy-0", labels={"app": "noisy"})
    result = run(make_config, node("node-a"), guard, noisy)
    assert result.launch.absorbed == ()
    assert len(result.launch.launches) == 1


def test_a_gpu_pod_without_the_gpu_toleration_gets_no_tainted_gpu_node(
    make_config: Callable[..., Config],
) -> None:
    gpu = pod(
        "infer-0", gpu=1, cpu="2", memory="8Gi", message=INSUFFICIENT_GPU, extended_resource_toleration=False
    )
    result = run(make_config, gpu)
    assert result.launch.launches == ()
    [unplaced] = result.launch.unplaced
    assert unplaced.rejection is not None and unplaced.rejection.filter == Filter.TAINT_TOLERATION
    assert "gpuNodeTaint" in unplaced.reason and "ExtendedResourceToleration" in unplaced.reason


def test_assume_extended_resource_toleration_plans_gpu_pods_as_if_they_tolerated_the_taint(
    make_config: Callable[..., Config],
) -> None:
    gpu = pod(
        "infer-0", gpu=1, cpu="2", memory="8Gi", message=INSUFFICIENT_GPU, extended_resource_toleration=False
    )
    result = run(make_config, gpu, assumeExtendedResourceToleration=True)
    assert launched(result) == {"g4dn.xlarge/on-demand": 1}


def test_without_the_gpu_taint_a_gpu_pod_needs_no_toleration(make_config: Callable[..., Config]) -> None:
    gpu = pod(
        "infer-0", gpu=1, cpu="2", memory="8Gi", message=INSUFFICIENT_GPU, extended_resource_toleration=False
    )
    result = run(make_config, gpu, gpuNodeTaint=False)
    assert launched(result) == {"g4dn.xlarge/on-demand": 1}


def test_a_node_is_kept_when_anti_affinity_leaves_its_pod_nowhere_to_go(
    make_config: Callable[..., Config],
) -> None:
    spare = node("spare", managed=True, annotations={"tidal.dev/unneeded-since": "2026-11-20T09:00:00Z"})
    other = node("other", managed=False)
    mover = pod(
        "db-1",
        labels={"app": "db"},
        node_name="spare",
        phase="Running",
        message=None,
        pod_anti_affinity=[anti_affinity(HOSTNAME, {"app": "db"})],
    )
    resident = pod("db-0", labels={"app": "db"}, node_name="other", phase="Running", message=None)
    result = run(make_config, spare, other, mover, resident)
    assert [r.node for r in result.removal.removals] == []
    [blocked] = [b for b in result.removal.blocked if b.node == "spare"]
    assert blocked.reason.startswith("nowhere to move its pods")


def test_a_pod_too_big_for_every_offering_names_the_filter_and_the_nearest_offering(
    make_config: Callable[..., Config],
) -> None:
    huge = pod("huge-0", gpu=12, cpu="8", memory="64Gi", message=INSUFFICIENT_GPU)
    [unplaced] = run(make_config, huge).launch.unplaced
    assert unplaced.rejection is not None and unplaced.rejection.filter == Filter.NODE_RESOURCES_FIT
    assert unplaced.reason == "no offering fits 12 nvidia.com/gpu"
    # Of the 8-GPU machines, the one with the most of what it asks for, then the cheapest.
    assert unplaced.nearest == "p4d.24xlarge/us-east-1a/on-demand ($21.9576/h): Insufficient nvidia.com/gpu"


def test_a_gpu_model_nobody_offers_names_the_cheapest_gpu_offering_it_ruled_out(
    make_config: Callable[..., Config],
) -> None:
    b200 = pod("x-0", gpu=1, message=INSUFFICIENT_GPU, annotations={"tidal.dev/instance-gpu-skus": "B200"})
    [unplaced] = run(make_config, b200).launch.unplaced
    assert unplaced.rejection is not None and unplaced.rejection.filter == Filter.OFFERING
    assert unplaced.nearest == "g4dn.xlarge/us-east-1a/on-demand ($0.5260/h): no offering with GPU model B200"
