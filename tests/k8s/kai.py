"""KAI Scheduler played through the API: its CRDs, its Queues and PodGroups, and what its scheduler writes.

KAI itself does not run here. Pods with ``schedulerName: kai-scheduler`` are left alone by kube-scheduler, so
the test writes what KAI would: a ``PodScheduled=False`` condition with reason ``Unschedulable`` and KAI's own
message (docs/kai.md lists them), and, once a node has room, a Binding, as KAI's binder posts it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import kubernetes.client
import yaml

from tests.k8s.cluster import Objects, wait_for_crds

CRDS = Path(__file__).resolve().parent / "crds" / "kai.yaml"
SCHEDULER = "kai-scheduler"
QUEUE_LABEL = "kai.scheduler/queue"
POD_GROUP_ANNOTATION = "pod-group-name"


def install_crds(objects: Objects) -> None:
    """KAI's Queue and PodGroup CRDs, served before the test goes on."""
    docs = [d for d in yaml.safe_load_all(CRDS.read_text()) if d]
    for crd in docs:
        objects.apply(crd)
    wait_for_crds(objects, [d["metadata"]["name"] for d in docs])


def queue(
    name: str, *, gpu_quota: float, gpu_limit: float, over_quota_weight: float = 1, parent: str = ""
) -> dict[str, Any]:
    """A Queue as KAI's docs write one: GPUs in whole or fractional units, -1 for none."""
    spec: dict[str, Any] = {
        "resources": {
            "gpu": {"quota": gpu_quota, "limit": gpu_limit, "overQuotaWeight": over_quota_weight},
            "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
            "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
        }
    }
    if parent:
        spec["parentQueue"] = parent
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name}, "spec": spec}


def pod_group(name: str, *, min_member: int, queue_name: str) -> dict[str, Any]:
    """A PodGroup as KAI's pod grouper makes one for a Job."""
    return {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"minMember": min_member, "queue": queue_name},
    }


def over_limit(queue_name: str, limit: int, allocated: int, requested: int) -> str:
    """KAI's message for a pod its queue's GPU limit holds back."""
    return (
        f"OverLimit: {queue_name} quota has reached the allowable limit of GPUs. Limit is {limit} GPUs, "
        f"currently {allocated} GPUs allocated and workload requested {requested} GPUs."
    )


def no_gpu_node(namespace: str, name: str, gpus: int, cpu: int, memory_gb: int) -> str:
    """KAI's message for a pod no node of the node pool has room for."""
    return (
        f"The pod {namespace}/{name} requires GPU: {gpus}, CPU: {cpu} (cores), memory: {memory_gb} (GB), "
        "pods: 1. No node in the default node-pool has GPU resources"
    )


class KaiScheduler:
    """Writes what KAI's scheduler and binder write, as their ServiceAccounts would."""

    def __init__(self, api: kubernetes.client.ApiClient) -> None:
        self.core = kubernetes.client.CoreV1Api(api)

    def unschedulable(self, namespace: str, name: str, message: str) -> None:
        """``PodScheduled=False``, reason ``Unschedulable``, KAI's message."""
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        condition = {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": message,
            "lastProbeTime": None,
            "lastTransitionTime": now,
        }
        self.core.patch_namespaced_pod_status(name, namespace, {"status": {"conditions": [condition]}})

    def bind(self, namespace: str, name: str, node: str) -> None:
        """Bind the pod to ``node`` through the pod's binding subresource, as KAI's binder does."""
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        # The generated client cannot read the Status this call answers with: take the raw response.
        self.core.create_namespaced_pod_binding(name, namespace, body, _preload_content=False)
