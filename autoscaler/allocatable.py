"""What a new node of an offering will have left for pods: capacity minus kubelet reservations.

Each managed Kubernetes service reserves cpu and memory for the kubelet and system daemons with its own
published formula; planning against raw capacity would launch nodes the scheduler then finds too small.
"""

from __future__ import annotations

from autoscaler.model import Offering
from autoscaler.resources import CPU, MEMORY, MIB, MILLI, Resources

EVICTION_HARD_MEMORY_MIB = 100


def _tiered(total: int, tiers: tuple[tuple[int, float], ...]) -> int:
    """Sum of ``rate`` over consecutive slices of ``total`` (the last tier takes the rest)."""
    reserved = 0.0
    remaining = total
    for size, rate in tiers:
        part = remaining if size <= 0 else min(remaining, size)
        reserved += part * rate
        remaining -= part
        if remaining <= 0:
            break
    return int(reserved)


def _cpu_reserved_milli(vcpu: int) -> int:
    # EKS and GKE: 6% of the first core, 1% of the second, 0.5% of the next two, 0.25% of the rest.
    return _tiered(vcpu * MILLI, ((1000, 0.06), (1000, 0.01), (2000, 0.005), (0, 0.0025)))


_AKS_CPU_MILLI = ((1, 60), (2, 100), (4, 140), (8, 180), (16, 260), (32, 420), (64, 740))


def _aks_cpu_milli(vcpu: int) -> int:
    for cores, milli in _AKS_CPU_MILLI:
        if vcpu <= cores:
            return milli
    return 740 + (vcpu - 64) * 10


def _gke_memory_mib(memory_mib: int) -> int:
    if memory_mib < 1024:
        return 255
    return _tiered(memory_mib, ((4096, 0.25), (4096, 0.20), (8192, 0.10), (114688, 0.06), (0, 0.02)))


def kube_reserved(offering: Offering, cloud: str) -> Resources:
    """The cloud's own kube-reserved + system-reserved + hard eviction threshold for this offering."""
    if cloud == "aws":
        cpu = _cpu_reserved_milli(offering.vcpu)
        memory_mib = 255 + 11 * offering.max_pods
    elif cloud == "azure":
        cpu = _aks_cpu_milli(offering.vcpu)
        memory_mib = min(20 * offering.max_pods + 50, offering.memory_mib // 4)
    else:  # gcp, and the GKE formula as a sensible middle for anything else
        cpu = _cpu_reserved_milli(offering.vcpu)
        memory_mib = _gke_memory_mib(offering.memory_mib)
    return Resources({CPU: cpu, MEMORY: (memory_mib + EVICTION_HARD_MEMORY_MIB) * MIB})


def node_allocatable(
    offering: Offering, cloud: str, *, reserved: Resources | None = None, overhead: Resources | None = None
) -> Resources:
    """Capacity minus reservations (``reserved`` overrides the cloud formula) minus DaemonSet overhead."""
    allocatable = offering.capacity() - (reserved if reserved is not None else kube_reserved(offering, cloud))
    if overhead:
        allocatable = allocatable - overhead
    return allocatable.non_negative()
