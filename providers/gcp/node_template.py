"""What a GKE node of an offering looks like: the labels GKE gives it (provisioning model, reservation, the
accelerator name GKE's GPU nodes are selected by) and what its kubelet reserves (GKE's published formula,
which is tidal's default). Needs no credentials and no Google SDK: ``tidal plan`` builds it offline."""

from __future__ import annotations

from autoscaler.core.allocatable import default_reserved
from autoscaler.core.gpu.names import gpu_model_name
from autoscaler.core.model import SPOT
from autoscaler.core.offering import NodeTemplate, Offering

__all__ = ["gke_accelerator", "node_template"]

# GKE's accelerator names by tidal's GPU model name (the A100 has two, by memory).
_GKE_ACCELERATORS = {
    "T4": "nvidia-tesla-t4",
    "V100": "nvidia-tesla-v100",
    "P100": "nvidia-tesla-p100",
    "P4": "nvidia-tesla-p4",
    "L4": "nvidia-l4",
    "H100": "nvidia-h100-80gb",
    "H200": "nvidia-h200-141gb",
    "B200": "nvidia-b200",
}
_A100_80GB_ABOVE_MIB = 50 * 1024


def gke_accelerator(offering: Offering) -> str:
    """The ``cloud.google.com/gke-accelerator`` value of a GPU offering ("" when GKE has no name for it)."""
    if not offering.gpu_count:
        return ""
    model = gpu_model_name(offering.gpu_model)
    if model == "A100":
        return "nvidia-a100-80gb" if offering.gpu_memory_mib > _A100_80GB_ABOVE_MIB else "nvidia-tesla-a100"
    return _GKE_ACCELERATORS.get(model, "")


def node_template(offering: Offering) -> NodeTemplate:
    """The labels of a GKE node of ``offering`` and GKE's kubelet reservation for it."""
    spot = offering.capacity_type == SPOT
    labels = {"cloud.google.com/gke-provisioning": "spot" if spot else "standard"}
    if spot:
        labels["cloud.google.com/gke-spot"] = "true"
    r = offering.reservation
    if r is not None:
        labels["cloud.google.com/reservation-name"] = r.name or r.id
    accelerator = gke_accelerator(offering)
    if accelerator:
        labels["cloud.google.com/gke-accelerator"] = accelerator
    return NodeTemplate(labels=tuple(sorted(labels.items())), reserved=default_reserved(offering))
