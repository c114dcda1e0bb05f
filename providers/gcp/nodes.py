"""Names and labels of one launch: the VM name, its GCE labels, and the labels its Node registers with."""

from __future__ import annotations

import uuid
from collections.abc import Mapping

import structlog
from google.cloud import compute_v1

from autoscaler.core.model import LABEL_CLUSTER as TIDAL_CLUSTER
from autoscaler.core.model import LABEL_LAUNCH_TOKEN as TIDAL_TOKEN
from autoscaler.core.model import LABEL_MANAGED as TIDAL_MANAGED
from autoscaler.core.model import Arch
from autoscaler.core.offering import LaunchRequest, Offering
from providers.gcp.bootstrap import (
    KUBE_ENV,
    KUBE_LABELS,
    LABEL_CLUSTER,
    LABEL_MANAGED,
    LABEL_TOKEN,
    MAX_GCE_LABELS,
    REPLACED_NODE_LABELS,
    gce_label,
    kubelet_labels,
    template_node_labels,
)
from providers.gcp.shapes import machine_family
from providers.gcp.template import metadata_value

__all__ = ["GPU_DRIVER_LABEL", "instance_name", "launch_labels", "template_arch"]

log = structlog.get_logger("tidal.providers.gcp")
GPU_DRIVER_LABEL = "cloud.google.com/gke-gpu-driver-version"
MACHINE_FAMILY_LABEL = "cloud.google.com/machine-family"
_ARM_FAMILIES = ("t2a", "c4a", "n4a")


def instance_name(cluster: str, token: str) -> str:
    """``tidal-<cluster>-<16 hex digits of the token>``: one name per launch, valid as a GCE name and a
    Node name (GKE names Nodes after their VMs)."""
    try:
        digits = uuid.UUID(token).hex[:16]
    except ValueError:
        digits = uuid.uuid5(uuid.NAMESPACE_URL, token).hex[:16]
    return f"tidal-{cluster[:40].rstrip('-')}-{digits}"


def template_arch(template: compute_v1.InstanceTemplate) -> Arch:
    """The CPU architecture the template's boot image and kubelet binaries are for."""
    kube_env = metadata_value(template.properties.metadata, KUBE_ENV) or ""
    machine = template.properties.machine_type.rsplit("/", 1)[-1]
    if "linux-arm64" in kube_env or machine_family(machine) in _ARM_FAMILIES:
        return Arch.ARM64
    return Arch.AMD64


def _gce_labels(
    template: compute_v1.InstanceTemplate, request: LaunchRequest, cluster: str
) -> dict[str, str]:
    own = {
        LABEL_CLUSTER: gce_label(cluster),
        LABEL_MANAGED: "true",
        LABEL_TOKEN: gce_label(request.token),
    }
    extra = {
        gce_label(k, key=True): gce_label(v)
        for k, v in request.tags.items()
        if k not in (TIDAL_CLUSTER, TIDAL_MANAGED, TIDAL_TOKEN)
    }
    labels = {**dict(template.properties.labels), **extra}
    room = MAX_GCE_LABELS - len(own)
    if len(labels) > room:
        dropped = sorted(labels)[room:]
        log.warning("gcp_labels_dropped", reason="GCE allows 64 labels per VM", dropped=dropped)
        labels = {k: labels[k] for k in sorted(labels)[:room]}
    return {**labels, **own}


def launch_labels(
    template: compute_v1.InstanceTemplate,
    request: LaunchRequest,
    offering: Offering,
    planned: Mapping[str, str],
    *,
    cluster: str,
    driver: str,
) -> tuple[dict[str, str], dict[str, str]]:
    """(GCE labels of the VM, labels its kubelet registers the Node with).

    The Node keeps the template's labels (node pool name, boot disk, OS) except those describing the
    template's own machines (Spot, accelerator, family), and gets the labels tidal planned with.
    """
    metadata = template.properties.metadata
    inherited = template_node_labels(
        metadata_value(metadata, KUBE_ENV) or "", metadata_value(metadata, KUBE_LABELS)
    )
    node = {
        k: v for k, v in inherited.items() if k not in REPLACED_NODE_LABELS and not k.startswith("tidal.dev/")
    }
    node.update(kubelet_labels({**planned, **request.labels}))
    node[MACHINE_FAMILY_LABEL] = machine_family(offering.instance_type)
    if offering.gpu_count:
        node[GPU_DRIVER_LABEL] = driver
    return _gce_labels(template, request, cluster), node
