"""What a test reads back from the real API server: the pods of a workload, events, GPU nodes."""

from __future__ import annotations

from typing import Any

from tests.e2e.control_plane.conftest import Cluster


def pods_of(cluster: Cluster, app: str) -> list[Any]:
    """The pods a workload's controller made (label ``app``), oldest name first."""
    pods = cluster.core.list_namespaced_pod(cluster.namespace, label_selector=f"app={app}").items
    return sorted(pods, key=lambda p: p.metadata.name)


def events(cluster: Cluster, reason: str, namespace: str | None = None) -> list[Any]:
    """The core/v1 events of ``reason`` in the test's namespace (or ``namespace``)."""
    found = cluster.core.list_namespaced_event(namespace or cluster.namespace).items
    return [e for e in found if e.reason == reason]


def messages(cluster: Cluster, reason: str, name: str, namespace: str | None = None) -> list[str]:
    """The messages of the events of ``reason`` about the object called ``name``."""
    return [e.message for e in events(cluster, reason, namespace) if e.involved_object.name == name]


def gpus(node: Any) -> int:
    """The GPUs a Node reports allocatable (the device plugin's ``nvidia.com/gpu``)."""
    return int((node.status.allocatable or {}).get("nvidia.com/gpu", "0"))


def ready(node: Any) -> bool:
    """Ready=True, and no longer tainted not-ready by the node lifecycle controller."""
    conditions = node.status.conditions or []
    taints = node.spec.taints or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions) and not any(
        t.key == "node.kubernetes.io/not-ready" for t in taints
    )
