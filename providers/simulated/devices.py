"""The simulated DRA driver: the ResourceSlice NVIDIA's DRA driver publishes for a node's GPUs.

A node labelled ``tidal.dev/gpu-allocation: dra`` runs NVIDIA's DRA driver (``gpu.nvidia.com``) instead of
the device plugin: its GPUs are not an ``nvidia.com/gpu`` count on the Node but devices in a ResourceSlice,
one pool per node, owned by the Node (so the garbage collector removes it with the Node). Each GPU carries
the attributes the driver takes from NVML (``type``, ``productName``, ``architecture``,
``cudaComputeCapability``, ``brand``, ``uuid``, driver versions) and its ``memory`` capacity; the real
scheduler allocates claims from them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import kubernetes.client
from kubernetes.client.exceptions import ApiException

from autoscaler.core.dra import NVIDIA_DRIVER
from autoscaler.core.dra_devices import offering_devices
from autoscaler.core.dra_selectors import Alternatives, Version
from autoscaler.core.gpu.dra_demand import DRA_LABEL
from autoscaler.core.offering import Offering

__all__ = ["DRIVER_VERSION", "DevicePublisher", "is_dra_node", "resource_slice"]

DRIVER_VERSION = "570.124.6"  # NVML says 570.124.06; semver allows no leading zero
CUDA_DRIVER_VERSION = "12.8.0"


def is_dra_node(labels: Mapping[str, str]) -> bool:
    """A node whose GPUs NVIDIA's DRA driver publishes (tidal labels such nodes when it launches them)."""
    return labels.get(DRA_LABEL[0]) == DRA_LABEL[1]


def _attribute(value: object) -> dict[str, Any]:
    """One device attribute in resource.k8s.io/v1's shape: exactly one of string, int, bool, version."""
    if isinstance(value, Alternatives):  # a real GPU is one of them: the first form listed
        value = value.values[0]
    if isinstance(value, Version):
        return {"version": f"{value.major}.{value.minor}.{value.patch}"}
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    return {"string": str(value)}


def resource_slice(node: str, node_uid: str, offering: Offering) -> dict[str, Any]:
    """The ResourceSlice of ``node``'s GPUs, as the driver's kubelet plugin writes it."""
    found = offering_devices(offering.gpu_model, offering.gpu_memory_mib, offering.gpu_count)
    known = found.attributes.get(NVIDIA_DRIVER, {})
    devices = []
    for i in range(found.count):
        uuid = hashlib.sha256(f"{node}:gpu-{i}".encode()).hexdigest()
        attributes = {name: _attribute(v) for name, v in sorted(known.items())}
        attributes.update(
            {
                "brand": {"string": "Nvidia"},
                "uuid": {"string": f"GPU-{uuid[:8]}-{uuid[8:12]}-{uuid[12:16]}-{uuid[16:20]}-{uuid[20:32]}"},
                "driverVersion": {"version": DRIVER_VERSION},
                "cudaDriverVersion": {"version": CUDA_DRIVER_VERSION},
                "index": {"int": i},
            }
        )
        device: dict[str, Any] = {"name": f"gpu-{i}", "attributes": attributes}
        if offering.gpu_memory_mib:
            device["capacity"] = {"memory": {"value": f"{offering.gpu_memory_mib}Mi"}}
        devices.append(device)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {
            "name": f"{node}-{NVIDIA_DRIVER}",
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid, "controller": True}
            ],
        },
        "spec": {
            "driver": NVIDIA_DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


class DevicePublisher:
    """Writes a DRA node's ResourceSlice through ``ResourceV1Api``, as the driver's kubelet plugin does."""

    def __init__(self, api_client: kubernetes.client.ApiClient, *, request_timeout: float = 10.0) -> None:
        self.core = kubernetes.client.CoreV1Api(api_client)
        self.resource = kubernetes.client.ResourceV1Api(api_client)
        self.request_timeout = request_timeout

    def publish(self, node: str, offering: Offering) -> bool:
        """Create the node's ResourceSlice; False when the Node is gone. An API server that does not serve
        resource.k8s.io/v1 has no slices to hold: nothing is published, and that is not an error."""
        try:
            uid = self.core.read_node(node, _request_timeout=self.request_timeout).metadata.uid
        except ApiException as err:
            if err.status == 404:
                return False
            raise
        try:
            self.resource.create_resource_slice(
                resource_slice(node, uid, offering),
                _preload_content=False,
                _request_timeout=self.request_timeout,
            )
        except ApiException as err:
            if err.status not in (404, 409):  # not served / already published by a restarted cloud
                raise
        return True
