"""Realistic Kubernetes objects and offerings for specification-style tests."""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

from autoscaler.cli.snapshot import SnapshotBuilder
from autoscaler.core.model import RESERVED, Arch, CapacityType, Snapshot
from autoscaler.core.offering import Offering, Reservation, ReservationKind
from providers.aws import offering_template as aws_node_template

T0 = "2026-11-20T10:00:00Z"
_uid = itertools.count(1)

INSUFFICIENT_GPU = (
    "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are available: "
    "3 No preemption victims found for incoming pod."
)
INSUFFICIENT_CPU = "0/3 nodes are available: 3 Insufficient cpu."
NO_NODES = "no nodes available to schedule pods"
KAI_NO_CAPACITY = "No node in the default node-pool has GPU resources"
KAI_OVER_LIMIT = (
    "OverLimit: research quota has reached the allowable limit of GPUs. Limit is 8 GPUs, currently 8 GPUs "
    "allocated and workload requested 2 GPUs."
)


def pod(
    name: str,
    *,
    namespace: str = "default",
    cpu: str | None = "500m",
    memory: str | None = "1Gi",
    gpu: int = 0,
    scheduler: str = "default-scheduler",
    message: str | None = INSUFFICIENT_CPU,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    node_selector: dict[str, str] | None = None,
    affinity_terms: list[list[dict[str, Any]]] | None = None,
    tolerations: list[dict[str, str]] | None = None,
    owner_kind: str | None = "ReplicaSet",
    node_name: str | None = None,
    phase: str = "Pending",
    created: str = T0,
    gates: list[str] | None = None,
    init_containers: list[dict[str, Any]] | None = None,
    priority: int | None = None,
    volumes: list[dict[str, Any]] | None = None,
    extra_requests: dict[str, str] | None = None,
    extended_resource_toleration: bool = True,
    pod_affinity: list[dict[str, Any]] | None = None,
    pod_anti_affinity: list[dict[str, Any]] | None = None,
    spread: list[dict[str, Any]] | None = None,
    host_ports: list[int] | None = None,
) -> dict[str, Any]:
    """A Pod as the API server returns it; pending with a PodScheduled=False condition by default.

    A GPU pod carries the toleration the ExtendedResourceToleration admission plugin adds (GKE runs it, as do
    most GPU clusters), unless ``extended_resource_toleration`` is False."""
    requests: dict[str, str] = {}
    if cpu:
        requests["cpu"] = cpu
    if memory:
        requests["memory"] = memory
    if gpu:
        requests["nvidia.com/gpu"] = str(gpu)
    requests.update(extra_requests or {})
    container: dict[str, Any] = {
        "name": "main",
        "image": "registry.example.com/app:1.0",
        "resources": {"requests": requests},
    }
    if gpu:
        container["resources"]["limits"] = {"nvidia.com/gpu": str(gpu)}
    spec: dict[str, Any] = {
        "containers": [container],
        "schedulerName": scheduler,
        "terminationGracePeriodSeconds": 30,
    }
    if node_selector:
        spec["nodeSelector"] = node_selector
    if affinity_terms is not None:
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": t} for t in affinity_terms]
                }
            }
        }
    if gpu and extended_resource_toleration:
        tolerations = [
            *(tolerations or []),
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        ]
    if tolerations:
        spec["tolerations"] = tolerations
    for kind, terms in (("podAffinity", pod_affinity), ("podAntiAffinity", pod_anti_affinity)):
        if terms:
            section = spec.setdefault("affinity", {}).setdefault(kind, {})
            section["requiredDuringSchedulingIgnoredDuringExecution"] = terms
    if spread:
        spec["topologySpreadConstraints"] = spread
    if host_ports:
        container["ports"] = [{"containerPort": p, "hostPort": p} for p in host_ports]
    if node_name:
        spec["nodeName"] = node_name
    if gates:
        spec["schedulingGates"] = [{"name": g} for g in gates]
    if init_containers:
        spec["initContainers"] = init_containers
    if priority is not None:
        spec["priority"] = priority
    if volumes:
        spec["volumes"] = volumes
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": f"uid-{next(_uid):06d}",
        "creationTimestamp": created,
        "labels": labels or {"app": name.rsplit("-", 1)[0]},
    }
    if annotations:
        meta["annotations"] = annotations
    if owner_kind:
        meta["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": owner_kind,
                "name": name.rsplit("-", 1)[0],
                "uid": "owner",
                "controller": True,
            }
        ]
    status: dict[str, Any] = {"phase": phase}
    if message is not None and not node_name and phase == "Pending":
        status["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": message,
                "lastTransitionTime": created,
            }
        ]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def node(
    name: str,
    *,
    instance_type: str = "m6i.2xlarge",
    zone: str = "us-east-1a",
    cpu: str = "8",
    memory: str = "32Gi",
    gpu: int = 0,
    allocatable_cpu: str | None = None,
    allocatable_memory: str | None = None,
    managed: bool = False,
    ready: bool = True,
    capacity_type: str = "on-demand",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    unschedulable: bool = False,
    gpu_label: int | None = None,
) -> dict[str, Any]:
    """A Node as a kubelet registers it."""
    all_labels = {
        "kubernetes.io/hostname": name,
        "node.kubernetes.io/instance-type": instance_type,
        "topology.kubernetes.io/zone": zone,
        "topology.kubernetes.io/region": zone[:-1],
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/os": "linux",
    }
    if managed:
        all_labels.update(
            {
                "tidal.dev/managed": "true",
                "tidal.dev/capacity-type": str(capacity_type),
                "tidal.dev/cluster": "tidal",
            }
        )
        if gpu or gpu_label:
            all_labels["tidal.dev/gpu-count"] = str(gpu_label if gpu_label is not None else gpu)
    all_labels.update(labels or {})
    capacity = {"cpu": cpu, "memory": memory, "pods": "110", "ephemeral-storage": "100Gi"}
    allocatable = {
        "cpu": allocatable_cpu or cpu,
        "memory": allocatable_memory or memory,
        "pods": "110",
        "ephemeral-storage": "95Gi",
    }
    if gpu:
        capacity["nvidia.com/gpu"] = str(gpu)
        allocatable["nvidia.com/gpu"] = str(gpu)
    spec: dict[str, Any] = {"providerID": f"aws:///{zone}/i-{abs(hash(name)) % 10**17:017x}"}
    if taints:
        spec["taints"] = taints
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": f"uid-{next(_uid):06d}",
            "creationTimestamp": T0,
            "labels": all_labels,
            "annotations": annotations or {},
        },
        "spec": spec,
        "status": {
            "capacity": capacity,
            "allocatable": allocatable,
            "conditions": [
                {"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": T0}
            ],
        },
    }


def pdb(name: str, *, namespace: str = "default", match: dict[str, str], allowed: int) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": match}},
        "status": {
            "disruptionsAllowed": allowed,
            "currentHealthy": 1,
            "desiredHealthy": 1,
            "expectedPods": 1,
        },
    }


def daemonset(
    name: str,
    *,
    namespace: str = "kube-system",
    cpu: str = "100m",
    memory: str = "128Mi",
    node_selector: dict[str, str] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [
            {"name": name, "image": f"{name}:1", "resources": {"requests": {"cpu": cpu, "memory": memory}}}
        ],
        "tolerations": [{"operator": "Exists"}],
    }
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec},
        },
    }


def podgroup(
    name: str, *, namespace: str = "default", min_member: int, queue: str, preemptibility: str | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {"minMember": min_member, "queue": queue}
    if preemptibility is not None:
        spec["preemptibility"] = preemptibility
    return {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def queue(name: str, *, quota: float, limit: float, parent: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "resources": {
            "gpu": {"quota": quota, "limit": limit, "overQuotaWeight": 1},
            "cpu": {"quota": -1, "limit": -1},
            "memory": {"quota": -1, "limit": -1},
        }
    }
    if parent:
        spec["parentQueue"] = parent
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name}, "spec": spec}


def snapshot(*objects: dict[str, Any]) -> Snapshot:
    builder = SnapshotBuilder()
    for i, obj in enumerate(objects):
        builder.add(obj, f"object {i}")
    return builder.build()


def offering(
    instance_type: str,
    vcpu: int,
    memory_gib: float,
    price: float,
    *,
    gpus: int = 0,
    gpu_model: str = "",
    gpu_memory_gib: int = 0,
    zone: str = "us-east-1a",
    capacity_type: str = "on-demand",
    arch: Arch = Arch.AMD64,
    fraction: float | None = None,
    max_pods: int = 110,
) -> Offering:
    """An offering of us-east-1 as the AWS provider lists it, with the node template of an EKS node of it."""
    shape = Offering(
        instance_type=instance_type,
        zone=zone,
        capacity_type=CapacityType(capacity_type),
        vcpu=vcpu,
        memory_mib=int(memory_gib * 1024),
        price=price,
        gpu_count=gpus,
        gpu_model=gpu_model,
        gpu_vendor="NVIDIA" if gpus else "",
        gpu_memory_mib=gpu_memory_gib * 1024,
        gpu_fraction=float(gpus) if fraction is None else fraction,
        arch=arch,
        max_pods=max_pods,
        region="us-east-1",
    )
    return replace(shape, template=aws_node_template(shape))


def reserved(
    base: Offering,
    rid: str,
    *,
    available: int,
    kind: ReservationKind = ReservationKind.OPEN,
    total: int | None = None,
    start: float | None = None,
    end: float | None = None,
    name: str = "",
) -> Offering:
    """``base`` (an on-demand offering) as reserved capacity of reservation ``rid``, as a provider lists it:
    capacity type reserved, price 0 (paid for already), the on-demand price kept on the reservation."""
    r = Reservation(
        rid,
        kind,
        available=available,
        total=available if total is None else total,
        start=start,
        end=end,
        name=name,
        on_demand_price=base.price,
    )
    offering = replace(base, capacity_type=RESERVED, price=0.0, reservation=r, price_source="reservation")
    return replace(offering, template=aws_node_template(offering))


def aws_offerings(zones: tuple[str, ...] = ("us-east-1a",), spot: bool = True) -> list[Offering]:
    """A realistic slice of us-east-1 (on-demand list prices, spot at the advisor's estimate)."""
    shapes = [
        # type, vcpu, GiB, on-demand, spot, gpus, model, GiB per GPU
        ("m6i.large", 2, 8, 0.096, 0.0422, 0, "", 0),
        ("m6i.xlarge", 4, 16, 0.192, 0.0845, 0, "", 0),
        ("m6i.2xlarge", 8, 32, 0.384, 0.169, 0, "", 0),
        ("m6i.4xlarge", 16, 64, 0.768, 0.338, 0, "", 0),
        ("c6i.2xlarge", 8, 16, 0.34, 0.1496, 0, "", 0),
        ("r6i.2xlarge", 8, 64, 0.504, 0.2218, 0, "", 0),
        ("g4dn.xlarge", 4, 16, 0.526, 0.2104, 1, "T4", 16),
        ("g5.xlarge", 4, 16, 1.006, 0.4527, 1, "A10G", 24),
        ("g5.12xlarge", 48, 192, 5.672, 2.5524, 4, "A10G", 24),
        ("g6.xlarge", 4, 16, 0.8048, 0.3622, 1, "L4", 24),
        ("g6.12xlarge", 48, 192, 4.6016, 2.0707, 4, "L4", 24),
        ("p4d.24xlarge", 96, 1152, 21.9576, 9.881, 8, "A100", 40),
        ("p5.48xlarge", 192, 2048, 55.04, 24.768, 8, "H100", 80),
    ]
    out = []
    for t, vcpu, mem, od, sp, gpus, model, gmem in shapes:
        for z in zones:
            out.append(offering(t, vcpu, mem, od, gpus=gpus, gpu_model=model, gpu_memory_gib=gmem, zone=z))
            if spot:
                out.append(
                    offering(
                        t,
                        vcpu,
                        mem,
                        sp,
                        gpus=gpus,
                        gpu_model=model,
                        gpu_memory_gib=gmem,
                        zone=z,
                        capacity_type="spot",
                    )
                )
    return out


def anti_affinity(key: str, labels: dict[str, str]) -> dict[str, Any]:
    """A required (anti-)affinity term: pods with ``labels``, per value of topology ``key``."""
    return {"labelSelector": {"matchLabels": labels}, "topologyKey": key}


def zone_spread(
    labels: dict[str, str], max_skew: int = 1, key: str = "topology.kubernetes.io/zone"
) -> dict[str, Any]:
    """A DoNotSchedule topology spread constraint over ``key`` for pods with ``labels``."""
    return {
        "maxSkew": max_skew,
        "topologyKey": key,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": labels},
    }


def pending_replica(
    i: int,
    *,
    message: str = INSUFFICIENT_CPU,
    since: object = "2026-11-20T10:00:05Z",
    controller: object = True,
) -> dict[str, Any]:
    """Replica ``i`` of the Deployment web (2 CPU / 4 GiB), pending as kube-scheduler left it, as the API server
    returns it."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"web-7d9f8b6c5-{i:05x}",
            "namespace": "shop",
            "uid": f"uid-web-{i}",
            "creationTimestamp": "2026-11-20T10:00:00Z",
            "labels": {"app": "web"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": "web-7d9f8b6c5",
                    "controller": controller,
                }
            ],
        },
        "spec": {"containers": [{"name": "web", "resources": {"requests": {"cpu": "2", "memory": "4Gi"}}}]},
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": message,
                    "lastTransitionTime": since,
                }
            ],
        },
    }
