"""Disruption methods beyond scale-down (expired, drifted, unhealthy), what protects pods from every method
(gangs, KAI reservation and background pods, do-not-disrupt Nodes), and disruptions in progress."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autoscaler.core.planning.planner import PlanInput, plan
from tests.builders import aws_offerings, node, pdb, pod, podgroup, snapshot

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from autoscaler.config.options import Config
    from autoscaler.core.planning.decisions import Removal
    from autoscaler.core.planning.planner import Plan

T0 = 1_795_168_800.0  # 2026-11-20T10:00:00Z, when every test Node was created
DAY = 86_400.0
NOW = T0 + 31 * DAY
MONTH = {"nodeMaxLifetime": "720h"}  # 30 days: every node below has expired by NOW
LONG_AGO = {"tidal.dev/unneeded-since": "2026-11-20T09:00:00Z"}


def gpu_node(name: str, **kw: Any) -> dict[str, Any]:
    return node(name, instance_type="g5.xlarge", cpu="4", memory="16Gi", gpu=1, managed=True, **kw)


def busy(name: str, node_name: str, **kw: Any) -> dict[str, Any]:
    """A training pod that fills its one-GPU node: nothing else could take it."""
    kw.setdefault("cpu", "3")
    kw.setdefault("memory", "12Gi")
    return pod(name, node_name=node_name, phase="Running", message=None, gpu=1, **kw)


def run(make_config: Callable[..., Config], *objs: dict[str, Any], now: float = NOW, **cfg: Any) -> Plan:
    return plan(PlanInput(snapshot(*objs), aws_offerings(spot=False), make_config(**cfg), now))


def by_node(result: Plan) -> dict[str, Removal]:
    return {r.node: r for r in result.removal.removals}


def blocked(result: Plan) -> dict[str, str]:
    return {b.node: b.reason for b in result.removal.blocked}


# --- expired ------------------------------------------------------------------------------------------------


def test_an_expired_node_gets_a_replacement_planned_before_its_pods_are_evicted(
    make_config: Callable[..., Config],
) -> None:
    result = run(make_config, gpu_node("gpu-a"), busy("train-0", "gpu-a"), disruption=MONTH)
    removal = by_node(result)["gpu-a"]
    assert removal.method == "expired"
    assert removal.pods == ("default/train-0",)
    assert [la.offering.instance_type for la in removal.replacement] == ["g4dn.xlarge"]
    assert removal.reason.startswith("expired: launched 744h ago; nodeMaxLifetime is 720h")


def test_a_node_younger_than_node_max_lifetime_stays_and_says_when_to_look_again(
    make_config: Callable[..., Config],
) -> None:
    result = run(make_config, gpu_node("gpu-a"), busy("train-0", "gpu-a"), now=T0 + DAY, disruption=MONTH)
    assert result.removal.removals == ()
    assert result.removal.next_check == T0 + 30 * DAY


def test_nodes_live_for_ever_by_default(make_config: Callable[..., Config]) -> None:
    result = run(make_config, gpu_node("gpu-a"), busy("train-0", "gpu-a"))
    assert result.removal.removals == ()


def test_an_expired_node_whose_pods_fit_elsewhere_needs_no_replacement(
    make_config: Callable[..., Config],
) -> None:
    small = pod("web-0", node_name="cpu-a", phase="Running", message=None, cpu="1", memory="1Gi")
    result = run(
        make_config,
        node("cpu-a", managed=True),
        node("cpu-b"),  # not tidal's, never expires, has room
        small,
        disruption=MONTH,
    )
    removal = by_node(result)["cpu-a"]
    assert (removal.method, removal.replacement) == ("expired", ())
    assert removal.reason.endswith("its pods fit on other nodes")


def test_an_expired_empty_node_is_simply_removed(make_config: Callable[..., Config]) -> None:
    removal = by_node(run(make_config, gpu_node("gpu-a"), disruption=MONTH))["gpu-a"]
    assert (removal.method, removal.empty, removal.replacement) == ("expired", True, ())


def test_an_expired_node_with_a_do_not_evict_pod_is_kept(make_config: Callable[..., Config]) -> None:
    protected = busy("train-0", "gpu-a", annotations={"tidal.dev/do-not-evict": "true"})
    result = run(make_config, gpu_node("gpu-a"), protected, disruption=MONTH)
    assert result.removal.removals == ()
    assert "pod default/train-0 is annotated tidal.dev/do-not-evict" in blocked(result)["gpu-a"]


def test_an_expired_node_waits_when_its_replacement_and_it_would_overrun_the_gpu_limit(
    make_config: Callable[..., Config],
) -> None:
    result = run(
        make_config, gpu_node("gpu-a"), busy("train-0", "gpu-a"), clusterGPULimit=1, disruption=MONTH
    )
    assert result.removal.removals == ()
    assert "a replacement would exceed a cluster limit while both run" in blocked(result)["gpu-a"]


def test_a_node_whose_replacement_was_given_up_is_not_tried_again_until_its_retry_time(
    make_config: Callable[..., Config],
) -> None:
    retry = {"tidal.dev/disruption-retry-after": "2026-12-21T11:00:00Z"}
    result = run(
        make_config, gpu_node("gpu-a", annotations=retry), busy("train-0", "gpu-a"), disruption=MONTH
    )
    assert result.removal.removals == ()
    assert "a replacement was given up" in blocked(result)["gpu-a"]


# --- drifted ------------------------------------------------------------------------------------------------


def drifted_run(make_config: Callable[..., Config], *objs: dict[str, Any], **cfg: Any) -> Plan:
    return plan(
        PlanInput(snapshot(*objs), aws_offerings(spot=False), make_config(**cfg), NOW, node_template="b2")
    )


def test_a_node_launched_from_another_node_template_has_drifted_and_is_replaced(
    make_config: Callable[..., Config],
) -> None:
    old = gpu_node("gpu-a", labels={"tidal.dev/node-template": "a1"})
    removal = by_node(drifted_run(make_config, old, busy("train-0", "gpu-a")))["gpu-a"]
    assert removal.method == "drifted"
    assert "launched from node template a1; the configuration now describes b2" in removal.reason
    assert len(removal.replacement) == 1


def test_a_node_of_the_current_template_or_of_none_has_not_drifted(
    make_config: Callable[..., Config],
) -> None:
    current = gpu_node("gpu-a", labels={"tidal.dev/node-template": "b2"})
    unknown = gpu_node("gpu-b")
    result = drifted_run(make_config, current, unknown, busy("t-0", "gpu-a"), busy("t-1", "gpu-b"))
    assert result.removal.removals == ()


def test_drift_can_be_turned_off(make_config: Callable[..., Config]) -> None:
    old = gpu_node("gpu-a", labels={"tidal.dev/node-template": "a1"})
    result = drifted_run(make_config, old, busy("train-0", "gpu-a"), disruption={"drift": False})
    assert result.removal.removals == ()


# --- unhealthy ----------------------------------------------------------------------------------------------

GPU_LOST = {
    "unhealthyConditions": [{"type": "AcceleratedHardwareReady", "status": "False", "duration": "10m"}]
}


def sick(name: str, since: str = "2026-12-21T09:40:00Z", **kw: Any) -> dict[str, Any]:
    obj = gpu_node(name, **kw)
    obj["status"]["conditions"].append(
        {"type": "AcceleratedHardwareReady", "status": "False", "lastTransitionTime": since}
    )
    return obj


def test_a_node_whose_gpu_condition_held_past_its_duration_is_drained_without_waiting(
    make_config: Callable[..., Config],
) -> None:
    # NOW is 2026-12-21T10:00:00Z: the GPU has been lost for 20 minutes.
    result = run(make_config, sick("gpu-a"), busy("train-0", "gpu-a"), disruption=GPU_LOST)
    removal = by_node(result)["gpu-a"]
    assert (removal.method, removal.replacement, removal.pods) == ("unhealthy", (), ("default/train-0",))
    assert "condition AcceleratedHardwareReady=False for 20m (tolerated for 10m)" in removal.reason


def test_a_condition_younger_than_its_duration_is_tolerated_until_then(
    make_config: Callable[..., Config],
) -> None:
    # An empty node nobody waits for would be looked at again after unneededWithoutDemand: not here.
    result = run(
        make_config,
        sick("gpu-a", since="2026-12-21T09:55:00Z"),
        disruption=GPU_LOST,
        scaleDown={"unneededWithoutDemand": "5m"},
    )
    assert result.removal.removals == ()
    assert result.removal.next_check == NOW + 300


def test_no_node_is_repaired_while_more_than_a_fifth_of_the_nodes_are_unhealthy(
    make_config: Callable[..., Config],
) -> None:
    nodes = [sick(f"gpu-{i}") for i in range(3)] + [gpu_node(f"gpu-{i}") for i in range(3, 5)]
    pods = [busy(f"train-{i}", f"gpu-{i}") for i in range(5)]
    result = run(make_config, *nodes, *pods, disruption=GPU_LOST)
    assert result.removal.removals == ()
    assert "3 of 5 nodes are unhealthy" in blocked(result)["gpu-0"]


def test_an_unhealthy_node_still_never_evicts_a_pod_its_pdb_protects(
    make_config: Callable[..., Config],
) -> None:
    guarded = busy("train-0", "gpu-a", labels={"app": "train"})
    result = run(
        make_config,
        sick("gpu-a"),
        guarded,
        pdb("train", match={"app": "train"}, allowed=0),
        disruption=GPU_LOST,
    )
    assert result.removal.removals == ()
    assert "PodDisruptionBudget default/train" in blocked(result)["gpu-a"]


# --- what protects pods from every method -------------------------------------------------------------------


def gang_member(name: str, node_name: str) -> dict[str, Any]:
    return busy(name, node_name, annotations={"pod-group-name": "pg-train"})


def test_a_member_of_a_running_gang_is_not_moved_without_the_rest_of_its_gang(
    make_config: Callable[..., Config],
) -> None:
    objs = [
        gpu_node("gpu-a"),
        gpu_node("gpu-b", labels={"tidal.dev/node-template": "b2"}),
        gang_member("train-0", "gpu-a"),
        gang_member("train-1", "gpu-b"),
        podgroup("pg-train", min_member=2, queue="research"),
    ]
    objs[0]["metadata"]["labels"]["tidal.dev/node-template"] = "a1"  # only gpu-a has drifted
    result = plan(
        PlanInput(snapshot(*objs), aws_offerings(spot=False), make_config(), NOW, node_template="b2")
    )
    assert result.removal.removals == ()
    assert "belongs to running gang default/pg-train, which also runs on gpu-b" in blocked(result)["gpu-a"]


def test_a_whole_gang_moves_when_every_node_it_runs_on_goes(make_config: Callable[..., Config]) -> None:
    objs = [
        gpu_node("gpu-a", labels={"tidal.dev/node-template": "a1"}),
        gpu_node("gpu-b", labels={"tidal.dev/node-template": "a1"}),
        gang_member("train-0", "gpu-a"),
        gang_member("train-1", "gpu-b"),
        podgroup("pg-train", min_member=2, queue="research"),
    ]
    cfg = make_config(disruption={"budgets": []})
    result = plan(PlanInput(snapshot(*objs), aws_offerings(spot=False), cfg, NOW, node_template="b2"))
    assert sorted(by_node(result)) == ["gpu-a", "gpu-b"]


def test_a_gang_a_budget_would_split_stays_whole(make_config: Callable[..., Config]) -> None:
    objs = [
        gpu_node("gpu-a", labels={"tidal.dev/node-template": "a1"}),
        gpu_node("gpu-b", labels={"tidal.dev/node-template": "a1"}),
        gang_member("train-0", "gpu-a"),
        gang_member("train-1", "gpu-b"),
        podgroup("pg-train", min_member=2, queue="research"),
    ]
    cfg = make_config(disruption={"budgets": [{"nodes": 1}]})
    result = plan(PlanInput(snapshot(*objs), aws_offerings(spot=False), cfg, NOW, node_template="b2"))
    assert result.removal.removals == ()
    reasons = blocked(result)
    assert "disruption budget 1 allows no more now" in reasons["gpu-b"]
    assert "belongs to running gang default/pg-train, which also runs on gpu-b" in reasons["gpu-a"]


def test_a_node_with_only_kai_background_pods_is_empty_and_they_are_evicted_with_it(
    make_config: Callable[..., Config],
) -> None:
    background = pod(
        "warm-0",
        node_name="gpu-a",
        phase="Running",
        message=None,
        gpu=1,
        labels={"kai.scheduler/background": "true"},
    )
    result = run(make_config, gpu_node("gpu-a", annotations=LONG_AGO), background)
    removal = by_node(result)["gpu-a"]
    assert removal.method == "empty"
    assert (removal.empty, removal.pods) == (False, ("default/warm-0",))
    assert removal.reason.startswith("empty but for 1 KAI background pods")


def test_a_kai_reservation_pod_keeps_its_node(make_config: Callable[..., Config]) -> None:
    reservation = pod(
        "gpu-reservation-a-x7",
        namespace="kai-resource-reservation",
        node_name="gpu-a",
        phase="Running",
        message=None,
        gpu=1,
        labels={"app": "kai-resource-reservation", "runai-gpu-group": "g-1"},
    )
    four = node("gpu-a", instance_type="g5.12xlarge", cpu="48", memory="192Gi", gpu=4, managed=True)
    four["metadata"]["annotations"] = LONG_AGO
    result = run(make_config, four, reservation)  # a quarter used: under-utilised, but the pod must stay
    assert result.removal.removals == ()
    assert "is a KAI reservation pod" in blocked(result)["gpu-a"]


def test_a_node_annotated_do_not_disrupt_is_never_disrupted(make_config: Callable[..., Config]) -> None:
    annotations = {**LONG_AGO, "karpenter.sh/do-not-disrupt": "true"}
    result = run(make_config, gpu_node("gpu-a", annotations=annotations), disruption=MONTH)
    assert result.removal.removals == ()
    assert blocked(result)["gpu-a"] == "the Node is annotated karpenter.sh/do-not-disrupt"


# --- in progress ---------------------------------------------------------------------------------------------


def test_a_node_waiting_for_its_replacement_and_the_replacement_are_both_left_alone(
    make_config: Callable[..., Config],
) -> None:
    waiting = {
        "tidal.dev/disruption": "expired",
        "tidal.dev/disruption-since": "2026-12-21T09:58:00Z",
        "tidal.dev/replacements": "tok-1",
        **LONG_AGO,
    }
    old = gpu_node("gpu-a", annotations=waiting)
    new = gpu_node("gpu-b", labels={"tidal.dev/launch-token": "tok-1"}, annotations=LONG_AGO)
    result = run(make_config, old, new, busy("train-0", "gpu-a"), disruption=MONTH)
    assert result.removal.removals == ()
    reasons = blocked(result)
    assert reasons["gpu-a"] == "being disrupted (expired): waiting for 1 replacement node(s) to be Ready"
    assert reasons["gpu-b"] == "replacement for node gpu-a, kept for its pods"
    assert result.removal.next_check == NOW - 120 + 900  # the replacement's timeout


def test_replacements_chosen_in_one_plan_fit_the_gpu_limit_together(
    make_config: Callable[..., Config],
) -> None:
    # Two GPUs run, the limit is three: one replacement may run beside its node, not two.
    objs = [gpu_node("gpu-a"), gpu_node("gpu-b"), busy("train-0", "gpu-a"), busy("train-1", "gpu-b")]
    result = run(make_config, *objs, clusterGPULimit=3, disruption={**MONTH, "budgets": []})
    assert [r.node for r in result.removal.removals] == ["gpu-a"]
    assert "a replacement would exceed a cluster limit while both run" in blocked(result)["gpu-b"]


def test_the_nodes_of_a_gang_do_not_leave_at_different_moments(make_config: Callable[..., Config]) -> None:
    # gpu-a is unhealthy (drained now), gpu-b expired (replaced first, drained later): the gang would split.
    objs = [
        sick("gpu-a"),
        gpu_node("gpu-b"),
        gang_member("train-0", "gpu-a"),
        gang_member("train-1", "gpu-b"),
        podgroup("pg-train", min_member=2, queue="research"),
    ]
    result = run(make_config, *objs, disruption={**MONTH, **GPU_LOST, "budgets": []})
    assert result.removal.removals == ()
    reasons = blocked(result)
    assert "belongs to running gang default/pg-train" in reasons["gpu-a"]
    assert "belongs to running gang default/pg-train" in reasons["gpu-b"]


def test_a_cheaper_replacement_given_up_is_not_tried_again_before_its_retry_time(
    make_config: Callable[..., Config],
) -> None:
    big = node(
        "gpu-big",
        instance_type="g5.12xlarge",
        cpu="48",
        memory="192Gi",
        gpu=4,
        managed=True,
        annotations={**LONG_AGO, "tidal.dev/disruption-retry-after": "2026-12-21T11:00:00Z"},
    )
    result = run(make_config, big, busy("infer-0", "gpu-big", cpu="1", memory="2Gi"))
    assert result.removal.removals == ()
    assert "a replacement was given up; tried again in 1h" in blocked(result)["gpu-big"]
