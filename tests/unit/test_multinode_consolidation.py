"""Multi-node consolidation: under-used nodes whose pods fit together on fewer or cheaper nodes, which no one of
them does alone, are consolidated: onto the room of the nodes that stay, else one of them replaced (Ready
first) by new nodes that hold the pods of all of them.

The pods ask for one A10G and 20 CPUs each, so only a 48- or 96-CPU g5 holds them: a single node's pods find no
cheaper node than the one they are on, and single-node consolidation keeps every node.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from autoscaler.core.disruption.method import Method
from autoscaler.core.planning.planner import PlanInput, plan
from tests.builders import node, offering, pdb, pod, snapshot
from tests.unit.test_gpu_sharing_plan import reservation, share

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from autoscaler.config.options import Config
    from autoscaler.core.offering import Offering
    from autoscaler.core.planning.planner import Plan

NOW = 1_795_168_800.0 + 3600  # 2026-11-20T11:00:00Z
TWO_HOURS_AGO = "2026-11-20T09:00:00Z"
TEN_MINUTES_AGO = "2026-11-20T10:50:00Z"
A_MINUTE_AGO = "2026-11-20T10:59:00Z"


def g5_offerings() -> list[Offering]:
    """us-east-1 on-demand list prices of the A10G nodes: a g5.24xlarge holds four 20-CPU pods for $8.144/h,
    two g5.12xlarge hold them for $11.344/h (28% more)."""
    return [
        offering("g5.xlarge", 4, 16, 1.006, gpus=1, gpu_model="A10G", gpu_memory_gib=24),
        offering("g5.12xlarge", 48, 192, 5.672, gpus=4, gpu_model="A10G", gpu_memory_gib=24),
        offering("g5.24xlarge", 96, 384, 8.144, gpus=4, gpu_model="A10G", gpu_memory_gib=24),
    ]


def g5_node(name: str, **kw: Any) -> dict[str, Any]:
    return node(name, instance_type="g5.12xlarge", cpu="48", memory="192Gi", gpu=4, managed=True, **kw)


def training(name: str, node_name: str, bound_at: str = TEN_MINUTES_AGO, **kw: Any) -> dict[str, Any]:
    """A running pod of one A10G and 20 CPUs, bound to its node at ``bound_at``."""
    obj = pod(name, node_name=node_name, phase="Running", message=None, gpu=1, cpu="20", memory="32Gi", **kw)
    obj["status"]["conditions"] = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": bound_at}]
    return obj


def half_used_pair(bound_at: str = TEN_MINUTES_AGO, **kw: Any) -> list[dict[str, Any]]:
    """Two g5.12xlarge, each half used by two training pods (40 of 48 CPUs: neither holds the other's), all
    bound at ``bound_at``; ``kw`` goes to the pods of gpu-b."""
    return [
        g5_node("gpu-a"),
        g5_node("gpu-b"),
        training("train-1", "gpu-a", bound_at),
        training("train-2", "gpu-a", bound_at),
        training("train-3", "gpu-b", bound_at, **kw),
        training("train-4", "gpu-b", bound_at, **kw),
    ]


def run(make_config: Callable[..., Config], *objs: dict[str, Any], **keys: Any) -> Plan:
    config = make_config(
        capacityTypes=["on-demand"], scaleDown={"replaceSavings": 0.25, "multiNode": True}, **keys
    )
    return plan(PlanInput(snapshot(*objs), g5_offerings(), config, NOW))


def test_two_half_used_nodes_are_replaced_by_one_bigger_node_that_holds_all_their_pods_for_less(
    make_config: Callable[..., Config],
) -> None:
    result = run(make_config, *half_used_pair())
    [removal] = result.removal.removals
    assert (removal.node, removal.method, removal.pods) == (
        "gpu-a",
        Method.REPLACE,
        ("default/train-1", "default/train-2"),
    )
    assert [la.offering.instance_type for la in removal.replacement] == ["g5.24xlarge"]
    assert removal.reason == (
        "multi-node: 1 new node hold the pods of 2 nodes (this one, gpu-b) for $8.1440/h instead of $11.3440/h"
    )


def test_nodes_are_not_consolidated_together_when_the_saving_is_under_replace_savings(
    make_config: Callable[..., Config],
) -> None:
    config = make_config(capacityTypes=["on-demand"], scaleDown={"replaceSavings": 0.5, "multiNode": True})
    result = plan(PlanInput(snapshot(*half_used_pair()), g5_offerings(), config, NOW))
    assert result.removal.removals == ()


def test_a_pod_whose_disruption_budget_allows_nothing_keeps_its_node_out_of_the_set(
    make_config: Callable[..., Config],
) -> None:
    budget = pdb("train", match={"app": "train"}, allowed=0)
    result = run(make_config, *half_used_pair(labels={"app": "train"}), budget)
    assert result.removal.removals == ()
    [blocked_b] = [b for b in result.removal.blocked if b.node == "gpu-b"]
    assert "protected by PodDisruptionBudget default/train" in blocked_b.reason


def test_a_node_annotated_do_not_disrupt_is_never_part_of_a_set(make_config: Callable[..., Config]) -> None:
    objs = half_used_pair()
    objs[1] = g5_node("gpu-b", annotations={"karpenter.sh/do-not-disrupt": "true"})
    result = run(make_config, *objs)
    assert result.removal.removals == ()


def test_a_replacement_that_would_exceed_the_gpu_limit_while_both_run_is_not_made(
    make_config: Callable[..., Config],
) -> None:
    # 8 GPUs now, and the new node's 4 beside them until it is Ready and the old ones drained: 12.
    result = run(make_config, *half_used_pair(), clusterGPULimit=11)
    assert result.removal.removals == ()


def test_a_replacement_that_fits_the_gpu_limit_while_both_run_is_made(
    make_config: Callable[..., Config],
) -> None:
    result = run(make_config, *half_used_pair(), clusterGPULimit=12)
    [removal] = result.removal.removals
    assert removal.method == Method.REPLACE
    assert sum(la.offering.gpu_count for la in removal.replacement) == 4


def test_nodes_whose_pods_started_a_minute_ago_are_left_to_settle(make_config: Callable[..., Config]) -> None:
    result = run(make_config, *half_used_pair(bound_at=A_MINUTE_AGO))
    assert result.removal.removals == ()


def test_nodes_whose_pods_have_run_for_hours_keep_them(make_config: Callable[..., Config]) -> None:
    # Moving a pod restarts it: two hours of work lost on each, for a saving that may last minutes.
    result = run(make_config, *half_used_pair(bound_at=TWO_HOURS_AGO))
    assert result.removal.removals == ()


def test_nothing_is_replaced_while_a_node_is_being_drained(make_config: Callable[..., Config]) -> None:
    config = make_config(capacityTypes=["on-demand"], scaleDown={"replaceSavings": 0.25, "multiNode": True})
    request = PlanInput(snapshot(*half_used_pair()), g5_offerings(), config, NOW, draining={"gpu-other"})
    assert plan(request).removal.removals == ()


def test_nothing_is_consolidated_while_a_pod_waits_for_a_place(make_config: Callable[..., Config]) -> None:
    # The room a move would fill is what the waiting pod may take.
    waiting = pod("queued-1", gpu=1, cpu="20", memory="32Gi")
    assert run(make_config, *half_used_pair(), waiting).removal.removals == ()


def test_multi_node_is_off_by_default(make_config: Callable[..., Config]) -> None:
    config = make_config(capacityTypes=["on-demand"], scaleDown={"replaceSavings": 0.25})
    result = plan(PlanInput(snapshot(*half_used_pair()), g5_offerings(), config, NOW))
    assert result.removal.removals == ()


def test_multi_node_false_keeps_consolidation_to_one_node_at_a_time(
    make_config: Callable[..., Config],
) -> None:
    config = make_config(capacityTypes=["on-demand"], scaleDown={"replaceSavings": 0.25, "multiNode": False})
    result = plan(PlanInput(snapshot(*half_used_pair()), g5_offerings(), config, NOW))
    assert result.removal.removals == ()


def test_a_quarter_used_node_is_drained_onto_another_quarter_used_node_that_stays(
    make_config: Callable[..., Config],
) -> None:
    # Single-node consolidation moves pods only onto nodes that are not candidates themselves: both stay.
    result = run(
        make_config,
        g5_node("gpu-a"),
        g5_node("gpu-b"),
        training("train-1", "gpu-a"),
        training("train-2", "gpu-b"),
    )
    [removal] = result.removal.removals
    assert (removal.node, removal.method, removal.replacement) == ("gpu-a", Method.UNDERUTILISED, ())
    assert removal.reason == "multi-node: its 1 pod fit on gpu-b, which stay"


def test_a_node_that_takes_pods_stays_and_its_room_is_given_once(make_config: Callable[..., Config]) -> None:
    result = run(
        make_config,
        g5_node("gpu-a"),
        g5_node("gpu-b"),
        g5_node("gpu-c"),
        training("train-1", "gpu-a"),
        training("train-2", "gpu-b"),
        training("train-3", "gpu-c"),
    )
    # gpu-a goes onto gpu-b, which then has 8 CPUs left: gpu-c's pod fits nowhere, and gpu-b, holding two
    # pods now, is not removed itself.
    [removal] = result.removal.removals
    assert (removal.node, removal.reason) == ("gpu-a", "multi-node: its 1 pod fit on gpu-b, which stay")


def test_pods_sharing_a_gpu_move_onto_another_nodes_room_and_the_reservation_pod_is_never_evicted(
    make_config: Callable[..., Config],
) -> None:
    # Half an A10G and 10 CPUs: only a g5.12xlarge holds it, so no single node replaces gpu-a for less.
    sharing = share("infer-0", "0.5", node_name="gpu-a", group="g1")
    sharing["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "10"
    sharing["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": TEN_MINUTES_AGO}
    ]
    objs = [
        g5_node("gpu-a", labels={"nvidia.com/gpu.memory": "22888"}),
        g5_node("gpu-b", labels={"nvidia.com/gpu.memory": "22888"}),
        reservation("gpu-a", "g1"),
        sharing,
        training("train-1", "gpu-b"),
    ]
    config = make_config(
        capacityTypes=["on-demand"],
        schedulerNames=["kai-scheduler"],
        scaleDown={"replaceSavings": 0.25, "multiNode": True},
    )
    result = plan(PlanInput(snapshot(*objs), g5_offerings(), config, NOW))
    [removal] = result.removal.removals
    assert (removal.node, removal.method, removal.pods) == (
        "gpu-a",
        Method.UNDERUTILISED,
        ("default/infer-0",),
    )
    assert removal.reason == "multi-node: its 1 pod fit on gpu-b, which stay"
