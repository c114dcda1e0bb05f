"""Scale-down keeps what it read of a node from one plan to the next while the Node and its pods are the very
same objects, and works it out again when they change; what depends on the time is judged at every plan."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from autoscaler.core.planning.offerings import OfferingIndex, OfferingsMemo
from autoscaler.core.planning.planner import PlanInput, plan
from autoscaler.core.planning.rooms import NodeRooms
from tests.builders import aws_offerings, node, pod, snapshot

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from autoscaler.config.options import Config
    from autoscaler.core.model import Snapshot
    from autoscaler.core.planning.planner import Plan

NOW = 1_795_168_800.0 + 3600  # 2026-11-20T11:00:00Z
LONG_AGO = {"tidal.dev/unneeded-since": "2026-11-20T09:00:00Z"}
TEN_SECONDS_AGO = {"tidal.dev/unneeded-since": "2026-11-20T10:59:50Z"}


def gpu_node(name: str, annotations: dict[str, str]) -> dict[str, Any]:
    return node(
        name, instance_type="g5.xlarge", cpu="4", memory="16Gi", gpu=1, managed=True, annotations=annotations
    )


def running(name: str, node_name: str) -> dict[str, Any]:
    return pod(name, node_name=node_name, phase="Running", message=None, gpu=1, cpu="2", memory="8Gi")


class Planner:
    """Plans as the controller does: the nodes' rooms and facts and the offerings' index kept between plans."""

    def __init__(self, config: Config) -> None:
        self.config, self.offerings = config, aws_offerings()
        self.rooms, self.memo = NodeRooms(), OfferingsMemo(OfferingIndex)

    def __call__(self, snap: Snapshot, now: float = NOW) -> Plan:
        return plan(PlanInput(snap, self.offerings, self.config, now, rooms=self.rooms, memo=self.memo))


def test_a_busy_node_is_blocked_by_the_verdict_kept_while_its_pods_stay(
    make_config: Callable[..., Config],
) -> None:
    planner = Planner(make_config())
    snap = snapshot(gpu_node("gpu-a", LONG_AGO), running("infer-1", "gpu-a"))
    first, again = planner(snap), planner(snap)
    assert [b.reason for b in again.removal.blocked] == [
        "utilization 1.00 is at or above 0.75 (bin-selection)"
    ]
    assert again.removal.blocked[0] is first.removal.blocked[0]  # worked out once, for both plans


def test_a_busy_node_is_removed_once_its_last_pod_leaves(make_config: Callable[..., Config]) -> None:
    planner = Planner(make_config())
    busy = snapshot(gpu_node("gpu-a", LONG_AGO), running("infer-1", "gpu-a"))
    assert planner(busy).removal.removals == ()
    emptied = replace(busy, pods=())  # the very same Node, without its pod
    [removal] = planner(emptied).removal.removals
    assert (removal.node, removal.empty, removal.reason) == ("gpu-a", True, "empty; unneeded for 2h")


def test_an_empty_node_becomes_busy_when_a_pod_lands_on_it(make_config: Callable[..., Config]) -> None:
    planner = Planner(make_config())
    empty = snapshot(gpu_node("gpu-a", LONG_AGO))
    assert [r.node for r in planner(empty).removal.removals] == ["gpu-a"]
    landed = replace(empty, pods=snapshot(running("infer-1", "gpu-a")).pods)
    result = planner(landed)
    assert result.removal.removals == ()
    assert [b.reason for b in result.removal.blocked] == [
        "utilization 1.00 is at or above 0.75 (bin-selection)"
    ]


def test_an_empty_node_kept_between_plans_is_removed_once_it_has_waited_long_enough(
    make_config: Callable[..., Config],
) -> None:
    planner = Planner(make_config())
    snap = snapshot(gpu_node("gpu-a", TEN_SECONDS_AGO))
    waiting = planner(snap)
    assert [b.reason for b in waiting.removal.blocked] == ["unneeded for 10s of 30s"]
    [removal] = planner(snap, NOW + 60).removal.removals
    assert removal.reason == "empty; unneeded for 1m10s"


def test_a_node_written_anew_counts_unneeded_from_its_new_annotation(
    make_config: Callable[..., Config],
) -> None:
    planner = Planner(make_config())
    assert [r.node for r in planner(snapshot(gpu_node("gpu-a", LONG_AGO))).removal.removals] == ["gpu-a"]
    rewritten = planner(snapshot(gpu_node("gpu-a", TEN_SECONDS_AGO)))
    assert rewritten.removal.removals == ()
    assert [b.reason for b in rewritten.removal.blocked] == ["unneeded for 10s of 30s"]


def test_an_empty_node_waiting_between_plans_reports_the_wait_of_each_plan(
    make_config: Callable[..., Config],
) -> None:
    planner = Planner(make_config())
    snap = snapshot(gpu_node("gpu-a", TEN_SECONDS_AGO))
    first = planner(snap).removal.blocked
    same = planner(snap).removal.blocked
    later = planner(snap, NOW + 5).removal.blocked
    assert [b.reason for b in first] == ["unneeded for 10s of 30s"]
    assert same[0] is first[0]  # the words of the last plan, while they hold
    assert [b.reason for b in later] == ["unneeded for 15s of 30s"]
