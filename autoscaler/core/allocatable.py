"""What a new node of an offering will have left for pods: capacity minus kubelet reservations.

Each managed Kubernetes service reserves cpu and memory for the kubelet and system daemons with its own
published formula; planning against raw capacity would launch nodes the scheduler then finds too small. The
formula of a cloud is its provider's (the ``reserved`` of the offering's node template); this module keeps
the arithmetic they share and tidal's default for an offering whose template states none.
"""

from __future__ import annotations

from autoscaler.core.offering import Offering
from autoscaler.core.resources import CPU, MEMORY, MIB, MILLI, Resources

__all__ = [
    "CPU_TIERS",
    "EVICTION_HARD_MEMORY_MIB",
    "default_reserved",
    "kube_reserved",
    "node_allocatable",
    "reservation",
    "tiered",
]

# The kubelet's default hard eviction threshold (memory.available<100Mi): memory pods can never have.
EVICTION_HARD_MEMORY_MIB = 100

# The cpu share most managed services reserve: 6% of the first core, 1% of the second, 0.5% of the next two,
# 0.25% of the rest (sizes in millicores; the last tier takes the rest).
CPU_TIERS: tuple[tuple[int, float], ...] = ((1000, 0.06), (1000, 0.01), (2000, 0.005), (0, 0.0025))

# Memory of tidal's default: 25% of the first 4 GiB, 20% of the next 4, 10% of the next 8, 6% of the next
# 112, 2% of the rest (sizes in MiB), and 255 MiB below 1 GiB.
_MEMORY_TIERS: tuple[tuple[int, float], ...] = (
    (4096, 0.25),
    (4096, 0.20),
    (8192, 0.10),
    (114688, 0.06),
    (0, 0.02),
)
_SMALL_NODE_MEMORY_MIB = 255


def tiered(total: int, tiers: tuple[tuple[int, float], ...]) -> int:
    """Sum of ``rate`` over consecutive slices of ``total`` (a size of 0 or less takes the rest)."""
    reserved = 0.0
    remaining = total
    for size, rate in tiers:
        part = remaining if size <= 0 else min(remaining, size)
        reserved += part * rate
        remaining -= part
        if remaining <= 0:
            break
    return int(reserved)


def reservation(cpu_milli: int, memory_mib: int) -> Resources:
    """kube-reserved + system-reserved of ``cpu_milli`` and ``memory_mib``, plus the hard eviction threshold."""
    return Resources({CPU: cpu_milli, MEMORY: (memory_mib + EVICTION_HARD_MEMORY_MIB) * MIB})


def default_reserved(offering: Offering) -> Resources:
    """tidal's reservation for a node whose provider states none: the tiered shares of cpu and memory that
    GKE publishes (EKS reserves the same cpu), the middle of what managed services keep back."""
    memory_mib = (
        _SMALL_NODE_MEMORY_MIB if offering.memory_mib < 1024 else tiered(offering.memory_mib, _MEMORY_TIERS)
    )
    return reservation(tiered(offering.vcpu * MILLI, CPU_TIERS), memory_mib)


def kube_reserved(offering: Offering) -> Resources:
    """What the kubelet of a node of ``offering`` keeps back: its template's reservation, else the default."""
    template = offering.template
    if template is not None and template.reserved is not None:
        return template.reserved
    return default_reserved(offering)


def node_allocatable(
    offering: Offering, *, reserved: Resources | None = None, overhead: Resources | None = None
) -> Resources:
    """Capacity minus reservations (``reserved`` overrides the template's) minus DaemonSet overhead."""
    allocatable = offering.capacity() - (reserved if reserved is not None else kube_reserved(offering))
    if overhead:
        allocatable = allocatable - overhead
    return allocatable.non_negative()
