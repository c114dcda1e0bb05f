"""A pod's key, DaemonSet ownership, pending and finished are worked out when it is made, and follow any copy
made with other fields."""

from __future__ import annotations

import pickle
from dataclasses import replace

import pytest

from autoscaler.core.model import OwnerRef, Pod


def test_the_key_is_namespace_and_name_and_follows_a_copy_with_another_name() -> None:
    pod = Pod("ml", "train-0")
    assert pod.key == "ml/train-0"
    assert replace(pod, name="train-1").key == "ml/train-1"
    assert replace(pod, namespace="research").key == "research/train-0"


def test_a_pod_a_daemonset_owns_is_told_from_one_a_replicaset_owns() -> None:
    agent = Pod("monitoring", "node-exporter-x", owner=OwnerRef("DaemonSet", "node-exporter", True))
    web = Pod("shop", "web-0", owner=OwnerRef("ReplicaSet", "web-7d9f8b6c5", True))
    assert agent.daemonset and not web.daemonset and not Pod("shop", "bare").daemonset
    assert not replace(agent, owner=web.owner).daemonset


@pytest.mark.parametrize(
    ("phase", "node_name", "pending", "finished"),
    [
        ("Pending", "", True, False),
        ("Pending", "node-a", False, False),  # bound, its containers starting
        ("Running", "node-a", False, False),
        ("Succeeded", "node-a", False, True),
        ("Failed", "", False, True),
        ("Unknown", "node-a", False, False),
    ],
)
def test_pending_and_finished_follow_the_phase_and_the_node(
    phase: str, node_name: str, pending: bool, finished: bool
) -> None:
    pod = Pod("shop", "web-0", phase=phase, node_name=node_name)
    assert (pod.pending, pod.finished) == (pending, finished)


def test_a_copy_made_bound_or_finished_says_so() -> None:
    waiting = Pod("shop", "web-0")
    assert not replace(waiting, node_name="node-a").pending
    assert replace(waiting, node_name="node-a", phase="Succeeded").finished


def test_derived_fields_survive_pickling_and_do_not_change_equality() -> None:
    pod = Pod("shop", "web-0", owner=OwnerRef("DaemonSet", "agent"), phase="Failed")
    copy = pickle.loads(pickle.dumps(pod))
    assert copy == pod
    assert (copy.key, copy.daemonset, copy.pending, copy.finished) == ("shop/web-0", True, False, True)
