"""The emulated scheduler rewrites a waiting pod's PodScheduled condition with ``with_scheduled``: the same Pod,
field for field (derived ones included), as ``dataclasses.replace`` makes."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from autoscaler.core.model import Condition
from autoscaler.runtime.kube.convert import pod_from_dict
from autoscaler.sim.pods import with_scheduled
from tests.unit.test_pod_maker import PODS, every_field

WAITING = Condition("False", "Unschedulable", "0/3 nodes are available: 3 Insufficient cpu.", 120.0)


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
