"""A decoder's memo makes one value of what replicas repeat field for field (their owner, the PodScheduled
condition they were left pending with), and reads anything else as decoding without it does."""

from __future__ import annotations

from typing import Any

import pytest

from autoscaler.core.quantity import QuantityMemo
from autoscaler.runtime.kube.convert import ConversionError, pod_from_dict

MESSAGE = "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are available."


def replica(
    i: int, *, message: str = MESSAGE, since: object = "2026-11-20T10:00:05Z", controller: object = True
) -> dict[str, Any]:
    """A pending replica of the Deployment web, as the API server returns it."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"web-7d9f8b6c5-{i:05x}",
            "namespace": "shop",
            "uid": f"uid-web-{i}",
            "creationTimestamp": "2026-11-20T10:00:00Z",
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": "web-7d9f8b6c5",
                    "controller": controller,
                }
            ],
        },
        "spec": {"containers": [{"name": "web", "resources": {"requests": {"cpu": "2", "memory": "4Gi"}}}]},
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": message,
                    "lastTransitionTime": since,
                }
            ],
        },
    }


def test_replicas_read_with_one_memo_share_their_owner_and_pending_condition() -> None:
    memo = QuantityMemo()
    first, second = pod_from_dict(replica(1), memo), pod_from_dict(replica(2), memo)
    assert first.scheduled is second.scheduled and first.owner is second.owner
    alone = pod_from_dict(replica(1))
    assert (first.scheduled, first.owner) == (alone.scheduled, alone.owner)


def test_a_condition_that_differs_in_its_message_or_time_is_its_own() -> None:
    memo = QuantityMemo()
    first = pod_from_dict(replica(1), memo)
    other = pod_from_dict(replica(2, message="0/4 nodes are available: 4 Insufficient cpu."), memo)
    later = pod_from_dict(replica(3, since="2026-11-20T10:00:07Z"), memo)
    assert first.scheduled is not None and other.scheduled is not None and later.scheduled is not None
    assert other.scheduled.message.startswith("0/4") and first.scheduled.message == MESSAGE
    assert later.scheduled.last_transition == first.scheduled.last_transition + 2  # type: ignore[operator]


def test_a_bad_transition_time_is_refused_naming_its_field_after_good_ones_were_kept() -> None:
    memo = QuantityMemo()
    pod_from_dict(replica(1), memo)
    with pytest.raises(ConversionError, match=r"status\.conditions\[0\]\.lastTransitionTime"):
        pod_from_dict(replica(2, since="yesterday"), memo)
    with pytest.raises(ConversionError, match=r"status\.conditions\[0\]\.lastTransitionTime"):
        pod_from_dict(replica(3, since=17), memo)


@pytest.mark.parametrize("controller", [True, 1, None, False, 0, "true"])
def test_an_owner_reads_the_same_with_and_without_the_memo_whatever_its_controller_flag(
    controller: object,
) -> None:
    memo = QuantityMemo()
    pod_from_dict(replica(1), memo)  # a controlling owner of the same kind and name, kept
    assert (
        pod_from_dict(replica(2, controller=controller), memo).owner
        == pod_from_dict(replica(2, controller=controller)).owner
    )
