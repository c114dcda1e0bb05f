"""A baseline policy keeps what it derived from the offerings and config only while both stay the same.

The simulator calls a baseline's planner once per reconcile; preparing the offerings again every time made
large scenarios slow, but a changed ConfigMap or catalog must still be planned with at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from autoscaler.core.planning.planner import PlanInput
from autoscaler.sim.baselines import planner_for
from tests.builders import aws_offerings, node, pod, snapshot

if TYPE_CHECKING:
    from collections.abc import Callable

    from autoscaler.config.options import Config
    from autoscaler.core.model import Snapshot

NOW = 1_795_168_800.0


def pending_gpu_pods() -> Snapshot:
    return snapshot(
        pod("train-0", gpu=1, cpu="2", memory="8Gi"), pod("train-1", gpu=1, cpu="2", memory="8Gi")
    )


@pytest.mark.parametrize("policy", ["ca-like", "karpenter-like"])
def test_a_new_gpu_limit_applies_on_the_next_plan(make_config: Callable[..., Config], policy: str) -> None:
    planner = planner_for(policy)
    assert planner is not None
    offerings = aws_offerings()
    first = planner(PlanInput(pending_gpu_pods(), offerings, make_config(), NOW))
    assert first.launch.gpus_after >= 2
    assert first.launch.unplaced == ()

    limited = planner(PlanInput(pending_gpu_pods(), offerings, make_config(clusterGPULimit=1), NOW))
    assert limited.launch.gpus_after == 1
    assert [u.pod for u in limited.launch.unplaced] == ["default/train-1"]


@pytest.mark.parametrize("policy", ["ca-like", "karpenter-like"])
def test_offerings_that_went_away_are_not_planned_on_the_next_plan(
    make_config: Callable[..., Config], policy: str
) -> None:
    planner = planner_for(policy)
    assert planner is not None
    config = make_config()
    offerings = aws_offerings()
    first = planner(PlanInput(pending_gpu_pods(), offerings, config, NOW))
    used = {la.offering.instance_type for la in first.launch.launches}

    rest = [o for o in offerings if o.instance_type not in used]
    second = planner(PlanInput(pending_gpu_pods(), rest, config, NOW))
    assert second.launch.launches
    assert not used & {la.offering.instance_type for la in second.launch.launches}


@pytest.mark.parametrize("policy", ["ca-like", "karpenter-like"])
def test_a_baseline_never_removes_a_replacement_waiting_for_the_pods_of_the_node_it_replaces(
    make_config: Callable[..., Config], policy: str
) -> None:
    # The controller launched gpu-b to replace gpu-a and drains gpu-a once gpu-b is Ready: gpu-b is empty
    # until then. Removing it as empty would make the controller launch the next replacement, and so on.
    since = {"tidal.dev/unneeded-since": "2026-11-20T09:00:00Z"}
    waiting = {
        "tidal.dev/disruption": "replace",
        "tidal.dev/disruption-since": "2026-11-20T09:58:00Z",
        "tidal.dev/replacements": "tok-1",
        **since,
    }
    objs = snapshot(
        node(
            "gpu-a",
            instance_type="g5.xlarge",
            cpu="4",
            memory="16Gi",
            gpu=1,
            managed=True,
            annotations=waiting,
        ),
        node(
            "gpu-b",
            instance_type="g5.xlarge",
            cpu="4",
            memory="16Gi",
            gpu=1,
            managed=True,
            labels={"tidal.dev/launch-token": "tok-1"},
            annotations=since,
        ),
        pod("train-0", node_name="gpu-a", phase="Running", message=None, gpu=1, cpu="3", memory="12Gi"),
    )
    planner = planner_for(policy)
    assert planner is not None
    result = planner(PlanInput(objs, aws_offerings(), make_config(), NOW))
    assert result.removal.removals == ()
    reasons = {b.node: b.reason for b in result.removal.blocked}
    assert reasons["gpu-b"] == "replacement for node gpu-a, kept for its pods"
