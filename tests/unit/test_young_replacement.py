"""Scale-down replaces a busy node whose pods have only just started when right-sized nodes cost less.

The scheduler binds a new pod to any idle node that fits it, so a pod can start on a node bought for a bigger
one and hold it for its whole run. Moving a pod that started minutes ago loses minutes of work.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from autoscaler.core.planning.offerings import OfferingIndex, OfferingsMemo
from autoscaler.core.planning.planner import PlanInput, plan
from autoscaler.core.planning.rooms import NodeRooms
from tests.builders import aws_offerings, node, pdb, pod, snapshot

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from autoscaler.config.options import Config
    from autoscaler.core.planning.planner import Plan

NOW = 1_795_168_800.0 + 3600  # 2026-11-20T11:00:00Z
LONG_AGO = {"tidal.dev/unneeded-since": "2026-11-20T09:00:00Z"}
FIVE_MINUTES_AGO = "2026-11-20T10:55:00Z"
TWO_HOURS_AGO = "2026-11-20T09:00:00Z"


def l4_node(name: str) -> dict[str, Any]:
    """An on-demand L4 node ($0.8048/h); a T4 node holds the same pod for $0.526/h, 35% less."""
    return node(
        name, instance_type="g6.xlarge", cpu="4", memory="16Gi", gpu=1, managed=True, annotations=LONG_AGO
    )


def running_since(name: str, node_name: str, bound_at: str, **kw: Any) -> dict[str, Any]:
    """A running pod with the PodScheduled condition the scheduler set when it bound the pod."""
    obj = pod(name, node_name=node_name, phase="Running", message=None, gpu=1, cpu="2", memory="8Gi", **kw)
    obj["status"]["conditions"] = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": bound_at}]
    return obj


def run(make_config: Callable[..., Config], *objs: dict[str, Any]) -> Plan:
    return plan(PlanInput(snapshot(*objs), aws_offerings(), make_config(capacityTypes=["on-demand"]), NOW))


def test_a_busy_node_whose_pod_just_started_is_replaced_when_a_right_sized_node_saves_a_fifth(
    make_config: Callable[..., Config],
) -> None:
    result = run(make_config, l4_node("gpu-a"), running_since("infer-1", "gpu-a", FIVE_MINUTES_AGO))
    [removal] = result.removal.removals
    assert (removal.node, removal.empty, removal.pods) == ("gpu-a", False, ("default/infer-1",))
    assert removal.reason == (
        "utilization 1.00, new nodes hold its pods for $0.5260/h instead of $0.8048/h; unneeded for 2h"
    )


def test_a_busy_node_whose_pod_has_run_for_hours_is_kept(make_config: Callable[..., Config]) -> None:
    result = run(make_config, l4_node("gpu-a"), running_since("infer-1", "gpu-a", TWO_HOURS_AGO))
    assert result.removal.removals == ()
    assert [(b.node, b.reason) for b in result.removal.blocked] == [
        ("gpu-a", "utilization 1.00 is at or above 0.75 (bin-selection)")
    ]


def test_a_busy_node_of_young_pods_is_kept_when_right_sized_nodes_save_too_little(
    make_config: Callable[..., Config],
) -> None:
    # Asking for an L4, the pod has no cheaper node to go to.
    young = running_since(
        "infer-1",
        "gpu-a",
        FIVE_MINUTES_AGO,
        annotations={"node.elotl.co/instance-gpu-skus": "L4"},
    )
    result = run(make_config, l4_node("gpu-a"), young)
    assert result.removal.removals == ()
    assert [b.reason for b in result.removal.blocked] == [
        "utilization 1.00 is at or above 0.75 (bin-selection)"
    ]


def test_a_young_pod_that_must_not_be_evicted_keeps_its_busy_node(make_config: Callable[..., Config]) -> None:
    guarded = running_since(
        "train-1", "gpu-a", FIVE_MINUTES_AGO, annotations={"tidal.dev/do-not-evict": "true"}
    )
    result = run(make_config, l4_node("gpu-a"), guarded)
    assert result.removal.removals == ()
    assert [b.reason for b in result.removal.blocked] == [
        "utilization 1.00 is at or above 0.75 (bin-selection)"
    ]


def test_a_busy_node_of_young_pods_stays_when_replacement_is_turned_off(
    make_config: Callable[..., Config],
) -> None:
    objs = (l4_node("gpu-a"), running_since("infer-1", "gpu-a", FIVE_MINUTES_AGO))
    config = make_config(capacityTypes=["on-demand"], scaleDown={"replaceSavings": 1})
    result = plan(PlanInput(snapshot(*objs), aws_offerings(), config, NOW))
    assert result.removal.removals == ()


def test_a_young_pod_whose_disruption_budget_allows_nothing_keeps_its_busy_node(
    make_config: Callable[..., Config],
) -> None:
    guarded = running_since("infer-1", "gpu-a", FIVE_MINUTES_AGO, labels={"app": "infer"})
    budget = pdb("infer", match={"app": "infer"}, allowed=0)
    result = run(make_config, l4_node("gpu-a"), guarded, budget)
    assert result.removal.removals == ()


@pytest.mark.parametrize("within", ["0s", "2m"])
def test_pods_older_than_replace_young_pods_within_keep_their_busy_node(
    make_config: Callable[..., Config], within: str
) -> None:
    objs = (l4_node("gpu-a"), running_since("infer-1", "gpu-a", FIVE_MINUTES_AGO))
    config = make_config(capacityTypes=["on-demand"], scaleDown={"replaceYoungPodsWithin": within})
    result = plan(PlanInput(snapshot(*objs), aws_offerings(), config, NOW))
    assert result.removal.removals == ()
    assert [b.reason for b in result.removal.blocked] == [
        "utilization 1.00 is at or above 0.75 (bin-selection)"
    ]


def test_the_ca_like_baseline_never_replaces_a_node_but_the_karpenter_like_one_does(
    make_config: Callable[..., Config],
) -> None:
    """cluster-autoscaler only removes nodes whose pods fit elsewhere; Karpenter's consolidation replaces."""
    from autoscaler.sim.baselines import planner_for

    objs = snapshot(l4_node("gpu-a"), running_since("infer-1", "gpu-a", FIVE_MINUTES_AGO))
    config = make_config(capacityTypes=["on-demand"])
    removed: dict[str, list[str]] = {}
    for policy in ("ca-like", "karpenter-like"):
        planner = planner_for(policy)
        assert planner is not None
        result = planner(PlanInput(objs, aws_offerings(), config, NOW))
        removed[policy] = [r.node for r in result.removal.removals]
    assert removed == {"ca-like": [], "karpenter-like": ["gpu-a"]}


def test_a_node_whose_facts_are_kept_between_plans_still_sees_its_young_pods_grow_old(
    make_config: Callable[..., Config],
) -> None:
    snap = snapshot(l4_node("gpu-a"), running_since("infer-1", "gpu-a", FIVE_MINUTES_AGO))
    config, offerings = make_config(capacityTypes=["on-demand"]), aws_offerings()
    rooms, memo = NodeRooms(), OfferingsMemo(OfferingIndex)
    young = plan(PlanInput(snap, offerings, config, NOW, rooms=rooms, memo=memo))
    facts = rooms.facts["gpu-a"].by_shares[True]
    old = plan(PlanInput(snap, offerings, config, NOW + 2 * 3600, rooms=rooms, memo=memo))
    assert rooms.facts["gpu-a"].by_shares[True] is facts  # read once, for both plans
    assert [r.node for r in young.removal.removals] == ["gpu-a"]
    assert old.removal.removals == ()
