"""Objects the API server accepts but tidal cannot fully read: kept, reported, and never acted on.

The control plane runs with Lt/Gt toleration operators enabled (tests/k8s/control_plane.py), as a newer
Kubernetes does; tidal does not read them, so such a pod is what a field from a newer release looks like.
"""

from __future__ import annotations

from typing import Any

from tests.e2e.control_plane.conftest import Cluster
from tests.e2e.control_plane.observe import messages, pods_of
from tests.e2e.control_plane.workloads import deployment, job
from tests.k8s.tidal import wait_until

NEWER = {"key": "example.com/slots", "operator": "Gt", "value": "4", "effect": "NoSchedule"}


def with_newer_toleration(workload: dict[str, Any]) -> dict[str, Any]:
    spec = workload["spec"]["template"]["spec"]
    spec["tolerations"] = [*spec.get("tolerations", []), NEWER]
    return workload


def test_a_pending_pod_tidal_cannot_read_gets_no_node_and_is_told_which_field(cluster: Cluster) -> None:
    cfg = cluster.config()
    t = cluster.tidal(cfg)
    cluster.create(with_newer_toleration(job("batch", pods=1, cpu="2", memory="8Gi")))
    [pod] = wait_until(lambda: pods_of(cluster, "batch"), timeout=30, what="the Job's pod")
    assert any(t.operator == "Gt" for t in pod.spec.tolerations)  # the API server kept it

    told = wait_until(
        lambda: messages(cluster, "NotTriggerScaleUp", pod.metadata.name),
        timeout=60,
        what="NotTriggerScaleUp on the pod",
    )
    assert "cannot read" in told[0] and "operator: 'Gt'" in told[0], told
    t.wait_reconciles(3)
    assert cluster.cloud(cfg).launched() == []


def test_the_node_of_a_running_pod_tidal_cannot_read_is_never_removed_and_the_pod_is_reported(
    cluster: Cluster,
) -> None:
    cfg = cluster.config(nodeLabels={"team": "batch"})
    t = cluster.tidal(cfg)
    cluster.create(deployment("web", replicas=1, cpu="1", memory="2Gi"))
    [pod] = cluster.wait_bound(1, timeout=90)
    node = pod.spec.node_name
    name = pod.metadata.name
    # A toleration may be added to a running pod: now tidal cannot read all of it.
    tolerations = [t.to_dict() for t in pod.spec.tolerations or []]
    cluster.core.patch_namespaced_pod(
        name,
        cluster.namespace,
        [{"op": "replace", "path": "/spec/tolerations", "value": [*tolerations, NEWER]}],
    )
    # The node drifts (nodeLabels change): without that pod it would be replaced and drained.
    t.write_config(cluster.config(nodeLabels={"team": "batch-v2"}))
    wait_until(lambda: "config_reloaded" in t.output(), timeout=60, what="the reload applied")

    told = wait_until(
        lambda: messages(cluster, "Unreadable", name), timeout=60, what="an Unreadable event on the pod"
    )
    assert "operator: 'Gt'" in told[0] and f"never removes node {node}" in told[0], told
    t.wait_reconciles(3)
    assert node in {n.metadata.name for n in cluster.nodes()}
    assert not cluster.core.read_node(node).spec.unschedulable
    current = cluster.core.read_namespaced_pod(name, cluster.namespace)
    assert current.metadata.uid == pod.metadata.uid and current.metadata.deletion_timestamp is None
    assert len(cluster.cloud(cfg).launched()) == 1
