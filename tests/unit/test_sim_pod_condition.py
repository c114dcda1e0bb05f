"""The emulated scheduler rewrites a waiting pod's PodScheduled condition with ``with_scheduled``: the same Pod,
field for field (derived ones included), as ``dataclasses.replace`` makes."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from autoscaler.core.model import Condition, Pod
from autoscaler.runtime.kube.convert import pod_from_dict
from autoscaler.sim.pods import with_scheduled
from tests.builders import pod

PODS = {
    "pending": pod("web-1"),
    "gpu, constrained": pod(
        "train-0",
        namespace="ml",
        gpu=2,
        labels={"app": "train"},
        node_selector={"karpenter.sh/capacity-type": "spot"},
        tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        host_ports=[8443],
        priority=1000,
    ),
    "shares a GPU": pod("infer-0", annotations={"gpu-fraction": "0.5"}, cpu="1", memory=None),
}
WAITING = Condition("False", "Unschedulable", "0/3 nodes are available: 3 Insufficient cpu.", 120.0)


def every_field(p: Pod) -> dict[str, Any]:
    return {f.name: getattr(p, f.name) for f in dataclasses.fields(Pod)}


@pytest.mark.parametrize("obj", list(PODS.values()), ids=list(PODS))
def test_a_rewritten_condition_makes_the_pod_replace_makes(obj: dict[str, Any]) -> None:
    before = pod_from_dict(obj)
    after = with_scheduled(before, WAITING)
    assert every_field(after) == every_field(dataclasses.replace(before, scheduled=WAITING))
    assert after.scheduled is WAITING and before.scheduled is not WAITING


def test_a_rewritten_pod_stays_frozen() -> None:
    after = with_scheduled(pod_from_dict(PODS["pending"]), WAITING)
    with pytest.raises(dataclasses.FrozenInstanceError):
        after.phase = "Running"  # type: ignore[misc]
