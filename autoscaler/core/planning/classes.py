"""Pods a plan treats alike: classes of pods with one constraint set, mode and request, and the order
scale-up places them in."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from autoscaler.core.fit import Constraints
from autoscaler.core.model import Pod
from autoscaler.core.placement.engine import Engine
from autoscaler.core.planning.decisions import BIN_PACKING, BIN_SELECTION
from autoscaler.core.planning.offerings import OfferingIndex
from autoscaler.core.resources import Resources

__all__ = ["PodClass", "choices", "order", "pod_classes", "pod_mode", "topology_signature"]


def pod_mode(pod: Pod, c: Constraints, index: OfferingIndex) -> str:
    """Luna's split: small unconstrained CPU pods share bin-packing nodes; the rest get bin-selection."""
    cfg = index.config
    r = pod.requests
    if c.gpu_resource or c.constrained or r.gpus:
        return BIN_SELECTION
    if r.cpu >= cfg.bin_select_pod_cpu_threshold or r.memory >= cfg.bin_select_pod_memory_threshold:
        return BIN_SELECTION
    return BIN_PACKING


@dataclass(slots=True)
class PodClass:
    """Pods a plan treats alike: one constraint set, one mode, one request (and one KAI queue, when that
    queue has a budget)."""

    pods: list[Pod]
    c: Constraints
    mode: str
    queue: str = ""


def topology_signature(
    pod: Pod, engine: Engine, seen: dict[tuple[object, ...], bool] | None = None
) -> tuple[object, ...] | None:
    """What besides constraints and requests tells apart pods whose place depends on other pods. ``seen``
    keeps, by signature, whether such pods' places depend on others, while no pod is placed: the signature
    holds all that answer reads (replicas share one)."""
    if engine.topology.idle and not pod.topological:
        return None  # as Engine.inter_pod says at once
    signature = (
        pod.namespace,
        tuple(sorted(pod.labels.items())),
        pod.spread,
        pod.pod_affinity,
        pod.pod_anti_affinity,
        pod.host_ports,
    )
    inter_pod = seen.get(signature) if seen is not None else None
    if inter_pod is None:
        inter_pod = engine.inter_pod(pod)
        if seen is not None:
            seen[signature] = inter_pod
    return signature if inter_pod else None


def pod_classes(
    pods: Sequence[Pod],
    constraints: dict[str, Constraints],
    index: OfferingIndex,
    engine: Engine,
    queues: Mapping[str, str] | None = None,
) -> list[PodClass]:
    """``pods`` grouped into classes, in the order each class's first pod comes."""
    budgets = index.config.queue_budgets
    groups: dict[tuple[object, ...], PodClass] = {}
    # Pods of one workload mostly share one constraint object: its value is hashed once per object, not
    # once per pod (equal constraints in two objects still get one number).
    numbers: dict[Constraints, int] = {}
    by_id: dict[int, int] = {}
    # Requests likewise (replicas decoded together share one Resources).
    sizes: dict[Resources, int] = {}
    size_by_id: dict[int, int] = {}
    queues = queues if queues is not None and budgets else {}
    seen: dict[tuple[object, ...], bool] = {}
    # Placing no pod, this does not change while the classes are made.
    idle = engine.topology.idle
    for pod in pods:
        c = constraints[pod.key]
        number = by_id.get(id(c))
        if number is None:
            number = by_id[id(c)] = numbers.setdefault(c, len(numbers))
        size = size_by_id.get(id(pod.requests))
        if size is None:
            size = size_by_id[id(pod.requests)] = sizes.setdefault(pod.requests, len(sizes))
        queue = queues.get(pod.key, "") if queues else ""
        queue = queue if queue in budgets else ""  # only a budget tells pods of two queues apart
        # As topology_signature says at once of most pods.
        signature = None if idle and not pod.topological else topology_signature(pod, engine, seen)
        # The mode follows from the constraints and the request, so it is worked out once per class.
        key = (number, size, signature, queue)
        unit = groups.get(key)
        if unit is None:
            groups[key] = PodClass([pod], c, pod_mode(pod, c, index), queue)
        else:
            unit.pods.append(pod)
    return list(groups.values())


def choices(index: OfferingIndex, c: Constraints) -> int:
    """How many offerings pods with constraints ``c`` may get."""
    return len(index.eligible(c)[0])


def order(pod: Pod, count: int = 0) -> tuple[object, ...]:
    """Higher priority first, then GPU pods with fewer offerings to choose from (a pod pinned to H100s takes
    the free H100 on a node before a pod that any GPU suits can), then pods whose place depends on other pods
    (their nodes are the frame the others fill), then bigger first."""
    r = pod.requests
    return (
        -pod.priority,
        -r.gpus,
        count if r.gpus else 0,
        not pod.topological,
        -r.cpu,
        -r.memory,
        pod.created,
        pod.uid or pod.key,
    )
