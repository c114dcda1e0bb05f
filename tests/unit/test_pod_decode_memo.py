"""A decoder's memo makes one value of what replicas repeat field for field (their owner, the PodScheduled
condition they were left pending with), and reads anything else as decoding without it does."""

from __future__ import annotations

import pytest

from autoscaler.core.quantity import QuantityMemo
from autoscaler.runtime.kube.convert import ConversionError, pod_from_dict
from tests.builders import INSUFFICIENT_CPU
from tests.builders import pending_replica as replica


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
    assert other.scheduled.message.startswith("0/4") and first.scheduled.message == INSUFFICIENT_CPU
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
