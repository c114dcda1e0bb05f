"""The GPU fleet on the real control plane: clusterGPULimit holds, and idle GPU nodes go back to zero."""

from __future__ import annotations

import kubernetes.client

from tests.e2e.control_plane.conftest import Cluster
from tests.e2e.control_plane.observe import messages, pods_of
from tests.e2e.control_plane.workloads import job
from tests.k8s.tidal import wait_until


def test_more_gpu_pods_than_the_gpu_limit_allows_get_the_limit_and_the_rest_are_told(
    cluster: Cluster,
) -> None:
    cfg = cluster.config(clusterGPULimit=2)
    t = cluster.tidal(cfg)
    cluster.create(job("train", pods=5, cpu="2", memory="8Gi", gpus=1))

    bound = cluster.wait_bound(2, timeout=90)
    waiting = [p for p in pods_of(cluster, "train") if not p.spec.node_name]
    assert len(waiting) == 3
    for pod in waiting:
        told = wait_until(
            lambda pod=pod: messages(cluster, "NotTriggerScaleUp", pod.metadata.name),
            timeout=60,
            what=f"NotTriggerScaleUp on {pod.metadata.name}",
        )
        assert "clusterGPULimit 2" in told[-1], told
    t.wait_reconciles(3)
    cloud = cluster.cloud(cfg)
    # Every instance ever launched counts, terminated or not: the limit was never exceeded on the way.
    assert sum(i.gpu_count for i in cloud.launched()) == 2
    assert len(cluster.bound()) == len(bound) == 2
    # The scheduler itself says why the rest wait: the GPU nodes are full.
    for pod in waiting:
        current = cluster.core.read_namespaced_pod(pod.metadata.name, cluster.namespace)
        [scheduled] = [c for c in current.status.conditions if c.type == "PodScheduled"]
        assert scheduled.status == "False" and scheduled.reason == "Unschedulable"


def test_idle_gpu_nodes_go_back_to_zero_once_their_job_is_deleted(cluster: Cluster) -> None:
    cfg = cluster.config()
    cluster.tidal(cfg)
    cluster.create(job("train", pods=2, cpu="2", memory="8Gi", gpus=1))
    cluster.wait_bound(2, timeout=90)
    cloud = cluster.cloud(cfg)
    launched = {i.provider_id for i in cloud.launched()}
    assert launched and cloud.gpus_up() >= 2

    kubernetes.client.BatchV1Api(cluster.api).delete_namespaced_job(
        "train", cluster.namespace, propagation_policy="Background"
    )
    # The garbage collector deletes the pods, the kubelet confirms; tidal removes the nodes and the instances.
    wait_until(lambda: not cluster.pods(), timeout=60, what="the Job's pods gone")
    wait_until(lambda: not cluster.nodes(), timeout=60, what="every GPU node removed")
    wait_until(lambda: not cloud.live(), timeout=60, what="every instance terminated")
    assert {i.provider_id for i in cloud.launched()} == launched  # nothing new bought on the way down
    assert cloud.gpus_up() == 0
