"""What the cluster already has: its nodes as the placement engine sees them, and usage counted against the
limits."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

from autoscaler.core.gpu.device_plugin import DEVICE_PLUGIN_CONFIG_LABEL, GPU_REPLICAS_LABEL
from autoscaler.core.gpu.dra_demand import DRA_GPU, DRA_LABEL
from autoscaler.core.gpu.kai_pods import gpu_groups, is_reservation_pod
from autoscaler.core.gpu.layouts import gpus_visible
from autoscaler.core.model import (
    LABEL_GPU_COUNT,
    LABEL_HOSTNAME,
    LABEL_INSTANCE_TYPE,
    STARTUP_TAINTS,
    TAINT_DISRUPTED,
    Node,
    Pod,
    Snapshot,
    Taint,
)
from autoscaler.core.offering import Offering
from autoscaler.core.placement.bins import Bin, Kind
from autoscaler.core.placement.engine import Engine
from autoscaler.core.placement.gpus import GpuSlots, device_slots, slots_of
from autoscaler.core.planning.decisions import Launching, Usage
from autoscaler.core.planning.offerings import OfferingIndex, daemonset_overhead
from autoscaler.core.resources import EMPTY, NVIDIA_GPU, PODS, Resources

# NVIDIA GPU feature discovery's label for one GPU's memory, in MiB.
GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"


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
    """Physical GPUs a node has or will have (its label says so before the device plugin reports them, or
    while MIG instances stand for them); a time-sliced or MPS node's replicas count as the GPUs they share."""
    label = node.labels.get(LABEL_GPU_COUNT, "")
    return max(node.allocatable.gpus // _replicas(node), int(label) if label.isdigit() else 0)


def _replicas(node: Node) -> int:
    """How many pods share each GPU (GPU feature discovery's ``nvidia.com/gpu.replicas``; 1 when unshared)."""
    label = node.labels.get(GPU_REPLICAS_LABEL, "")
    return int(label) if label.isdigit() and int(label) > 0 else 1


def usable(node: Node) -> bool:
    """A node new pods can go to: not cordoned, not being removed."""
    return (
        not node.unschedulable
        and not node.deleting
        and not any(t.key == TAINT_DISRUPTED for t in node.taints)
    )


def lasting_taints(node: Node) -> tuple[Taint, ...]:
    """The node's taints without those a joining node carries only until it is up (``STARTUP_TAINTS``).

    Planning onto a node that just registered must not see its not-ready taint as a refusal: that would
    buy a second node for pods the first is about to take."""
    if not any((t.key, t.effect) in STARTUP_TAINTS for t in node.taints):
        return node.taints
    return tuple(t for t in node.taints if (t.key, t.effect) not in STARTUP_TAINTS)


def _present_daemonsets(pods: Iterable[Pod]) -> list[str]:
    return [f"{p.namespace}/{p.owner.name}" for p in pods if p.daemonset and p.owner is not None]


def _missing_overhead(node: Node, pods: Sequence[Pod], snapshot: Snapshot, index: OfferingIndex) -> Resources:
    """What DaemonSets that would run on ``node`` but have no pod there yet will take once they land."""
    present = _present_daemonsets(pods)
    if index.config.daemon_set_overhead is not None:
        return EMPTY if present else index.config.daemon_set_overhead
    return daemonset_overhead(snapshot.daemonsets, node.labels, node.taints, present)


def node_bin(node: Node, pods: Sequence[Pod], snapshot: Snapshot, index: OfferingIndex) -> Bin | None:
    """The room a node offers pending pods, or ``None`` when none may go there (cordoned, being removed,
    not ready and not tidal's). A managed node still starting, or whose GPUs the device plugin has not
    advertised yet, counts with its offering's allocatable, as a launching node."""
    if not usable(node) or node.unreadable or any(p.unreadable for p in pods):
        return None  # what is free there is not known for certain
    kind = Kind.NODE
    alloc = node.allocatable
    gpus = node_gpus(node)
    if not node.ready or (node.managed and gpus and not gpus_visible(node.labels, alloc, gpus)):
        if not node.managed:
            return None
        offering = index.template(node.labels.get(LABEL_INSTANCE_TYPE, ""), node.labels)
        if offering is None:
            if not node.ready:
                return None
        else:
            alloc = index.base_allocatable(offering)
        kind = Kind.LAUNCHING
    if node.labels.get(DRA_LABEL[0]) == DRA_LABEL[1]:
        alloc = alloc + {DRA_GPU: gpus * 1000}  # its GPUs, as the DRA driver publishes them
    free = alloc.remaining((p.requests for p in pods), each={PODS: 1000})
    overhead = _missing_overhead(node, pods, snapshot, index)
    if overhead:
        free = free - overhead
    b = Bin(node.name, kind, dict(node.labels), lasting_taints(node), node.unschedulable, free=free)
    if alloc.get(NVIDIA_GPU) and _replicas(node) == 1 and not node.labels.get(DEVICE_PLUGIN_CONFIG_LABEL):
        # KAI shares whole devices: a node whose GPUs are handed out as replicas has none to share.
        offering = index.template(node.labels.get(LABEL_INSTANCE_TYPE, ""), node.labels)
        b.devices, opened = node_devices(node, alloc.get(NVIDIA_GPU) // 1000, pods, offering)
        b.free = b.free - {NVIDIA_GPU: opened * 1000}
    return b


def node_devices(
    node: Node, devices: int, pods: Sequence[Pod], offering: Offering | None
) -> tuple[GpuSlots, int]:
    """A node's GPU devices as KAI's sharing sees them: those whole-GPU pods hold are gone, KAI's reservation
    pods hold the shared ones, the fractional pods bound there use them."""
    reserved: list[str] = []
    for p in pods:
        if is_reservation_pod(p.namespace, p.labels):
            reserved.extend(gpu_groups(p.labels) or (p.key,))
        else:
            devices -= p.requests.gpus
    shares = [(p.gpu_share, gpu_groups(p.labels)) for p in pods if p.gpu_share is not None]
    memory = _gpu_memory(node, offering)
    fraction = offering.gpu_fraction / offering.gpu_count if offering and offering.partial_gpu else 1.0
    return slots_of(devices, shares, reserved, memory_mib=memory, fraction=fraction)


def _gpu_memory(node: Node, offering: Offering | None) -> int:
    """One GPU's memory: what GPU feature discovery labels the node with, else its offering's."""
    label = node.labels.get(GPU_MEMORY_LABEL, "")
    if label.isdigit():
        # KAI counts a device's memory in whole hundreds of MiB (rounded down): a share that fits the label
        # but not KAI's figure would never be placed.
        return int(label) // 100 * 100
    return offering.gpu_memory_mib if offering is not None else 0


def launching_bin(la: Launching, index: OfferingIndex) -> Bin:
    """A node the cloud is still bringing up, as its offering's template says it will be."""
    labels = {**index.labels(la.offering), LABEL_HOSTNAME: la.name}
    b = Bin(la.name, Kind.LAUNCHING, labels, index.taints(la.offering), free=index.allocatable(la.offering))
    if la.offering.gpu_count:
        b.devices = device_slots(la.offering)
    return b


def build_engine(
    snapshot: Snapshot,
    index: OfferingIndex,
    *,
    launching: Sequence[Launching] = (),
    by_node: Mapping[str, list[Pod]] | None = None,
    exclude: Iterable[str] = (),
) -> Engine:
    """The cluster as the placement engine sees it: every node (each one a topology domain, each pod on it
    counted), those pods may go to as bins, then the launches without a Node yet. Nodes in ``exclude`` count
    for topology but take no pods."""
    by_node = by_node if by_node is not None else pods_by_node(snapshot.pods)
    skip = set(exclude)
    engine = Engine(index, namespaces=snapshot.namespaces)
    for node in sorted(snapshot.nodes, key=lambda n: n.name):
        pods = by_node.get(node.name, ())
        b = None if node.name in skip else node_bin(node, pods, snapshot, index)
        if b is None:
            engine.add_topology_node(node.name, node.labels, node.taints, pods)
        else:
            engine.add_node(b, pods)
    for la in launching:
        engine.add_node(launching_bin(la, index))
    return engine


def node_usage(node: Node) -> tuple[int, int, int]:
    """(GPUs, CPU in millicores, 1 if managed else 0): what ``node`` counts against the limits."""
    return node_gpus(node), node.capacity.cpu or node.allocatable.cpu, int(node.managed)


def usage(snapshot: Snapshot) -> Usage:
    """GPUs and CPUs of every node, and the number of managed nodes, as the limits count them."""
    gpus = cpu = managed = 0
    for node in snapshot.nodes:
        g, c, m = node_usage(node)
        gpus += g
        cpu += c
        managed += m
    return Usage(gpus=gpus, cpu_milli=cpu, managed_nodes=managed)
