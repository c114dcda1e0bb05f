"""What an EKS node of an offering looks like: the labels EKS and Karpenter give it, and what its kubelet
reserves (the EKS AMI's formula). Needs no credentials and no boto3: ``tidal plan`` builds it offline."""

from __future__ import annotations

from autoscaler.core.allocatable import CPU_TIERS, reservation, tiered
from autoscaler.core.model import SPOT
from autoscaler.core.offering import NodeTemplate, Offering
from autoscaler.core.resources import MILLI

__all__ = ["node_template"]

# The EKS AMI's kube-reserved memory: 255 MiB plus 11 MiB for every pod the node may run.
_MEMORY_BASE_MIB = 255
_MEMORY_PER_POD_MIB = 11


def node_template(offering: Offering) -> NodeTemplate:
    """The labels of an EKS node of ``offering`` and the EKS AMI's kubelet reservation for it."""
    r = offering.reservation
    spot = offering.capacity_type == SPOT
    labels = {
        "karpenter.sh/capacity-type": offering.capacity_type.value,
        "eks.amazonaws.com/capacityType": (
            "SPOT" if spot else "CAPACITY_BLOCK" if r is not None and r.block else "ON_DEMAND"
        ),
    }
    if r is not None:
        # Karpenter's labels for the same thing, so pods written for Karpenter select these nodes too.
        labels["karpenter.k8s.aws/capacity-reservation-id"] = r.id
        labels["karpenter.k8s.aws/capacity-reservation-type"] = "capacity-block" if r.block else "default"
    # The EKS AMI reserves cpu with the tiered shares managed services share, memory by pods.
    reserved = reservation(
        tiered(offering.vcpu * MILLI, CPU_TIERS), _MEMORY_BASE_MIB + _MEMORY_PER_POD_MIB * offering.max_pods
    )
    return NodeTemplate(labels=tuple(sorted(labels.items())), reserved=reserved)
