"""Scale-down: which managed nodes go, and what keeps the others."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autoscaler.core.planning.planner import PlanInput, plan
from tests.builders import aws_offerings, node, pdb, pod, snapshot

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from autoscaler.config.options import Config
    from autoscaler.core.planning.planner import Plan

NOW = 1_795_168_800.0 + 3600  # 2026-11-20T11:00:00Z
LONG_AGO = {"tidal.dev/unneeded-since": "2026-11-20T09:00:00Z"}


def gpu_node(name: str, **kw: Any) -> dict[str, Any]:
    kw.setdefault("annotations", LONG_AGO)
    return node(name, instance_type="g5.xlarge", cpu="4", memory="16Gi", gpu=1, managed=True, **kw)


def running(name: str, node_name: str, **kw: Any) -> dict[str, Any]:
    return pod(name, node_name=node_name, phase="Running", message=None, **kw)


def run(make_config: Callable[..., Config], *objs: dict[str, Any], **cfg: Any) -> Plan:
    return plan(PlanInput(snapshot(*objs), aws_offerings(), make_config(**cfg), NOW))


def test_an_empty_gpu_node_unneeded_long_enough_is_removed(make_config: Callable[..., Config]) -> None:
    ds_pod = running("nvidia-device-plugin-x1", "gpu-a", owner_kind="DaemonSet", namespace="kube-system")
    result = run(make_config, gpu_node("gpu-a"), ds_pod)
    assert [(r.node, r.empty) for r in result.removal.removals] == [("gpu-a", True)]
    assert result.removal.removals[0].reason == "empty; unneeded for 2h"


def test_an_empty_node_no_waiting_pod_could_use_waits_unneeded_without_demand(
    make_config: Callable[..., Config],
) -> None:
    result = run(make_config, gpu_node("gpu-a", annotations={}))
    assert result.removal.removals == ()
    assert [(b.node, b.reason) for b in result.removal.blocked] == [("gpu-a", "unneeded for 0s of 30s")]
    assert result.removal.unneeded_since == {"gpu-a": NOW}
    assert result.removal.next_check == NOW + 30  # whoever plans when to look again looks then


def test_an_empty_node_a_waiting_pod_could_use_waits_node_unneeded_duration(
    make_config: Callable[..., Config],
) -> None:
    # A GPU pod held back (here by a scheduling gate; a KAI queue over its quota alike) is no demand now, but
    # it may run here as soon as it is let go.
    held = pod("train-1", gpu=1, cpu="2", memory="8Gi", gates=["example.com/queue"])
    since = {"tidal.dev/unneeded-since": "2026-11-20T10:59:00Z"}  # a minute ago
    result = run(make_config, gpu_node("gpu-a", annotations=since), held)
    assert result.removal.removals == ()
    assert [(b.node, b.reason) for b in result.removal.blocked] == [("gpu-a", "unneeded for 1m of 5m")]


def test_an_empty_node_nobody_waits_for_goes_after_unneeded_without_demand(
    make_config: Callable[..., Config],
) -> None:
    since = {"tidal.dev/unneeded-since": "2026-11-20T10:59:00Z"}  # a minute ago
    cpu_pod_waiting = pod("web-1", cpu="2", memory="2Gi", gates=["example.com/later"])
    result = run(make_config, gpu_node("gpu-a", annotations=since), cpu_pod_waiting)
    assert [(r.node, r.reason) for r in result.removal.removals] == [("gpu-a", "empty; unneeded for 1m")]


def test_unneeded_without_demand_equal_to_node_unneeded_duration_is_one_wait_for_all(
    make_config: Callable[..., Config],
) -> None:
    since = {"tidal.dev/unneeded-since": "2026-11-20T10:59:00Z"}
    result = run(make_config, gpu_node("gpu-a", annotations=since), scaleDown={"unneededWithoutDemand": "5m"})
    assert [(b.node, b.reason) for b in result.removal.blocked] == [("gpu-a", "unneeded for 1m of 5m")]
    assert result.removal.next_check is None


def test_nodes_tidal_did_not_launch_are_never_removed(make_config: Callable[..., Config]) -> None:
    result = run(make_config, node("static-a", annotations=LONG_AGO))
    assert result.removal.removals == ()
    assert result.removal.blocked == ()


def test_a_do_not_evict_pod_keeps_its_node(make_config: Callable[..., Config]) -> None:
    guarded = running("train-1", "gpu-a", cpu="100m", annotations={"tidal.dev/do-not-evict": "true"})
    result = run(make_config, gpu_node("gpu-a"), gpu_node("gpu-b"), guarded)
    blocked = {b.node: b.reason for b in result.removal.blocked}
    assert blocked["gpu-a"] == "pod default/train-1 is annotated tidal.dev/do-not-evict"
    assert [r.node for r in result.removal.removals] == ["gpu-b"]


def test_luna_and_cluster_autoscaler_annotations_also_protect(make_config: Callable[..., Config]) -> None:
    a = running("a-1", "gpu-a", cpu="100m", annotations={"pod.elotl.co/do-not-evict": "true"})
    b = running(
        "b-1", "gpu-b", cpu="100m", annotations={"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}
    )
    result = run(
        make_config, gpu_node("gpu-a"), gpu_node("gpu-b"), node("big", cpu="32", memory="128Gi"), a, b
    )
    assert result.removal.removals == ()
    assert [(b.node, b.reason) for b in result.removal.blocked] == [
        ("gpu-a", "pod default/a-1 is annotated pod.elotl.co/do-not-evict"),
        ("gpu-b", "pod default/b-1 is annotated cluster-autoscaler.kubernetes.io/safe-to-evict=false"),
    ]


def test_a_pod_whose_pdb_allows_no_disruption_keeps_its_node(make_config: Callable[..., Config]) -> None:
    api = running("api-1", "gpu-a", cpu="100m", labels={"app": "api"})
    result = run(
        make_config,
        gpu_node("gpu-a"),
        node("big", cpu="32", memory="128Gi"),
        api,
        pdb("api", match={"app": "api"}, allowed=0),
    )
    assert [(b.node, b.reason) for b in result.removal.blocked] == [
        ("gpu-a", "pod default/api-1 is protected by PodDisruptionBudget default/api")
    ]


def test_a_pdb_allowing_one_disruption_keeps_a_node_with_two_of_its_pods(
    make_config: Callable[..., Config],
) -> None:
    # Draining the node evicts both replicas at once: the budget's one disruption covers only the first.
    api = [running(f"api-{i}", "cpu-a", cpu="500m", memory="1Gi", labels={"app": "api"}) for i in (1, 2)]
    result = run(
        make_config,
        node("cpu-a", managed=True, annotations=LONG_AGO),
        node("big", cpu="32", memory="128Gi"),
        *api,
        pdb("api", match={"app": "api"}, allowed=1),
    )
    assert result.removal.removals == ()
    assert [(b.node, b.reason) for b in result.removal.blocked] == [
        ("cpu-a", "pod default/api-2 is protected by PodDisruptionBudget default/api")
    ]


def test_an_underutilised_node_is_drained_when_its_pods_fit_elsewhere(
    make_config: Callable[..., Config],
) -> None:
    small = running("web-1", "cpu-a", cpu="500m", memory="1Gi")
    cpu_a = node("cpu-a", managed=True, annotations=LONG_AGO)
    result = run(make_config, cpu_a, node("big", cpu="32", memory="128Gi"), small)
    assert [(r.node, r.empty, r.pods) for r in result.removal.removals] == [
        ("cpu-a", False, ("default/web-1",))
    ]


def test_an_underutilised_node_stays_when_its_pods_have_nowhere_to_go(
    make_config: Callable[..., Config],
) -> None:
    small = running("web-1", "cpu-a", cpu="500m", memory="1Gi")
    result = run(
        make_config, node("cpu-a", managed=True, annotations=LONG_AGO), small, scaleDown={"replaceSavings": 1}
    )
    assert [(b.node, b.reason) for b in result.removal.blocked] == [
        ("cpu-a", "nowhere to move pod default/web-1")
    ]


def test_an_underutilised_node_stays_when_a_new_node_for_its_pods_would_not_save_enough(
    make_config: Callable[..., Config],
) -> None:
    small = running("web-1", "cpu-a", cpu="500m", memory="1Gi")
    result = run(
        make_config, node("cpu-a", instance_type="m6i.2xlarge", managed=True, annotations=LONG_AGO), small
    )
    assert [(b.node, b.reason) for b in result.removal.blocked] == [
        (
            "cpu-a",
            "nowhere to move its pods; new nodes for them would cost $0.3840/h against $0.3840/h now,"
            " less than 50% saved",
        )
    ]


def test_a_node_is_never_replaced_by_one_that_costs_the_same_even_at_replace_savings_zero(
    make_config: Callable[..., Config],
) -> None:
    # The replacement would be just as under-used, and replaced in turn: its pods restarted forever.
    small = running("web-1", "cpu-a", cpu="500m", memory="1Gi")
    result = run(
        make_config,
        node("cpu-a", instance_type="m6i.2xlarge", managed=True, annotations=LONG_AGO),
        small,
        scaleDown={"replaceSavings": 0},
    )
    assert result.removal.removals == ()
    assert [(b.node, b.reason) for b in result.removal.blocked] == [
        (
            "cpu-a",
            "nowhere to move its pods; new nodes for them would cost $0.3840/h, no less than $0.3840/h now",
        )
    ]


def big_gpu_node(**kw: Any) -> dict[str, Any]:
    """A 4-GPU g5.12xlarge tidal launched ($5.672/h on demand)."""
    return node("gpu-big", instance_type="g5.12xlarge", cpu="48", memory="192Gi", gpu=4, managed=True, **kw)


def test_a_big_gpu_node_left_with_one_small_pod_is_replaced_by_a_right_sized_one(
    make_config: Callable[..., Config],
) -> None:
    big = big_gpu_node(annotations=LONG_AGO)
    last = running("infer-3", "gpu-big", gpu=1, cpu="2", memory="8Gi")
    result = run(make_config, big, last)
    [removal] = result.removal.removals
    assert (removal.node, removal.empty, removal.pods) == ("gpu-big", False, ("default/infer-3",))
    assert removal.reason == (
        "utilization 0.25, new nodes hold its pods for $0.5260/h instead of $5.6720/h; unneeded for 2h"
    )


def test_a_replacement_counts_the_node_it_replaces_as_gone_against_max_nodes(
    make_config: Callable[..., Config],
) -> None:
    # One node now, two T4 nodes in its place: maxNodes 2 allows that once the big node is gone.
    big = big_gpu_node(annotations=LONG_AGO)
    pods = [running(f"infer-{i}", "gpu-big", gpu=1, cpu="2", memory="8Gi") for i in (1, 2)]
    result = run(make_config, big, *pods, maxNodes=2)
    assert [r.node for r in result.removal.removals] == ["gpu-big"]


def test_a_replacement_that_max_nodes_has_no_room_for_is_refused(make_config: Callable[..., Config]) -> None:
    # Two T4 nodes would hold the pods for far less, but maxNodes allows one node in its place: a plan
    # that counted on two would evict the pods, launch one T4 node and leave the other pod pending.
    big = big_gpu_node(annotations=LONG_AGO)
    pods = [running(f"infer-{i}", "gpu-big", gpu=1, cpu="2", memory="8Gi") for i in (1, 2)]
    result = run(make_config, big, *pods, maxNodes=1)
    assert result.removal.removals == ()
    assert [(b.node, b.reason) for b in result.removal.blocked] == [
        ("gpu-big", "nowhere to move its pods, and no offering holds them (maxNodes 1 reached)")
    ]


def test_a_replacement_is_refused_when_this_plans_launches_leave_no_room_under_max_nodes(
    make_config: Callable[..., Config],
) -> None:
    # The pending web pod (it asks for an m6i node) takes the second of two nodes: the GPU pods' two T4 nodes
    # no longer fit.
    big = big_gpu_node(annotations=LONG_AGO)
    pods = [running(f"infer-{i}", "gpu-big", gpu=1, cpu="2", memory="8Gi") for i in (1, 2)]
    web = pod("web-1", node_selector={"node.kubernetes.io/instance-type": "m6i.xlarge"})
    result = run(make_config, big, *pods, web, maxNodes=2)
    assert len(result.launch.launches) == 1
    assert result.removal.removals == ()
    assert [(b.node, b.reason) for b in result.removal.blocked] == [
        ("gpu-big", "nowhere to move its pods, and no offering holds them (maxNodes 2 reached)")
    ]


def test_no_node_is_replaced_while_a_cluster_limit_keeps_pending_pods_out(
    make_config: Callable[..., Config],
) -> None:
    # The GPUs a replacement frees would go to the waiting pod first, and the moved pod would find its old
    # node's twin again: moved for nothing, and again at the next pass.
    big = big_gpu_node(annotations=LONG_AGO)
    last = running("infer-3", "gpu-big", gpu=1, cpu="2", memory="8Gi")
    waiting = pod(
        "train-1",
        gpu=4,
        cpu="8",
        memory="32Gi",
        message="0/1 nodes are available: 1 Insufficient nvidia.com/gpu.",
    )
    result = run(make_config, big, last, waiting, clusterGPULimit=5)
    assert [u.limited for u in result.launch.unplaced] == [True]
    assert result.removal.removals == ()
    [(name, reason)] = [(b.node, b.reason) for b in result.removal.blocked]
    assert name == "gpu-big"
    assert reason.endswith(
        "; no node is replaced while pending pods wait for a limit (clusterGPULimit 5 reached (4 GPUs in use, "
        "launching or planned))"
    )


def test_replacing_waits_for_node_unneeded_duration_like_any_removal(
    make_config: Callable[..., Config],
) -> None:
    big = big_gpu_node()
    last = running("infer-3", "gpu-big", gpu=1, cpu="2", memory="8Gi")
    result = run(make_config, big, last)
    assert result.removal.removals == ()
    assert result.removal.unneeded_since == {"gpu-big": NOW}


def test_a_protected_pod_keeps_even_an_expensive_node(make_config: Callable[..., Config]) -> None:
    big = big_gpu_node(annotations=LONG_AGO)
    last = running(
        "train-3", "gpu-big", gpu=1, cpu="2", memory="8Gi", annotations={"tidal.dev/do-not-evict": "true"}
    )
    result = run(make_config, big, last)
    assert result.removal.removals == ()
    assert [b.reason for b in result.removal.blocked] == [
        "pod default/train-3 is annotated tidal.dev/do-not-evict"
    ]


def test_a_busy_node_is_kept_with_its_utilization(make_config: Callable[..., Config]) -> None:
    busy = running("train-1", "gpu-a", gpu=1, cpu="2", memory="8Gi")
    result = run(make_config, gpu_node("gpu-a"), busy)
    assert [(b.node, b.reason) for b in result.removal.blocked] == [
        ("gpu-a", "utilization 1.00 is at or above 0.75 (bin-selection)")
    ]


def test_pods_without_a_controller_or_with_local_storage_are_not_evicted(
    make_config: Callable[..., Config],
) -> None:
    bare = running("bare-1", "cpu-a", cpu="100m", owner_kind=None)
    scratch = running("etl-1", "cpu-b", cpu="100m", volumes=[{"name": "s", "emptyDir": {}}])
    objs = [
        node("cpu-a", managed=True, annotations=LONG_AGO),
        node("cpu-b", managed=True, annotations=LONG_AGO),
        node("big", cpu="32", memory="128Gi"),
        bare,
        scratch,
    ]
    blocked = {b.node: b.reason for b in run(make_config, *objs).removal.blocked}
    assert blocked == {
        "cpu-a": "pod default/bare-1 has no controller to recreate it",
        "cpu-b": "pod default/etl-1 has local storage (emptyDir/hostPath)",
    }


def test_a_node_pending_pods_will_use_is_kept(make_config: Callable[..., Config]) -> None:
    result = run(make_config, gpu_node("gpu-a"), pod("infer-1", cpu="1", memory="1Gi", gpu=1))
    assert [(b.node, b.reason) for b in result.removal.blocked] == [("gpu-a", "pending pods will run here")]


def test_scale_down_can_be_disabled(make_config: Callable[..., Config]) -> None:
    result = run(make_config, gpu_node("gpu-a"), scaleDown={"enabled": False})
    assert result.removal.removals == ()


def created_at(obj: dict[str, Any], timestamp: str) -> dict[str, Any]:
    obj["metadata"]["creationTimestamp"] = timestamp
    return obj


def test_a_node_younger_than_new_node_grace_period_is_kept_even_when_empty(
    make_config: Callable[..., Config],
) -> None:
    # Its pod was cancelled while it launched; the next one often follows within minutes.
    young = created_at(gpu_node("gpu-a", annotations={}), "2026-11-20T10:59:00Z")
    result = run(make_config, young, scaleDown={"nodeUnneededDuration": "0s"})
    assert result.removal.removals == ()
    assert [(b.node, b.reason) for b in result.removal.blocked] == [
        ("gpu-a", "new node: 1m old of newNodeGracePeriod 2m")
    ]
    assert result.removal.unneeded_since == {"gpu-a": NOW}  # the unneeded clock runs all the same


def test_a_node_as_old_as_new_node_grace_period_can_go(make_config: Callable[..., Config]) -> None:
    old_enough = created_at(gpu_node("gpu-a", annotations={}), "2026-11-20T10:58:00Z")
    result = run(make_config, old_enough, scaleDown={"nodeUnneededDuration": "0s"})
    assert [(r.node, r.empty) for r in result.removal.removals] == [("gpu-a", True)]


def test_a_node_whose_pod_has_an_unreadable_annotation_is_kept_and_says_which(
    make_config: Callable[..., Config],
) -> None:
    big = big_gpu_node(annotations=LONG_AGO)
    bad = running(
        "infer-1",
        "gpu-big",
        gpu=1,
        cpu="2",
        memory="8Gi",
        annotations={"node.elotl.co/instance-max-cost": "cheap"},
    )
    result = run(make_config, big, bad)
    assert result.removal.removals == ()
    assert [(b.node, b.reason) for b in result.removal.blocked] == [
        (
            "gpu-big",
            "nowhere to move its pods (annotation node.elotl.co/instance-max-cost: 'cheap' is not a positive "
            "price per hour)",
        )
    ]
