"""Every pending pod is either counted as demand or gets exactly one named reason."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import yaml

from autoscaler.core.demand import Reason, select
from tests.builders import (
    INSUFFICIENT_CPU,
    INSUFFICIENT_GPU,
    KAI_NO_CAPACITY,
    KAI_OVER_LIMIT,
    node,
    pod,
    podgroup,
    queue,
    snapshot,
)

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from autoscaler.config.options import Config
    from autoscaler.core.demand import Demand

KAI_REGEXP = yaml.safe_load((Path(__file__).parents[2] / "config/examples/kai.yaml").read_text())[
    "pendingPodReasonRegexp"
]


def reasons(demand: Demand) -> dict[str, str]:
    return {i.pod: i.reason for i in demand.ignored}


def test_a_pod_the_scheduler_could_not_place_counts(make_config: Callable[..., Config]) -> None:
    demand = select(snapshot(pod("web-1")), make_config())
    assert [p.key for p in demand.counted] == ["default/web-1"]
    assert demand.ignored == []


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"node_name": "node-a"}, Reason.BOUND),
        ({"gates": ["example.com/quota-check"]}, Reason.GATED),
        ({"annotations": {"tidal.dev/ignore": "true"}}, Reason.IGNORED),
        ({"annotations": {"pod.elotl.co/ignore": "true"}}, Reason.IGNORED),
        ({"scheduler": "volcano"}, Reason.OTHER_SCHEDULER),
        ({"owner_kind": "DaemonSet"}, Reason.DAEMONSET),
        ({"message": None}, Reason.NO_CONDITION),
    ],
)
def test_each_pod_that_does_not_count_gets_its_reason(
    make_config: Callable[..., Config],
    kwargs: dict[str, Any],
    reason: str,
) -> None:
    demand = select(snapshot(pod("web-1", **kwargs)), make_config())
    assert demand.counted == []
    assert reasons(demand) == {"default/web-1": reason}


@pytest.mark.parametrize(
    ("annotations", "detail"),
    [
        ({"tidal.dev/ignore": "true"}, "annotated tidal.dev/ignore"),
        ({"pod.elotl.co/ignore": "True"}, "annotated pod.elotl.co/ignore"),
        ({"tidal.dev/ignore": "true", "pod.elotl.co/ignore": "true"}, "annotated tidal.dev/ignore"),
    ],
)
def test_an_ignored_pod_is_reported_with_the_annotation_spelling_it_carries(
    make_config: Callable[..., Config], annotations: dict[str, str], detail: str
) -> None:
    demand = select(snapshot(pod("batch-1", annotations=annotations)), make_config())
    assert [(i.reason, i.detail) for i in demand.ignored] == [(Reason.IGNORED, detail)]


def test_tidal_spelling_wins_over_luna_spelling_of_ignore(make_config: Callable[..., Config]) -> None:
    annotations = {"tidal.dev/ignore": "false", "pod.elotl.co/ignore": "true"}
    demand = select(snapshot(pod("batch-1", annotations=annotations)), make_config())
    assert [p.key for p in demand.counted] == ["default/batch-1"]


def test_pods_without_the_opt_in_labels_are_not_counted(make_config: Callable[..., Config]) -> None:
    cfg = make_config(labels="team=ml,tier=batch")
    opted = pod("train-1", labels={"team": "ml", "tier": "batch"})
    other = pod("web-1", labels={"team": "web"})
    demand = select(snapshot(opted, other), cfg)
    assert [p.key for p in demand.counted] == ["default/train-1"]
    assert reasons(demand) == {"default/web-1": Reason.NOT_OPTED_IN}


def test_pods_without_the_opt_in_annotations_are_not_counted_even_with_no_annotation_at_all(
    make_config: Callable[..., Config],
) -> None:
    cfg = make_config(podAnnotations="tidal.dev/managed=yes")
    opted = pod("train-1", annotations={"tidal.dev/managed": "yes"})
    other = pod("web-1", annotations={"tidal.dev/managed": "no"})
    bare = pod("web-2")
    demand = select(snapshot(opted, other, bare), cfg)
    assert [p.key for p in demand.counted] == ["default/train-1"]
    assert reasons(demand) == {"default/web-1": Reason.NOT_OPTED_IN, "default/web-2": Reason.NOT_OPTED_IN}


def test_a_message_that_does_not_match_the_regexp_is_not_counted(make_config: Callable[..., Config]) -> None:
    cfg = make_config(pendingPodReasonRegexp=KAI_REGEXP)
    held = pod("research-1", gpu=2, scheduler="kai-scheduler", message=KAI_OVER_LIMIT)
    starved = pod("prod-1", gpu=1, scheduler="kai-scheduler", message=KAI_NO_CAPACITY)
    default = pod("infer-1", gpu=1, message=INSUFFICIENT_GPU)
    demand = select(snapshot(held, starved, default), cfg)
    assert sorted(p.key for p in demand.counted) == ["default/infer-1", "default/prod-1"]
    assert reasons(demand) == {"default/research-1": Reason.REASON_MISMATCH}


def test_a_pod_whose_kai_queue_would_exceed_its_gpu_limit_never_counts(
    make_config: Callable[..., Config],
) -> None:
    # The message matches (KAI said "no capacity" before the queue filled up), but the Queue says otherwise.
    running = [
        pod(
            f"research-run-{i}",
            gpu=1,
            scheduler="kai-scheduler",
            node_name="gpu-a",
            labels={"kai.scheduler/queue": "research"},
            phase="Running",
        )
        for i in range(7)
    ]
    waiting = [
        pod(
            f"research-{i}",
            gpu=1,
            scheduler="kai-scheduler",
            message=KAI_NO_CAPACITY,
            labels={"kai.scheduler/queue": "research"},
            created=f"2026-11-20T10:0{i}:00Z",
        )
        for i in range(3)
    ]
    demand = select(snapshot(queue("research", quota=4, limit=8), *running, *waiting), make_config())
    assert [p.key for p in demand.counted] == ["default/research-0"]
    assert reasons(demand) == {
        "default/research-1": Reason.QUEUE_LIMIT,
        "default/research-2": Reason.QUEUE_LIMIT,
    }
    detail = next(i.detail for i in demand.ignored if i.pod == "default/research-1")
    assert detail == "queue research would exceed its GPU limit: 8 allocated + 1 requested > limit 8"


def test_a_parent_queue_limit_applies_to_its_children(make_config: Callable[..., Config]) -> None:
    objs = [
        queue("org", quota=4, limit=4),
        queue("team-a", quota=4, limit=8, parent="org"),
        *[
            pod(
                f"a-{i}",
                gpu=2,
                scheduler="kai-scheduler",
                message=KAI_NO_CAPACITY,
                labels={"kai.scheduler/queue": "team-a"},
                created=f"2026-11-20T10:0{i}:00Z",
            )
            for i in range(3)
        ],
    ]
    demand = select(snapshot(*objs), make_config())
    assert len(demand.counted) == 2
    assert "queue org would exceed" in demand.ignored[0].detail


def serving(
    name: str, *, gpu: int = 1, node_name: str | None = None, queue_name: str = "inference", **kw: Any
) -> dict[str, Any]:
    """A KAI pod of the inference queue: running when ``node_name`` is given, else pending for capacity."""
    if node_name:
        kw.update(node_name=node_name, phase="Running")
    else:
        kw.setdefault("message", KAI_NO_CAPACITY)
    labels = {"kai.scheduler/queue": queue_name, **kw.pop("labels", {})}
    return pod(name, gpu=gpu, scheduler="kai-scheduler", labels=labels, **kw)


NON_PREEMPTIBLE = {"kai.scheduler/preemptibility": "non-preemptible"}


def test_a_non_preemptible_pod_that_would_take_its_queue_past_its_quota_never_counts(
    make_config: Callable[..., Config],
) -> None:
    # KAI runs non-preemptible work only within the queue's quota, however far the limit is.
    objs = [
        queue("inference", quota=2, limit=8),
        serving("llm-0", node_name="gpu-a", labels=NON_PREEMPTIBLE),
        serving("llm-1", labels=NON_PREEMPTIBLE, created="2026-11-20T10:01:00Z"),
        serving("llm-2", labels=NON_PREEMPTIBLE, created="2026-11-20T10:02:00Z"),
    ]
    demand = select(snapshot(*objs), make_config())
    assert [p.key for p in demand.counted] == ["default/llm-1"]
    assert reasons(demand) == {"default/llm-2": Reason.QUEUE_QUOTA}
    detail = next(i.detail for i in demand.ignored)
    assert detail == (
        "queue inference would exceed its GPU quota with non-preemptible pods, which KAI runs only within "
        "quota: 2 allocated + 1 requested > quota 2"
    )


def test_preemptible_pods_count_beyond_the_quota_up_to_the_limit(make_config: Callable[..., Config]) -> None:
    objs = [
        queue("inference", quota=1, limit=3),
        serving("llm-0", node_name="gpu-a", labels=NON_PREEMPTIBLE),
        *[serving(f"batch-{i}", created=f"2026-11-20T10:0{i}:00Z") for i in range(3)],
    ]
    demand = select(snapshot(*objs), make_config())
    assert [p.key for p in demand.counted] == ["default/batch-0", "default/batch-1"]
    assert reasons(demand) == {"default/batch-2": Reason.QUEUE_LIMIT}


def test_a_fractional_queue_limit_holds_gpu_fractions_as_kai_counts_them(
    make_config: Callable[..., Config],
) -> None:
    # KAI's queue resources are in GPUs with fractions: 1.5 GPUs hold one whole GPU and one half, not two halves.
    objs = [
        queue("inference", quota=0, limit=1.5),
        serving("llm-0", node_name="gpu-a"),
        serving("chat-0", gpu=0, annotations={"gpu-fraction": "0.5"}, created="2026-11-20T10:01:00Z"),
        serving("chat-1", gpu=0, annotations={"gpu-fraction": "0.5"}, created="2026-11-20T10:02:00Z"),
    ]
    demand = select(snapshot(*objs), make_config())
    assert [p.key for p in demand.counted] == ["default/chat-0"]
    assert reasons(demand) == {"default/chat-1": Reason.QUEUE_LIMIT}
    detail = next(i.detail for i in demand.ignored)
    assert detail == "queue inference would exceed its GPU limit: 1.5 allocated + 0.5 requested > limit 1.5"


def test_a_pod_of_priority_100_or_more_is_non_preemptible_when_no_label_says_otherwise(
    make_config: Callable[..., Config],
) -> None:
    objs = [
        queue("inference", quota=1, limit=4),
        serving("llm-0", node_name="gpu-a", priority=125),
        serving("llm-1", priority=125),
        serving("llm-2", priority=125, labels={"kai.scheduler/preemptibility": "preemptible"}),
    ]
    demand = select(snapshot(*objs), make_config())
    assert [p.key for p in demand.counted] == ["default/llm-2"]
    assert reasons(demand) == {"default/llm-1": Reason.QUEUE_QUOTA}


def test_a_semi_preemptible_gang_holds_to_the_quota_only_its_min_member_pods(
    make_config: Callable[..., Config],
) -> None:
    # minMember 2 of 4 workers must fit the quota of 2; the two elastic ones may go over it.
    workers = [serving(f"elastic-{i}", annotations={"pod-group-name": "pg-elastic"}) for i in range(4)]
    group = podgroup("pg-elastic", min_member=2, queue="inference", preemptibility="Semi-Preemptible")
    fits = select(snapshot(queue("inference", quota=2, limit=8), group, *workers), make_config())
    assert [(g.key, len(g.pods)) for g in fits.gangs] == [("default/pg-elastic", 4)]
    held = select(snapshot(queue("inference", quota=1, limit=8), group, *workers), make_config())
    assert held.gangs == [] and set(reasons(held).values()) == {Reason.QUEUE_QUOTA}


def test_gang_members_are_grouped_and_counted_together(make_config: Callable[..., Config]) -> None:
    members = [
        pod(
            f"llama-{i}",
            gpu=1,
            scheduler="kai-scheduler",
            message=KAI_NO_CAPACITY,
            annotations={"pod-group-name": "pg-llama"},
        )
        for i in range(4)
    ]
    demand = select(snapshot(podgroup("pg-llama", min_member=4, queue="prod"), *members), make_config())
    assert demand.singles == []
    assert [(g.key, len(g.pods)) for g in demand.gangs] == [("default/pg-llama", 4)]


def test_a_gang_with_fewer_pods_than_min_member_waits(make_config: Callable[..., Config]) -> None:
    members = [pod(f"llama-{i}", gpu=1, annotations={"pod-group-name": "pg-llama"}) for i in range(3)]
    demand = select(snapshot(podgroup("pg-llama", min_member=4, queue="prod"), *members), make_config())
    assert demand.gangs == []
    assert set(reasons(demand).values()) == {Reason.GANG_INCOMPLETE}


def test_a_bad_instance_annotation_is_a_reason_naming_the_annotation_and_value(
    make_config: Callable[..., Config],
) -> None:
    bad = pod("web-1", annotations={"tidal.dev/instance-type-regexp": "g5.(xlarge"})
    demand = select(snapshot(bad), make_config())
    assert reasons(demand) == {"default/web-1": Reason.BAD_ANNOTATION}
    assert re.search(
        r"annotation tidal.dev/instance-type-regexp: invalid regexp 'g5.\(xlarge'", demand.ignored[0].detail
    )


def test_counted_and_ignored_cover_every_pending_pod_and_nothing_else(
    make_config: Callable[..., Config],
) -> None:
    pods = [
        pod("a-1"),
        pod("b-1", node_name="n"),
        pod("c-1", gates=["g"]),
        pod("d-1", phase="Running", node_name="n", message=None),
    ]
    demand = select(snapshot(node("n"), *pods), make_config())
    keys = sorted([p.key for p in demand.counted] + [i.pod for i in demand.ignored])
    assert keys == ["default/a-1", "default/b-1", "default/c-1"]


def test_counted_pods_are_ordered_by_priority_then_size(make_config: Callable[..., Config]) -> None:
    pods = [
        pod("small-1", cpu="1"),
        pod("gpu-1", gpu=1, message=INSUFFICIENT_GPU),
        pod("urgent-1", cpu="1", priority=1000),
    ]
    demand = select(snapshot(*pods), make_config())
    assert [p.name for p in demand.counted] == ["urgent-1", "gpu-1", "small-1"]


def test_counted_pods_alike_in_priority_and_size_are_ordered_oldest_first_then_by_uid(
    make_config: Callable[..., Config],
) -> None:
    # Replicas of two Deployments, created over three seconds, written in no particular order: each size in
    # turn (GPU, then cpu, then memory), and within it the oldest first, then by uid (a stable order).
    pods = [
        pod("web-c", cpu="1", memory="2Gi", created="2026-11-20T10:00:02Z"),
        pod("api-b", cpu="2", memory="1Gi", created="2026-11-20T10:00:01Z"),
        pod("web-a", cpu="1", memory="2Gi", created="2026-11-20T10:00:00Z"),
        pod("web-b", cpu="1", memory="4Gi", created="2026-11-20T10:00:01Z"),
        pod("api-a", cpu="2", memory="1Gi", created="2026-11-20T10:00:01Z"),
        pod("train-a", cpu="1", gpu=1, created="2026-11-20T10:00:02Z", message=INSUFFICIENT_GPU),
        pod("web-d", cpu="1", memory="2Gi", created="2026-11-20T10:00:00Z"),
    ]
    demand = select(snapshot(*pods), make_config())
    # api-b was written (so given its uid) before api-a, web-a before web-d.
    assert [p.name for p in demand.counted] == [
        "train-a",
        "api-b",
        "api-a",
        "web-b",
        "web-a",
        "web-d",
        "web-c",
    ]


def test_scheduler_message_is_matched_as_written(make_config: Callable[..., Config]) -> None:
    cfg = make_config(pendingPodReasonRegexp="Insufficient cpu")
    demand = select(snapshot(pod("web-1", message=INSUFFICIENT_CPU)), cfg)
    assert len(demand.counted) == 1


def test_gang_members_that_already_finished_count_toward_min_member(
    make_config: Callable[..., Config],
) -> None:
    # Two members ran to completion; their two restarted siblings run on their own, as KAI admits them.
    done = [
        pod(
            f"llama-{i}",
            gpu=4,
            annotations={"pod-group-name": "pg-llama"},
            node_name="ip-10-0-0-9",
            phase="Succeeded",
            message=None,
        )
        for i in range(2)
    ]
    restarted = [
        pod(f"llama-{i}-r", gpu=4, message=INSUFFICIENT_GPU, annotations={"pod-group-name": "pg-llama"})
        for i in range(2, 4)
    ]
    demand = select(snapshot(podgroup("pg-llama", min_member=4, queue=""), *done, *restarted), make_config())
    assert [(g.key, len(g.pods)) for g in demand.gangs] == [("default/pg-llama", 2)]
