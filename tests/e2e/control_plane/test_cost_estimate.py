"""A pod gated for a cost estimate, on the real control plane: the estimate is written on the pod, and no
node is ever bought for it (the real scheduler never sees a gated pod)."""

from __future__ import annotations

import json

from tests.e2e.control_plane.conftest import Cluster
from tests.e2e.control_plane.workloads import pod_template
from tests.k8s.tidal import wait_until


def test_a_pod_gated_for_a_cost_estimate_gets_it_as_an_annotation_and_never_a_node(cluster: Cluster) -> None:
    cfg = cluster.config()
    tidal = cluster.tidal(cfg)
    spec = pod_template("what-if", cpu="2", memory="8Gi", gpus=1)["spec"]
    spec["schedulingGates"] = [{"name": "tidal.dev/cost-estimate"}]
    cluster.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "what-if-0"}, "spec": spec})

    def estimate() -> str | None:
        pod = cluster.core.read_namespaced_pod("what-if-0", cluster.namespace)
        found: str | None = (pod.metadata.annotations or {}).get("tidal.dev/cost-estimate")
        return found

    written = wait_until(estimate, timeout=60, what="the cost estimate annotation")
    tidal.wait_reconciles(3)
    assert json.loads(written)["nodes"][0]["instanceType"] == "g4dn.xlarge"
    assert cluster.cloud(cfg).launched() == []
    pod = cluster.core.read_namespaced_pod("what-if-0", cluster.namespace)
    assert [g.name for g in pod.spec.scheduling_gates] == ["tidal.dev/cost-estimate"]
    assert pod.spec.node_name is None
