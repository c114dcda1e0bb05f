"""DRA on the real control plane: tidal launches NVIDIA GPU nodes for pods whose ResourceClaims ask for GPUs,
the simulated DRA driver publishes each node's GPUs as a ResourceSlice, and the real scheduler allocates the
claims from them and binds the pods.

Kubernetes makes one ResourceClaim per pod from the ResourceClaimTemplate (the resourceclaim controller of
kube-controller-manager); the DeviceClass is the one NVIDIA's driver installs.
"""

from __future__ import annotations

from typing import Any

import kubernetes.client
import pytest

from tests.e2e.control_plane.conftest import Cluster
from tests.e2e.control_plane.observe import gpus, pods_of
from tests.e2e.control_plane.workloads import GPU_TOLERATION, job
from tests.k8s.cluster import Objects

DRIVER = "gpu.nvidia.com"
DEVICE_CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": DRIVER},
    "spec": {
        "selectors": [
            {
                "cel": {
                    "expression": f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'gpu'"
                }
            }
        ]
    },
}


@pytest.fixture(scope="module")
def device_class(objects: Objects) -> None:
    objects.apply(DEVICE_CLASS)


def claim_template(name: str, *, count: int = 1, selector: str = "") -> dict[str, Any]:
    request: dict[str, Any] = {"deviceClassName": DRIVER, "count": count}
    if selector:
        request["selectors"] = [{"cel": {"expression": selector}}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}}},
    }


def claiming_job(name: str, template: str, pods: int) -> dict[str, Any]:
    """A Job whose every pod gets its own claim from ``template``, used by its container."""
    workload = job(name, pods=pods, cpu="2", memory="8Gi")
    spec = workload["spec"]["template"]["spec"]
    spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": template}]
    spec["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    spec["tolerations"] = [GPU_TOLERATION]
    return workload


def claim_of(cluster: Cluster, pod: Any) -> Any:
    [status] = pod.status.resource_claim_statuses
    return kubernetes.client.ResourceV1Api(cluster.api).read_namespaced_resource_claim(
        status.resource_claim_name, cluster.namespace
    )


def test_every_claim_pod_tidal_launched_for_is_allocated_its_gpu_and_bound(
    cluster: Cluster, device_class: None
) -> None:
    cfg = cluster.config(gpuSharing={"dra": True})
    cluster.tidal(cfg)
    cluster.create(claim_template("one-gpu"))
    cluster.create(claiming_job("train", "one-gpu", pods=3))

    cluster.wait_bound(3, timeout=120)
    resources = kubernetes.client.ResourceV1Api(cluster.api)
    nodes = {n.metadata.name: n for n in cluster.nodes()}
    taken: set[tuple[str, str]] = set()
    for pod in pods_of(cluster, "train"):
        node = nodes[pod.spec.node_name]
        assert node.metadata.labels["tidal.dev/gpu-allocation"] == "dra"
        assert gpus(node) == 0  # no device plugin there: the GPUs are the driver's devices
        claim = claim_of(cluster, pod)
        [result] = claim.status.allocation.devices.results
        assert (result.driver, result.pool) == (DRIVER, node.metadata.name)
        assert [r.name for r in claim.status.reserved_for] == [pod.metadata.name]
        taken.add((result.pool, result.device))
    assert len(taken) == 3  # three distinct GPUs
    slices = resources.list_resource_slice().items
    assert {s.spec.node_name for s in slices} >= set(nodes)
    # Nothing idle was bought: every launched instance holds a claim pod.
    launched = {i.provider_id for i in cluster.cloud(cfg).launched()}
    assert launched == {nodes[p.spec.node_name].spec.provider_id for p in pods_of(cluster, "train")}


def test_a_claim_selecting_gpu_memory_gets_a_node_whose_gpu_the_scheduler_finds_big_enough(
    cluster: Cluster, device_class: None
) -> None:
    # The cheapest GPU here is a T4 with 16 GiB: the claim rules it out, tidal must buy a bigger one.
    cfg = cluster.config(gpuSharing={"dra": True}, instanceTypeRegexp="(g4dn|g5|g6|m6i)\\..*")
    cluster.tidal(cfg)
    selector = f'device.capacity["{DRIVER}"].memory.compareTo(quantity("20Gi")) >= 0'
    cluster.create(claim_template("big-gpu", selector=selector))
    cluster.create(claiming_job("infer", "big-gpu", pods=1))

    [pod] = cluster.wait_bound(1, timeout=120)
    [result] = claim_of(cluster, pod).status.allocation.devices.results
    resources = kubernetes.client.ResourceV1Api(cluster.api)
    [published] = [s for s in resources.list_resource_slice().items if s.spec.node_name == pod.spec.node_name]
    [device] = [d for d in published.spec.devices if d.name == result.device]
    memory = device.capacity["memory"].value
    assert memory.endswith("Mi") and int(memory[:-2]) >= 20 * 1024, memory
    launched = cluster.cloud(cfg).launched()
    assert len(launched) == 1 and not launched[0].instance_type.startswith("g4dn"), launched
