"""What demand reads of a pending pod is kept from one plan to the next while the pod is the very same object,
and read again when the pod, its PodGroup's queue or the configuration changes."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from autoscaler.core.demand import Reason, select
from autoscaler.core.demand_memo import DemandMemo
from autoscaler.sim.pods import with_scheduled
from tests.builders import pod, podgroup, snapshot

if TYPE_CHECKING:
    from collections.abc import Callable

    from autoscaler.config.options import Config
    from autoscaler.core.model import Pod, Snapshot


def with_pods(snap: Snapshot, pods: tuple[Pod, ...]) -> Snapshot:
    return replace(snap, pods=pods)


def test_a_pod_pending_plan_after_plan_keeps_the_constraints_read_of_it(
    make_config: Callable[..., Config],
) -> None:
    snap = snapshot(pod("web-1"), pod("web-2", node_selector={"zone": "a"}))
    config, memo = make_config(), DemandMemo()
    first = select(snap, config, memo=memo)
    again = select(snap, config, memo=memo)
    assert [p.key for p in again.counted] == ["default/web-1", "default/web-2"]
    assert all(again.constraints[k] is first.constraints[k] for k in first.constraints)
    assert again.constraints == select(snap, config).constraints  # what a plan without the memo reads


def test_a_pod_that_changed_is_screened_again(make_config: Callable[..., Config]) -> None:
    gated = snapshot(pod("web-1", gates=["example.com/quota-check"]))
    config, memo = make_config(), DemandMemo()
    assert [i.reason for i in select(gated, config, memo=memo).ignored] == [Reason.GATED]
    released = snapshot(pod("web-1"))  # the gate removed: a new Pod object of the same name
    demand = select(released, config, memo=memo)
    assert [p.key for p in demand.counted] == ["default/web-1"]
    assert demand.ignored == []


def test_another_configuration_forgets_what_was_read_under_the_last(
    make_config: Callable[..., Config],
) -> None:
    snap = snapshot(pod("web-1"))
    memo = DemandMemo()
    assert [p.key for p in select(snap, make_config(), memo=memo).counted] == ["default/web-1"]
    opted_in_only = make_config(labels={"team": "ml"})
    demand = select(snap, opted_in_only, memo=memo)
    assert demand.counted == []
    assert [i.reason for i in demand.ignored] == [Reason.NOT_OPTED_IN]


def test_pods_no_longer_pending_are_forgotten(make_config: Callable[..., Config]) -> None:
    snap = snapshot(pod("web-1"), pod("web-2"))
    config, memo = make_config(), DemandMemo()
    select(snap, config, memo=memo)
    left = with_pods(snap, snap.pods[1:])
    select(left, config, memo=memo)
    assert [e.pod.key for e in memo.pods.values()] == ["default/web-2"]


def test_the_pods_that_count_come_in_the_order_a_plan_without_the_memo_gives(
    make_config: Callable[..., Config],
) -> None:
    snap = snapshot(
        pod("small-1", cpu="1"),
        pod("gpu-1", gpu=1, created="2026-11-20T09:00:00Z"),
        pod("gpu-2", gpu=1, created="2026-11-20T08:00:00Z"),
        pod("small-2", cpu="1"),
        pod("big-1", cpu="4"),
    )
    config, memo = make_config(), DemandMemo()
    plans = [
        snap,
        snap,  # the same pods again
        with_pods(snap, tuple(reversed(snap.pods))),  # the same pods, listed otherwise
        with_pods(snap, snap.pods[1:4]),  # some of them only
        with_pods(snap, (*snap.pods, *snapshot(pod("gpu-3", gpu=1)).pods)),  # and a new one
    ]
    for each in plans:
        assert [p.key for p in select(each, config, memo=memo).counted] == [
            p.key for p in select(each, config).counted
        ]


def test_a_pod_of_a_podgroup_follows_its_queue_from_plan_to_plan(make_config: Callable[..., Config]) -> None:
    member = pod("train-1", gpu=1, annotations={"pod-group-name": "train"})
    snap = snapshot(member, podgroup("train", min_member=1, queue="team-a"))
    config, memo = make_config(), DemandMemo()
    assert select(snap, config, memo=memo).queues == {"default/train-1": "team-a"}
    moved = replace(snap, podgroups=snapshot(podgroup("train", min_member=1, queue="team-b")).podgroups)
    assert select(moved, config, memo=memo).queues == {"default/train-1": "team-b"}


def test_a_pod_of_no_podgroup_keeps_its_queue_label(make_config: Callable[..., Config]) -> None:
    snap = snapshot(pod("infer-1", gpu=1, labels={"kai.scheduler/queue": "team-a"}))
    config, memo = make_config(), DemandMemo()
    for _ in range(2):
        assert select(snap, config, memo=memo).queues == {"default/infer-1": "team-a"}


def test_a_pod_whose_condition_the_scheduler_rewrote_is_matched_again_by_its_new_message(
    make_config: Callable[..., Config],
) -> None:
    snap = snapshot(pod("web-1"))
    config, memo = make_config(pendingPodReasonRegexp="Insufficient cpu"), DemandMemo()
    first = select(snap, config, memo=memo)
    [waiting] = snap.pods
    assert waiting.scheduled is not None
    other = replace(waiting.scheduled, message="0/4 nodes are available: 4 node(s) had untolerated taint.")
    mismatched = select(with_pods(snap, (with_scheduled(waiting, other),)), config, memo=memo)
    assert [i.reason for i in mismatched.ignored] == [Reason.REASON_MISMATCH]
    again = replace(waiting.scheduled, message="0/5 nodes are available: 5 Insufficient cpu.")
    matched = select(with_pods(snap, (with_scheduled(waiting, again),)), config, memo=memo)
    assert [p.key for p in matched.counted] == ["default/web-1"]
    assert matched.constraints["default/web-1"] is first.constraints["default/web-1"]  # read once


def test_a_pod_rewritten_but_for_its_condition_is_read_again(make_config: Callable[..., Config]) -> None:
    config, memo = make_config(), DemandMemo()
    assert [p.key for p in select(snapshot(pod("web-1")), config, memo=memo).counted] == ["default/web-1"]
    ignored = select(snapshot(pod("web-1", annotations={"tidal.dev/ignore": "true"})), config, memo=memo)
    assert [i.reason for i in ignored.ignored] == [Reason.IGNORED]
