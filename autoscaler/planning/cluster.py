"""What the cluster already has: free room per node, and usage counted against the limits."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

from autoscaler.model import (
    LABEL_GPU_COUNT,
    LABEL_INSTANCE_TYPE,
    TAINT_DISRUPTED,
    Node,
    Pod,
    Snapshot,
)
from autoscaler.planning.offerings import OfferingIndex
from autoscaler.planning.plan import Capacity, Usage
from autoscaler.resources import PODS, Resources


def pods_by_node(pods: Iterable[Pod]) -> dict[str, list[Pod]]:
    """Bound, unfinished pods grouped by node name."""
    out: dict[str, list[Pod]] = defaultdict(list)
    for pod in pods:
        if pod.node_name and not pod.finished:
            out[pod.node_name].append(pod)
    return out


def requested(pods: Iterable[Pod]) -> Resources:
    """What the pods request, each taking one pod slot."""
    return Resources.total((p.requests for p in pods), each={PODS: 1000})


def node_gpus(node: Node) -> int:
    """GPUs a node has or will have (its label says so before the device plugin reports them)."""
    label = node.labels.get(LABEL_GPU_COUNT, "")
    return max(node.allocatable.gpus, int(label) if label.isdigit() else 0)


def usable(node: Node) -> bool:
    """A node new pods can go to: not cordoned, not being removed."""
    return (
        not node.unschedulable
        and not node.deleting
        and not any(t.key == TAINT_DISRUPTED for t in node.taints)
    )


def node_capacity(
    snapshot: Snapshot,
    index: OfferingIndex,
    *,
    by_node: Mapping[str, list[Pod]] | None = None,
    exclude: Iterable[str] = (),
) -> list[Capacity]:
    """Room on every usable node; a managed node still starting counts with its offering's allocatable."""
    by_node = by_node if by_node is not None else pods_by_node(snapshot.pods)
    skip = set(exclude)
    types = index.by_type
    out: list[Capacity] = []
    for node in snapshot.nodes:
        if node.name in skip or not usable(node):
            continue
        used = requested(by_node.get(node.name, ()))
        if node.ready:
            alloc = node.allocatable
            launching = False
            if node.managed and node_gpus(node) > alloc.gpus:
                launching = True  # GPUs not yet advertised by the device plugin
                offering = types.get(node.labels.get(LABEL_INSTANCE_TYPE, ""))
                if offering is not None:
                    alloc = index.allocatable(offering)
        elif node.managed:
            offering = types.get(node.labels.get(LABEL_INSTANCE_TYPE, ""))
            if offering is None:
                continue
            alloc = index.allocatable(offering)
            launching = True
        else:
            continue
        out.append(Capacity(node.name, node.labels, node.taints, (alloc - used).non_negative(), launching))
    return out


def usage(snapshot: Snapshot) -> Usage:
    """GPUs and CPUs of every node, and the number of managed nodes, as the limits count them."""
    gpus = cpu = managed = 0
    for node in snapshot.nodes:
        gpus += node_gpus(node)
        cpu += node.capacity.cpu or node.allocatable.cpu
        managed += node.managed
    return Usage(gpus=gpus, cpu_milli=cpu, managed_nodes=managed)
