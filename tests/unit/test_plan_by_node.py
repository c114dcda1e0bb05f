"""A plan given the pods on each node (``PlanInput.by_node``, as a cache whose pods did not change keeps them)
decides as one that groups them itself, and groups them itself when it resolves pods' claims."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

from autoscaler.cli.snapshot import SnapshotBuilder
from autoscaler.core.planning.cluster import pods_by_node
from autoscaler.core.planning.planner import PlanInput, plan
from tests.builders import aws_offerings, node, pod
from tests.unit.test_dra_plan import DRA, template, trainer
from tests.unit.test_snapshot_dra import DEVICE_CLASS

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from autoscaler.config.options import Config
    from autoscaler.core.model import Snapshot
    from autoscaler.core.planning.planner import Plan

NOW = 1_795_168_800.0


def snapshot(*objects: dict[str, Any]) -> Snapshot:
    builder = SnapshotBuilder()
    for obj in objects:
        builder.add(obj, "test")
    return builder.build()


def decided(result: Plan) -> tuple[object, ...]:
    return (
        [(la.offering.key, la.pods) for la in result.launch.launches],
        [(a.pod, a.node) for a in result.launch.absorbed],
        [(u.pod, u.reason) for u in result.launch.unplaced],
        [r.node for r in result.removal.removals],
        result.queues,
    )


def test_a_plan_given_the_pods_by_node_decides_as_one_that_groups_them(
    make_config: Callable[..., Config],
) -> None:
    snap = snapshot(
        node("busy-a", cpu="8", memory="32Gi"),
        node("idle-b", cpu="8", memory="32Gi"),
        *(
            pod(f"web-{i}", cpu="2", memory="4Gi", node_name="busy-a", phase="Running", message=None)
            for i in range(3)
        ),
        *(pod(f"batch-{i}", cpu="3", memory="8Gi") for i in range(5)),
    )
    offerings = aws_offerings()
    cfg = make_config()
    alone = plan(PlanInput(snap, offerings, cfg, NOW))
    given = plan(PlanInput(snap, offerings, cfg, NOW, by_node=pods_by_node(snap.pods)))
    assert decided(given) == decided(alone)
    assert given.launch.absorbed  # room on the nodes was counted from the pods given on them


def test_pods_whose_claims_are_resolved_are_grouped_anew_not_taken_from_the_caller(
    make_config: Callable[..., Config],
) -> None:
    gpu_node = node(
        "dra-a",
        instance_type="p5.48xlarge",
        cpu="192",
        memory="2048Gi",
        labels={"nvidia.com/gpu.present": "true"},
    )
    running = trainer("train-0", "two-h100", node_name="dra-a", phase="Running")
    waiting = [trainer(f"train-{i}", "two-h100") for i in (1, 2)]
    snap = snapshot(DEVICE_CLASS, template("two-h100", 2), gpu_node, running, *waiting)
    cfg = make_config(**copy.deepcopy(DRA))
    offerings = aws_offerings()
    alone = plan(PlanInput(snap, offerings, cfg, NOW))
    stale = {name: list(pods) for name, pods in pods_by_node(snap.pods).items()}
    given = plan(PlanInput(snap, offerings, cfg, NOW, by_node=stale))
    assert decided(given) == decided(alone)
