"""Workloads as users submit them: Jobs and Deployments whose pods the real controllers create."""

from __future__ import annotations

from typing import Any

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def container(cpu: str, memory: str, gpus: int = 0) -> dict[str, Any]:
    requests: dict[str, str] = {"cpu": cpu, "memory": memory}
    limits: dict[str, str] = {}
    if gpus:
        requests["nvidia.com/gpu"] = limits["nvidia.com/gpu"] = str(gpus)
    return {
        "name": "main",
        "image": "registry.example.com/work:1",
        "resources": {"requests": requests, **({"limits": limits} if limits else {})},
    }


def pod_template(
    app: str,
    *,
    cpu: str,
    memory: str,
    gpus: int = 0,
    tolerate_gpu: bool = True,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    scheduler: str | None = None,
    restart: str = "Never",
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [container(cpu, memory, gpus)],
        "restartPolicy": restart,
        "terminationGracePeriodSeconds": 0,
    }
    if gpus and tolerate_gpu:
        spec["tolerations"] = [GPU_TOLERATION]
    if scheduler:
        spec["schedulerName"] = scheduler
    return {
        "metadata": {"labels": {"app": app, **(labels or {})}, "annotations": annotations or {}},
        "spec": spec,
    }


def job(name: str, *, pods: int, **template: Any) -> dict[str, Any]:
    """A batch Job running ``pods`` pods at once."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "backoffLimit": 0,
            "template": pod_template(name, **template),
        },
    }


def deployment(name: str, *, replicas: int, **template: Any) -> dict[str, Any]:
    """A Deployment of ``replicas`` identical pods."""
    tpl = pod_template(name, restart="Always", **template)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}}, "template": tpl},
    }
