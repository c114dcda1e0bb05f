"""ProvisioningRequests, CapacityBuffers and PodTemplates as Kueue and users write them (API server JSON)."""

from __future__ import annotations

from typing import Any

from tests.builders import T0, pod

CHECK = "check-capacity.autoscaling.x-k8s.io"
ATOMIC = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"


def pod_template(
    name: str,
    *,
    namespace: str = "team-a",
    gpu: int = 0,
    cpu: str = "4",
    memory: str = "16Gi",
    labels: dict[str, str] | None = None,
    **kw: Any,
) -> dict[str, Any]:
    """A PodTemplate as Kueue's ProvisioningRequest admission check creates one for a workload's pod set."""
    spec = pod(name, namespace=namespace, gpu=gpu, cpu=cpu, memory=memory, **kw)["spec"]
    return {
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-tpl-{name}",
            "creationTimestamp": T0,
            "labels": {"kueue.x-k8s.io/managed": "true"},
        },
        "template": {
            "metadata": {"labels": labels or {"app": name}},
            "spec": spec,
        },
    }


def condition(kind: str, status: str, reason: str, at: str = T0, message: str = "") -> dict[str, Any]:
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message or reason,
        "lastTransitionTime": at,
        "observedGeneration": 1,
    }


def provisioning_request(
    name: str,
    class_name: str,
    sets: list[tuple[str, int]],
    *,
    namespace: str = "team-a",
    created: str = T0,
    conditions: list[dict[str, Any]] | None = None,
    parameters: dict[str, str] | None = None,
    version: str = "v1",
) -> dict[str, Any]:
    """A ProvisioningRequest as Kueue creates one (``<workload>-<check>-<attempt>``)."""
    spec: dict[str, Any] = {
        "provisioningClassName": class_name,
        "podSets": [{"podTemplateRef": {"name": t}, "count": n} for t, n in sets],
    }
    if parameters:
        spec["parameters"] = parameters
    obj: dict[str, Any] = {
        "apiVersion": f"autoscaling.x-k8s.io/{version}",
        "kind": "ProvisioningRequest",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-pr-{name}",
            "generation": 1,
            "creationTimestamp": created,
        },
        "spec": spec,
    }
    if conditions:
        obj["status"] = {"conditions": conditions}
    return obj


def capacity_buffer(
    name: str,
    *,
    namespace: str = "team-a",
    template: str | None = None,
    replicas: int | None = None,
    percentage: int | None = None,
    scalable: tuple[str, str] | None = None,
    limits: dict[str, str] | None = None,
    strategy: str | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if template:
        spec["podTemplateRef"] = {"name": template}
    if scalable:
        spec["scalableRef"] = {"apiGroup": "apps", "kind": scalable[0], "name": scalable[1]}
    if replicas is not None:
        spec["replicas"] = replicas
    if percentage is not None:
        spec["percentage"] = percentage
    if limits:
        spec["limits"] = limits
    if strategy:
        spec["provisioningStrategy"] = strategy
    return {
        "apiVersion": "autoscaling.x-k8s.io/v1beta1",
        "kind": "CapacityBuffer",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-cb-{name}",
            "generation": 1,
            "creationTimestamp": T0,
        },
        "spec": spec,
    }
