"""Disruption on the real control plane: drain through the Eviction API, PodDisruptionBudgets decided by the
real disruption controller, protections honoured, replacements Ready before anything is touched.

A node is made to drift the way a user makes it drift: the configuration's ``nodeLabels`` change (a hot
reload), so the nodes launched with the old labels no longer match what tidal would launch and are replaced.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import kubernetes.client
import pytest

from tests.e2e.control_plane.conftest import Cluster
from tests.e2e.control_plane.observe import gpus, ready
from tests.e2e.control_plane.workloads import deployment
from tests.k8s.history import History
from tests.k8s.tidal import Tidal, wait_until

BEFORE, AFTER = {"team": "vision"}, {"team": "vision-v2"}


@pytest.fixture
def history(cluster: Cluster) -> Iterator[History]:
    h = History(cluster.api, cluster.namespace)
    yield h
    h.stop()


def one_pod_on_one_node(cluster: Cluster, **template: Any) -> tuple[Tidal, Any, Any]:
    """tidal running with the first labels, a one-replica Deployment bound onto the node it launched."""
    t = cluster.tidal(cluster.config(nodeLabels=BEFORE))
    cluster.create(deployment("web", replicas=1, **template))
    [pod] = cluster.wait_bound(1, timeout=90)
    wait_until(
        lambda: (
            cluster.core.read_namespaced_pod(pod.metadata.name, cluster.namespace).status.phase == "Running"
        ),
        timeout=30,
        what="the pod running",
    )
    node = cluster.core.read_node(pod.spec.node_name)
    assert node.metadata.labels["team"] == BEFORE["team"]
    return t, pod, node


def drift(cluster: Cluster, t: Tidal) -> None:
    """Change the configuration's nodeLabels, as editing the ConfigMap does, and wait until tidal runs it."""
    before = t.output().count("config_reloaded")
    t.write_config(cluster.config(nodeLabels=AFTER))
    wait_until(lambda: t.output().count("config_reloaded") > before, timeout=60, what="the reload applied")


def left_alone(cluster: Cluster, t: Tidal, pod: Any, node: Any) -> None:
    """Several reconciles later the node and its pod are as they were, and nothing was bought."""
    t.wait_reconciles(3)
    kept = cluster.core.read_node(node.metadata.name)
    assert not kept.spec.unschedulable
    current = cluster.core.read_namespaced_pod(pod.metadata.name, cluster.namespace)
    assert current.metadata.uid == pod.metadata.uid
    assert current.metadata.deletion_timestamp is None
    assert current.spec.node_name == node.metadata.name
    assert len(cluster.cloud(cluster.config()).launched()) == 1


def replaced(cluster: Cluster, node: Any) -> Any:
    """Until the node is gone and the Deployment's pod runs on a node with the new labels."""
    wait_until(
        lambda: node.metadata.name not in {n.metadata.name for n in cluster.nodes()},
        timeout=90,
        what=f"node {node.metadata.name} removed",
    )
    [pod] = wait_until(
        lambda: [p for p in cluster.bound() if p.metadata.deletion_timestamp is None],
        timeout=60,
        what="the pod bound again",
    )
    new = cluster.core.read_node(pod.spec.node_name)
    assert new.metadata.labels["team"] == AFTER["team"]
    return new


def test_a_drifted_nodes_replacement_is_ready_with_its_gpus_before_the_old_node_is_touched(
    cluster: Cluster, history: History
) -> None:
    t, pod, old = one_pod_on_one_node(cluster, cpu="2", memory="8Gi", gpus=1)
    drift(cluster, t)
    new = replaced(cluster, old)
    assert gpus(new) >= 1

    up = history.first("Node", new.metadata.name, lambda c: ready(c.obj) and gpus(c.obj) >= 1)
    cordoned = history.first("Node", old.metadata.name, lambda c: bool(c.obj.spec.unschedulable))
    evicted = history.first(
        "Pod",
        pod.metadata.name,
        lambda c: c.type == "DELETED" or c.obj.metadata.deletion_timestamp is not None,
    )
    assert up is not None and cordoned is not None and evicted is not None, history.changes
    # The API server's own order: the replacement Ready with its GPU, then the cordon, then the eviction.
    assert up < cordoned <= evicted
    cloud = cluster.cloud(cluster.config())
    assert [i.state.value for i in cloud.launched() if i.provider_id == old.spec.provider_id] == [
        "terminated"
    ]
    assert len(cloud.launched()) == 2


def test_a_pod_disruption_budget_that_allows_no_disruption_keeps_the_drifted_node_until_it_is_lifted(
    cluster: Cluster,
) -> None:
    t, pod, node = one_pod_on_one_node(cluster, cpu="1", memory="2Gi")
    policy = kubernetes.client.PolicyV1Api(cluster.api)
    policy.create_namespaced_pod_disruption_budget(
        cluster.namespace,
        {
            "metadata": {"name": "web"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
        },
    )
    # The real disruption controller decides what the budget allows: nothing, with one pod and minAvailable 1.
    wait_until(
        lambda: (
            (s := policy.read_namespaced_pod_disruption_budget("web", cluster.namespace).status)
            and s.current_healthy == 1
            and s.disruptions_allowed == 0
        ),
        timeout=30,
        what="the budget's status computed",
    )
    drift(cluster, t)
    left_alone(cluster, t, pod, node)

    policy.delete_namespaced_pod_disruption_budget("web", cluster.namespace)
    replaced(cluster, node)


@pytest.mark.parametrize("annotation", ["karpenter.sh/do-not-disrupt", "tidal.dev/do-not-evict"])
def test_a_pod_annotated_do_not_disrupt_keeps_the_drifted_node_until_the_annotation_goes(
    cluster: Cluster, annotation: str
) -> None:
    t, pod, node = one_pod_on_one_node(cluster, cpu="1", memory="2Gi")
    name = pod.metadata.name
    cluster.core.patch_namespaced_pod(
        name, cluster.namespace, {"metadata": {"annotations": {annotation: "true"}}}
    )
    drift(cluster, t)
    left_alone(cluster, t, pod, node)

    cluster.core.patch_namespaced_pod(
        name, cluster.namespace, {"metadata": {"annotations": {annotation: None}}}
    )
    replaced(cluster, node)
