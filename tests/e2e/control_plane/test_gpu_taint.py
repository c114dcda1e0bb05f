"""A GPU pod without the GPU taint's toleration, on an API server without ExtendedResourceToleration.

tidal taints the GPU nodes it launches ``nvidia.com/gpu=present:NoSchedule``. Nothing adds the toleration to
the pod here (as on EKS and AKS), so such a node would refuse it for ever: tidal must not buy it.
"""

from __future__ import annotations

from tests.e2e.control_plane.conftest import Cluster
from tests.e2e.control_plane.observe import gpus, messages, pods_of
from tests.e2e.control_plane.workloads import job
from tests.k8s.tidal import wait_until


def test_a_gpu_pod_without_the_gpu_toleration_gets_no_node_and_is_told_why(cluster: Cluster) -> None:
    cfg = cluster.config()
    t = cluster.tidal(cfg)
    cluster.create(job("train", pods=1, cpu="2", memory="8Gi", gpus=1, tolerate_gpu=False))
    [pod] = wait_until(lambda: pods_of(cluster, "train"), timeout=30, what="the Job's pod")
    # The API server left the pod as written: nothing added the toleration.
    assert not any(t.key == "nvidia.com/gpu" for t in pod.spec.tolerations or [])

    told = wait_until(
        lambda: messages(cluster, "NotTriggerScaleUp", pod.metadata.name),
        timeout=60,
        what="NotTriggerScaleUp on the pod",
    )
    assert "nvidia.com/gpu" in told[0] and "taint" in told[0], told
    t.wait_reconciles(3)
    assert cluster.cloud(cfg).launched() == []
    assert cluster.nodes() == []


def test_with_the_gpu_taint_turned_off_the_same_pod_gets_an_untainted_gpu_node_it_is_bound_to(
    cluster: Cluster,
) -> None:
    cfg = cluster.config(gpuNodeTaint=False)
    cluster.tidal(cfg)
    cluster.create(job("train", pods=1, cpu="2", memory="8Gi", gpus=1, tolerate_gpu=False))

    [pod] = cluster.wait_bound(1, timeout=90)
    node = cluster.core.read_node(pod.spec.node_name)
    assert gpus(node) >= 1
    assert not any(t.key == "nvidia.com/gpu" for t in node.spec.taints or [])
    assert len(cluster.cloud(cfg).launched()) == 1
