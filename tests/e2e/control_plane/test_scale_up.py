"""Scale-up on the real control plane: the real scheduler binds the pods onto the nodes tidal bought."""

from __future__ import annotations

from tests.e2e.control_plane.conftest import Cluster
from tests.e2e.control_plane.workloads import deployment, job


def test_gpu_and_cpu_pods_are_bound_by_the_scheduler_onto_the_nodes_tidal_launched(cluster: Cluster) -> None:
    cfg = cluster.config()
    cluster.tidal(cfg)
    cluster.create(job("train", pods=2, cpu="2", memory="8Gi", gpus=1))
    cluster.create(deployment("web", replicas=3, cpu="1", memory="2Gi"))

    bound = cluster.wait_bound(5, timeout=90)

    nodes = {n.metadata.name: n for n in cluster.nodes()}
    cloud = cluster.cloud(cfg)
    launched = {i.provider_id for i in cloud.launched()}
    assert {nodes[p.spec.node_name].spec.provider_id for p in bound} <= launched
    gpu_nodes = {p.spec.node_name for p in bound if p.metadata.labels["app"] == "train"}
    assert all(int(nodes[n].status.allocatable.get("nvidia.com/gpu", "0")) >= 1 for n in gpu_nodes)
    # Nothing more is bought once every pod runs: a later reconcile finds no demand.
    count = len(cloud.launched())
    cluster.tidals[0].wait_reconciles(3)
    assert len(cloud.launched()) == count
    # And nothing was bought twice: every instance ever launched holds some of these pods (a node bought
    # a second time for pods already on their way to the first would stay empty).
    hosting = {nodes[p.spec.node_name].spec.provider_id for p in bound}
    assert launched == hosting
