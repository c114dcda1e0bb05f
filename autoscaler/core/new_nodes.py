"""What a new node of an offering will carry: its provider's node template, and tidal's own labels and taints.

The cloud's part (EKS, GKE or AKS labels, the AKS spot taint) is the offering's
:class:`~autoscaler.core.offering.NodeTemplate`, built by the provider; this module adds only what is the same on
every cloud: the well-known Kubernetes labels, tidal's labels, GPU and GPU-layout labels, the configured
``nodeLabels`` and ``nodeTaints``, and the GPU taint.
"""

from __future__ import annotations

from autoscaler.config.values import Config
from autoscaler.core.gpu.names import gpu_model_name
from autoscaler.core.model import (
    LABEL_ARCH,
    LABEL_CAPACITY_TYPE,
    LABEL_CLUSTER,
    LABEL_GPU_COUNT,
    LABEL_GPU_MODEL,
    LABEL_INSTANCE_TYPE,
    LABEL_MANAGED,
    LABEL_OS,
    LABEL_REGION,
    LABEL_RESERVATION_END,
    LABEL_RESERVATION_ID,
    LABEL_RESERVATION_TYPE,
    LABEL_ZONE,
    Taint,
)
from autoscaler.core.offering import Offering
from autoscaler.core.resources import NVIDIA_GPU

__all__ = ["GPU_TAINT", "NewNodes", "node_labels", "node_taints"]

GPU_TAINT = Taint(NVIDIA_GPU, "present", "NoSchedule")


def node_labels(offering: Offering, config: Config) -> dict[str, str]:
    """The labels a node launched from ``offering`` will carry (well-known, tidal's, its template's,
    configured)."""
    labels = {
        LABEL_INSTANCE_TYPE: offering.instance_type,
        LABEL_ARCH: offering.arch.value,
        LABEL_OS: "linux",
        LABEL_CAPACITY_TYPE: offering.capacity_type.value,
        LABEL_MANAGED: "true",
        LABEL_CLUSTER: config.cluster_name,
        LABEL_REGION: offering.region or config.region,
    }
    if offering.zone:
        labels[LABEL_ZONE] = offering.zone
    r = offering.reservation
    if r is not None:
        labels[LABEL_RESERVATION_ID] = r.id
        labels[LABEL_RESERVATION_TYPE] = r.kind.value
        if r.end is not None:
            labels[LABEL_RESERVATION_END] = str(int(r.end))
    if offering.gpu_count:
        labels[LABEL_GPU_MODEL] = gpu_model_name(offering.gpu_model)
        labels[LABEL_GPU_COUNT] = str(offering.gpu_count)
        labels[
            "nvidia.com/gpu.present" if offering.gpu_vendor.upper() != "AMD" else "amd.com/gpu.present"
        ] = "true"
    if offering.layout is not None:
        labels.update(offering.layout.labels)
    if offering.template is not None:
        labels.update(offering.template.labels)
    labels.update(config.node_labels)
    return dict(sorted(labels.items()))


def node_taints(offering: Offering, config: Config) -> tuple[Taint, ...]:
    """Taints a new node will carry: configured ones, the GPU taint on NVIDIA GPU nodes (``gpuNodeTaint``),
    and the ones its template names (AKS's spot taint)."""
    taints = tuple(config.node_taints)
    if config.gpu_node_taint and offering.gpu_count and offering.gpu_vendor.upper() != "AMD":
        taints += (GPU_TAINT,)
    if offering.template is not None:
        taints += offering.template.taints
    return taints


class NewNodes:
    """The labels and taints of new nodes, worked out once per offering for one configuration: an explicit
    memo that its owner (an offering index, one call of the offering filters) keeps exactly as long as the
    offerings and the configuration it was made for."""

    __slots__ = ("_labels", "_shared", "_taints", "config")

    def __init__(self, config: Config) -> None:
        self.config = config
        self._labels: dict[Offering, dict[str, str]] = {}
        self._taints: dict[Offering, tuple[Taint, ...]] = {}
        # Each distinct set of taints once: thousands of offerings carry a few.
        self._shared: dict[tuple[Taint, ...], tuple[Taint, ...]] = {}

    def labels(self, offering: Offering) -> dict[str, str]:
        """:func:`node_labels` of ``offering`` (the same dict on every call: do not change it)."""
        found = self._labels.get(offering)
        if found is None:
            found = self._labels[offering] = node_labels(offering, self.config)
        return found

    def taints(self, offering: Offering) -> tuple[Taint, ...]:
        """:func:`node_taints` of ``offering``."""
        found = self._taints.get(offering)
        if found is None:
            taints = node_taints(offering, self.config)
            found = self._taints[offering] = self._shared.setdefault(taints, taints)
        return found
