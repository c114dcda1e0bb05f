"""Consolidation moves pods that share a GPU when every one of them may move; KAI's reservation pod holding
that GPU is never evicted: it goes when nobody shares the GPU any more."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autoscaler.core.planning.offerings import OfferingIndex
from autoscaler.core.planning.planner import PlanInput, plan
from autoscaler.core.planning.scaledown import scale_down
from tests.builders import aws_offerings, node, snapshot
from tests.unit.test_gpu_sharing_plan import reservation, share

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from autoscaler.config.options import Config
    from autoscaler.core.planning.planner import Plan

NOW = 1_795_168_800.0 + 3600  # 2026-11-20T11:00:00Z
LONG_AGO = {"tidal.dev/unneeded-since": "2026-11-20T09:00:00Z"}
DO_NOT_EVICT = {"tidal.dev/do-not-evict": "true"}


def four_gpu_node(name: str) -> dict[str, Any]:
    """An on-demand g6.12xlarge ($4.6016/h): four L4s, bought for work that has since finished."""
    return node(
        name,
        instance_type="g6.12xlarge",
        cpu="48",
        memory="192Gi",
        gpu=4,
        managed=True,
        annotations=LONG_AGO,
        labels={"nvidia.com/gpu.memory": "22888"},
    )


def run(make_config: Callable[..., Config], *objs: dict[str, Any]) -> Plan:
    config = make_config(capacityTypes=["on-demand"], schedulerNames=["kai-scheduler"])
    return plan(PlanInput(snapshot(*objs), aws_offerings(), config, NOW))


def test_a_big_node_left_with_one_shared_gpu_is_replaced_and_only_the_sharing_pods_are_evicted(
    make_config: Callable[..., Config],
) -> None:
    objs = [
        four_gpu_node("gpu-a"),
        reservation("gpu-a", "g1"),
        share("infer-0", "0.25", node_name="gpu-a", group="g1"),
        share("infer-1", "0.25", node_name="gpu-a", group="g1"),
    ]
    result = run(make_config, *objs)
    [removal] = result.removal.removals
    assert removal.method == "replace"
    assert removal.pods == ("default/infer-0", "default/infer-1")  # never the reservation pod
    assert [la.offering.instance_type for la in removal.replacement] == ["g4dn.xlarge"]


def test_a_shared_gpu_stays_when_one_of_its_pods_may_not_be_evicted(
    make_config: Callable[..., Config],
) -> None:
    guarded = share("infer-1", "0.25", node_name="gpu-a", group="g1")
    guarded["metadata"]["annotations"].update(DO_NOT_EVICT)
    objs = [
        four_gpu_node("gpu-a"),
        reservation("gpu-a", "g1"),
        share("infer-0", "0.25", node_name="gpu-a", group="g1"),
        guarded,
    ]
    result = run(make_config, *objs)
    assert result.removal.removals == ()
    [blocked] = result.removal.blocked
    assert blocked.reason == "pod default/infer-1 is annotated tidal.dev/do-not-evict"


def test_a_reservation_no_pod_shares_yet_still_holds_its_node(make_config: Callable[..., Config]) -> None:
    # KAI binds the reservation pod a moment before the pod that shares its GPU.
    result = run(make_config, four_gpu_node("gpu-a"), reservation("gpu-a", "g1"))
    assert result.removal.removals == ()
    assert result.removal.blocked[0].reason == (
        "pod kai-resource-reservation/gpu-reservation-g1 is annotated karpenter.sh/do-not-disrupt"
    )


def test_without_move_shares_the_reservation_pod_holds_the_node_as_karpenter_leaves_it(
    make_config: Callable[..., Config],
) -> None:
    config = make_config(capacityTypes=["on-demand"], schedulerNames=["kai-scheduler"])
    objs = [
        four_gpu_node("gpu-a"),
        reservation("gpu-a", "g1"),
        share("infer-0", "0.25", node_name="gpu-a", group="g1"),
    ]
    removal = scale_down(snapshot(*objs), OfferingIndex(aws_offerings(), config), NOW)
    assert removal.removals == ()
    assert removal.blocked[0].reason == (
        "pod kai-resource-reservation/gpu-reservation-g1 is annotated karpenter.sh/do-not-disrupt"
    )
