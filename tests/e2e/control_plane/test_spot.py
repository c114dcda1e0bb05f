"""Spot capacity on the real control plane: a node the cloud reclaims without notice.

Nothing confirms the deletion of a reclaimed node's pods (its kubelet is gone): they stay bound to a Node that
no longer exists until the pod garbage collector of kube-controller-manager removes them, about a minute
later. tidal must remove the Node, buy one replacement for the displaced pod at once, and not buy again for
the same pod while it lingers.
"""

from __future__ import annotations

from tests.e2e.control_plane.conftest import Cluster
from tests.e2e.control_plane.observe import gpus, ready
from tests.e2e.control_plane.workloads import deployment
from tests.k8s.tidal import wait_until


def test_a_reclaimed_spot_node_is_removed_and_replaced_once_while_its_pod_lingers(cluster: Cluster) -> None:
    # The default grace for new nodes: the replacement waits for the pod it was bought for.
    cfg = cluster.config(capacityTypes=["spot"], newNodeGracePeriod="2m")
    t = cluster.tidal(cfg)
    cluster.create(deployment("infer", replicas=1, cpu="2", memory="8Gi", gpus=1))
    [pod] = cluster.wait_bound(1, timeout=90)
    old = pod.spec.node_name
    cloud = cluster.cloud(cfg)
    [doomed] = cloud.live()
    assert doomed.capacity_type.value == "spot"

    # The cloud takes the instance back, through the state the simulated cloud shares with tidal's process.
    cloud.provider.interrupt(doomed.id)

    wait_until(lambda: old not in {n.metadata.name for n in cluster.nodes()}, timeout=60, what="Node removed")
    [replacement] = wait_until(
        lambda: [n for n in cluster.nodes() if ready(n) and gpus(n) >= 1],
        timeout=60,
        what="a replacement GPU node Ready",
    )
    t.wait_reconciles(3)
    # The displaced pod is still bound to the vanished Node: one replacement was bought for it, no more.
    lingering = [p for p in cluster.pods() if p.metadata.name == pod.metadata.name]
    assert all(p.spec.node_name == old for p in lingering)  # (gone only if the garbage collector was quick)
    launched = cloud.launched()
    assert len(launched) == 2, launched
    assert {i.id: i.state.value for i in launched}[doomed.id] == "terminated"
    assert replacement.spec.provider_id in {i.provider_id for i in cloud.live()}
    assert {n.metadata.name for n in cluster.nodes()} == {replacement.metadata.name}
