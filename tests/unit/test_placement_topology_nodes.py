"""A node added to the inter-pod counts with the pods already bound to it counts them as placing them there
one by one would: for the spread and affinity counts, the anti-affinity those pods hold, and a trial that
takes the node back."""

from __future__ import annotations

from typing import Any

from autoscaler.core.model import Pod
from autoscaler.core.placement.journal import Journal
from autoscaler.core.placement.topology import Topology
from autoscaler.runtime.kube.convert import pod_from_dict
from tests.builders import anti_affinity, pod, zone_spread

HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
NODES = {
    "a": {HOSTNAME: "a", ZONE: "us-east-1a"},
    "b": {HOSTNAME: "b", ZONE: "us-east-1b"},
    "c": {HOSTNAME: "c", ZONE: "us-east-1c"},
}


def bound(name: str, node: str, **kw: Any) -> Pod:
    return pod_from_dict(pod(name, node_name=node, phase="Running", message=None, **kw))


def cluster_pods() -> dict[str, list[Pod]]:
    """Web replicas spread over zones, a cache that keeps other caches off its node, and a batch pod."""
    web = {"app": "web"}
    return {
        "a": [
            bound("web-1", "a", labels=web, spread=[zone_spread(web)]),
            bound(
                "cache-1",
                "a",
                labels={"app": "cache"},
                pod_anti_affinity=[anti_affinity(HOSTNAME, {"app": "cache"})],
            ),
        ],
        "b": [bound("web-2", "b", labels=web, spread=[zone_spread(web)]), bound("batch-1", "b")],
        "c": [],
    }


PROBES = [
    pod_from_dict(pod("web-3", labels={"app": "web"}, spread=[zone_spread({"app": "web"})])),
    pod_from_dict(pod("cache-2", labels={"app": "cache"})),
    pod_from_dict(
        pod("front-1", labels={"app": "front"}, pod_affinity=[anti_affinity(ZONE, {"app": "web"})])
    ),
    pod_from_dict(
        pod("solo-1", labels={"app": "solo"}, pod_anti_affinity=[anti_affinity(ZONE, {"app": "web"})])
    ),
]


def answers(topology: Topology) -> list[object]:
    """What the filters say of every probe pod on every node, and the counts a spread pod reads."""
    out: list[object] = [topology.idle, sorted(topology.tracked_keys()), topology.version, topology.changes]
    for probe in PROBES:
        for name, labels in NODES.items():
            out.append((probe.name, name, topology.check(probe, labels), topology.spread_load(probe, labels)))
    return out


def placed_one_by_one(pods: dict[str, list[Pod]], topology: Topology) -> Topology:
    for name, labels in NODES.items():
        topology.add_node(name, labels)
        for p in pods[name]:
            topology.place(p, name)
    return topology


def added_with_pods(pods: dict[str, list[Pod]], topology: Topology) -> Topology:
    for name, labels in NODES.items():
        topology.add_node(name, labels, pods=pods[name])
    return topology


def test_nodes_added_with_their_pods_answer_as_pods_placed_one_by_one() -> None:
    pods = cluster_pods()
    assert answers(added_with_pods(pods, Topology())) == answers(placed_one_by_one(pods, Topology()))


def test_nodes_added_with_their_pods_after_counts_are_kept_update_those_counts() -> None:
    pods = cluster_pods()
    by_pods, one_by_one = Topology(), Topology()
    for topology in (by_pods, one_by_one):
        for probe in PROBES:
            topology.prepare(probe)  # the groups exist before any node does
    assert not by_pods.idle
    assert answers(added_with_pods(pods, by_pods)) == answers(placed_one_by_one(pods, one_by_one))


def test_a_trial_that_adds_a_node_with_pods_is_taken_back_as_one_that_placed_them() -> None:
    pods = cluster_pods()
    outcomes = []
    for bulk in (True, False):
        journal = Journal()
        topology = Topology(journal=journal)
        for probe in PROBES:
            topology.prepare(probe)
        topology.add_node("c", NODES["c"])
        before = answers(topology)
        mark = journal.mark()
        if bulk:
            topology.add_node("a", NODES["a"], pods=pods["a"])
        else:
            topology.add_node("a", NODES["a"])
            for p in pods["a"]:
                topology.place(p, "a")
        assert answers(topology) != before
        journal.rollback(mark)
        outcomes.append(answers(topology))
    assert outcomes[0] == outcomes[1]
