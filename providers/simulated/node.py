"""The simulated kubelet: the Node object a joining node registers, and the API calls that write it.

The manifest is what a kubelet sends: name, providerID, the well-known labels, registration taints,
capacity and allocatable as Kubernetes quantities, node conditions, addresses and nodeInfo (every field the
client's V1NodeSystemInfo requires, so informers that deserialise Nodes accept it).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import kubernetes.client
from kubernetes.client.exceptions import ApiException

from autoscaler.core.model import (
    LABEL_ARCH,
    LABEL_HOSTNAME,
    LABEL_INSTANCE_TYPE,
    LABEL_OS,
    LABEL_REGION,
    LABEL_ZONE,
    Taint,
)
from autoscaler.core.offering import Offering
from autoscaler.core.quantity import format_quantity
from autoscaler.core.resources import GPU_RESOURCES, Resources
from providers.simulated.devices import DevicePublisher

__all__ = [
    "KUBELET_VERSION",
    "NodeRegistrar",
    "gpu_status",
    "node_manifest",
    "not_ready_status",
    "quantities",
]

KUBELET_VERSION = "v1.31.0"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
_BYTE_RESOURCES = ("memory", "ephemeral-storage")
UNREACHABLE_TAINTS = (
    {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"},
)


def rfc3339(seconds: float) -> str:
    """Epoch seconds as the API server writes timestamps (``2026-01-02T03:04:05Z``)."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def quantities(resources: Resources) -> dict[str, str]:
    """Resources as a kubelet reports them: cpu ``"4"``/``"3920m"``, memory and storage in ``Ki``."""
    out: dict[str, str] = {}
    for name, milli in sorted(resources.items()):
        if name in _BYTE_RESOURCES or name.startswith("hugepages-"):
            out[name] = f"{milli // 1000 // 1024}Ki"
        else:
            out[name] = format_quantity(milli)
    return out


def _without_gpus(resources: Resources) -> Resources:
    return Resources({k: v for k, v in resources.items() if k not in GPU_RESOURCES})


def _gpus(resources: Resources) -> dict[str, str]:
    return {k: format_quantity(v) for k, v in resources.items() if k in GPU_RESOURCES}


def _digest(name: str, salt: str) -> str:
    return hashlib.sha256(f"{salt}:{name}".encode()).hexdigest()


def _conditions(now: float) -> list[dict[str, str]]:
    stamp = rfc3339(now)
    rows = (
        ("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
    )
    return [
        {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": stamp,
            "lastTransitionTime": stamp,
        }
        for kind, status, reason, message in rows
    ]


def node_manifest(
    *,
    name: str,
    provider_id: str,
    instance_type: str,
    zone: str,
    region: str,
    arch: str,
    labels: Mapping[str, str],
    taints: tuple[Taint, ...],
    capacity: Resources,
    allocatable: Resources,
    now: float,
) -> dict[str, Any]:
    """The Node a kubelet creates when it joins; GPUs are left out until the device plugin reports them."""
    digest = _digest(name, "node")
    ip = ".".join(str(int(digest[i : i + 2], 16)) for i in (0, 2, 4))
    node_labels = {
        **labels,
        LABEL_HOSTNAME: name,
        LABEL_INSTANCE_TYPE: instance_type,
        LABEL_ZONE: zone,
        LABEL_REGION: region,
        LABEL_ARCH: arch,
        LABEL_OS: "linux",
    }
    spec: dict[str, Any] = {"providerID": provider_id}
    if taints:
        spec["taints"] = [
            {"key": t.key, "effect": t.effect, **({"value": t.value} if t.value else {})} for t in taints
        ]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": node_labels,
            "annotations": {"volumes.kubernetes.io/controller-managed-attach-detach": "true"},
        },
        "spec": spec,
        "status": {
            "capacity": quantities(_without_gpus(capacity)),
            "allocatable": quantities(_without_gpus(allocatable)),
            "conditions": _conditions(now),
            "addresses": [
                {"type": "InternalIP", "address": f"10.{ip}"},
                {"type": "Hostname", "address": name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "architecture": arch,
                "bootID": _digest(name, "boot")[:32],
                "containerRuntimeVersion": "containerd://1.7.20",
                "kernelVersion": "6.1.0-simulated",
                "kubeProxyVersion": KUBELET_VERSION,
                "kubeletVersion": KUBELET_VERSION,
                "machineID": _digest(name, "machine")[:32],
                "operatingSystem": "linux",
                "osImage": "tidal simulated node",
                "systemUUID": _digest(name, "system")[:32],
            },
        },
    }


def gpu_status(capacity: Resources, allocatable: Resources) -> dict[str, Any]:
    """The status patch the GPU device plugin causes: GPU capacity and allocatable appear."""
    return {"capacity": _gpus(capacity), "allocatable": _gpus(allocatable)}


def not_ready_status(now: float) -> dict[str, Any]:
    """What the node lifecycle controller writes when a kubelet stops posting status."""
    stamp = rfc3339(now)
    return {
        "conditions": [
            {
                "type": "Ready",
                "status": "Unknown",
                "reason": "NodeStatusUnknown",
                "message": "Kubelet stopped posting node status.",
                "lastHeartbeatTime": stamp,
                "lastTransitionTime": stamp,
            }
        ]
    }


class NodeRegistrar:
    """Writes Nodes through ``CoreV1Api`` as a joining kubelet (and, on shutdown, the node controller) does."""

    def __init__(self, api_client: kubernetes.client.ApiClient, *, request_timeout: float = 10.0) -> None:
        """``api_client`` comes from tidal's client factory (or a test's fake API server)."""
        self.core = kubernetes.client.CoreV1Api(api_client)
        self.request_timeout = request_timeout

    def create(self, manifest: Mapping[str, Any]) -> bool:
        """Create the Node; False when it already exists (a restarted cloud registering it again)."""
        try:
            response = self.core.create_node(
                manifest, _preload_content=False, _request_timeout=self.request_timeout
            )
        except ApiException as err:
            if err.status == 409:
                return False
            raise
        stored = json.loads(response.data or b"{}")
        conditions = (stored.get("status") or {}).get("conditions") or []
        if not any(c.get("type") == "Ready" for c in conditions):  # a server that drops status on create
            self.patch_status(manifest["metadata"]["name"], manifest["status"])
        return True

    def patch_status(self, name: str, status: Mapping[str, Any]) -> bool:
        """Strategic-merge-patch the Node's status; False when the Node no longer exists."""
        try:
            self.core.patch_node_status(
                name,
                {"status": status},
                _content_type=STRATEGIC_MERGE_PATCH,
                _preload_content=False,
                _request_timeout=self.request_timeout,
            )
        except ApiException as err:
            if err.status == 404:
                return False
            raise
        return True

    def publish_devices(self, name: str, offering: Offering) -> bool:
        """Publish the ResourceSlice of a DRA node's GPUs; False when the Node no longer exists."""
        publisher = DevicePublisher(self.core.api_client, request_timeout=self.request_timeout)
        return publisher.publish(name, offering)

    def mark_unreachable(self, name: str, now: float) -> bool:
        """Ready=Unknown plus the ``node.kubernetes.io/unreachable`` taints; False when the Node is gone."""
        if not self.patch_status(name, not_ready_status(now)):
            return False
        try:
            response = self.core.read_node(
                name, _preload_content=False, _request_timeout=self.request_timeout
            )
            node = json.loads(response.data)
            taints = list((node.get("spec") or {}).get("taints") or [])
            missing = [t for t in UNREACHABLE_TAINTS if not any(_same_taint(t, have) for have in taints)]
            if missing:
                stamp = rfc3339(now)
                patch = {
                    "metadata": {"resourceVersion": node["metadata"]["resourceVersion"]},
                    "spec": {"taints": [*taints, *({**t, "timeAdded": stamp} for t in missing)]},
                }
                self.core.patch_node(
                    name,
                    patch,
                    _content_type=STRATEGIC_MERGE_PATCH,
                    _preload_content=False,
                    _request_timeout=self.request_timeout,
                )
        except ApiException as err:
            if err.status == 404:
                return False
            raise
        return True


def _same_taint(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return a.get("key") == b.get("key") and a.get("effect") == b.get("effect")
