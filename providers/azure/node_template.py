"""What an AKS node of an offering looks like: the labels and the spot taint AKS gives it, and what its
kubelet reserves (AKS's published formula). Needs no credentials and no Azure SDK: ``tidal plan`` builds it
offline."""

from __future__ import annotations

from autoscaler.core.allocatable import reservation
from autoscaler.core.model import SPOT, Taint
from autoscaler.core.offering import NodeTemplate, Offering

__all__ = ["SPOT_TAINT", "node_template"]

PRIORITY_LABEL = "kubernetes.azure.com/scalesetpriority"
# AKS taints every spot node so that only pods that tolerate eviction land there.
SPOT_TAINT = Taint(PRIORITY_LABEL, "spot", "NoSchedule")

# AKS kube-reserved cpu (millicores) by the node's cores: up to 1, 2, 4, …, 64 cores; 10m per core above 64.
_CPU_MILLI = ((1, 60), (2, 100), (4, 140), (8, 180), (16, 260), (32, 420), (64, 740))
_CPU_MILLI_PER_CORE_ABOVE = 10
# AKS kube-reserved memory: 20 MiB per pod plus 50 MiB, and never more than a quarter of the node.
_MEMORY_PER_POD_MIB = 20
_MEMORY_BASE_MIB = 50


def _cpu_milli(vcpu: int) -> int:
    for cores, milli in _CPU_MILLI:
        if vcpu <= cores:
            return milli
    last_cores, last_milli = _CPU_MILLI[-1]
    return last_milli + (vcpu - last_cores) * _CPU_MILLI_PER_CORE_ABOVE


def node_template(offering: Offering) -> NodeTemplate:
    """The labels and taints of an AKS node of ``offering`` and AKS's kubelet reservation for it."""
    spot = offering.capacity_type == SPOT
    labels = {PRIORITY_LABEL: "spot" if spot else "regular"}
    if offering.gpu_count:
        labels["accelerator"] = "nvidia"
    memory_mib = min(_MEMORY_PER_POD_MIB * offering.max_pods + _MEMORY_BASE_MIB, offering.memory_mib // 4)
    return NodeTemplate(
        labels=tuple(sorted(labels.items())),
        taints=(SPOT_TAINT,) if spot else (),
        reserved=reservation(_cpu_milli(offering.vcpu), memory_mib),
    )
