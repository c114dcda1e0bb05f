"""The GKE node pool instance template tidal launches from, and the VM resource built out of it.

A GKE node is not a bare VM: its boot disk image, service account, network (with the Pod alias IP range)
and, above all, its ``kube-env`` metadata come from the node pool's instance template. tidal reads the
template (``gcp.instanceTemplate``, or the template of ``gcp.nodePool``'s managed instance group), copies
its properties into an ``instances.insert`` body, and sets what differs per launch: name, machine type,
scheduling (Spot or standard), attached GPUs, GCE labels, and the node's labels and taints in kube-env.

The properties are copied rather than passed as ``sourceInstanceTemplate`` overrides because an override
cannot *remove* what a template sets (an empty ``guestAccelerators`` list is simply not sent), and a GPU
pool's template must still launch a CPU-only machine type.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from google.cloud import compute_v1

from autoscaler.cloud import ProviderError
from autoscaler.core.model import SPOT, Taint
from autoscaler.core.offering import Offering
from providers.gcp.bootstrap import KUBE_ENV, KUBE_LABELS, format_labels, parse_labels, rewrite_kube_env
from providers.gcp.clients import ClientFactory
from providers.gcp.errors import CALL_ERRORS, api_error
from providers.gcp.reservations import affinity
from providers.gcp.settings import NodePoolRef, TemplateRef
from providers.gcp.shapes import Shape

__all__ = ["NODEPOOL_LABEL", "build_instance", "fetch_template", "metadata_value"]

NODEPOOL_LABEL = "cloud.google.com/gke-nodepool"
_COPIED = (
    "advanced_machine_features",
    "can_ip_forward",
    "confidential_instance_config",
    "description",
    "disks",
    "key_revocation_action_type",
    "local_ssd_encryption_mode",
    "min_cpu_platform",
    "network_interfaces",
    "network_performance_config",
    "private_ipv6_google_access",
    "resource_policies",
    "service_accounts",
    "shielded_instance_config",
    "tags",
    "workload_identity_config",
)


def metadata_value(metadata: compute_v1.Metadata, key: str) -> str | None:
    """One metadata item's value, or None."""
    return next((item.value for item in metadata.items if item.key == key), None)


def _get(factory: ClientFactory, ref: TemplateRef) -> compute_v1.InstanceTemplate:
    clients = factory.compute()
    try:
        if ref.region:
            return clients.region_instance_templates.get(
                project=ref.project,
                region=ref.region,
                instance_template=ref.name,
                retry=factory.retry(),
                timeout=factory.timeout,
            )
        return clients.instance_templates.get(
            project=ref.project, instance_template=ref.name, retry=factory.retry(), timeout=factory.timeout
        )
    except CALL_ERRORS as err:
        raise api_error(err, f"reading instance template {ref.path}") from None


def _is_pool(template: compute_v1.InstanceTemplate, pool: NodePoolRef) -> bool:
    metadata = template.properties.metadata
    labels = parse_labels(metadata_value(metadata, KUBE_LABELS) or "")
    in_pool = (
        labels.get(NODEPOOL_LABEL) == pool.name
        or template.properties.labels.get("goog-k8s-node-pool-name") == pool.name
        or f"{NODEPOOL_LABEL}={pool.name}" in (metadata_value(metadata, KUBE_ENV) or "")
    )
    return in_pool and (not pool.cluster or metadata_value(metadata, "cluster-name") == pool.cluster)


def _pool_template(
    factory: ClientFactory, project: str, zones: Sequence[str], pool: NodePoolRef
) -> compute_v1.InstanceTemplate:
    """The template of the node pool's managed instance group (GKE names them ``gke-…-grp``)."""
    clients = factory.compute()
    looked: set[str] = set()
    for zone in zones:
        try:
            groups = clients.instance_group_managers.list(
                request=compute_v1.ListInstanceGroupManagersRequest(project=project, zone=zone),
                retry=factory.retry(),
                timeout=factory.timeout,
            )
            urls = [g.instance_template for g in groups if g.name.startswith("gke-") and g.instance_template]
        except CALL_ERRORS as err:
            raise api_error(err, f"listing instance groups in {zone}") from None
        for url in urls:
            ref = TemplateRef.parse(url.rsplit("/compute/v1/", 1)[-1], project)
            if ref is None or ref.path in looked:
                continue
            looked.add(ref.path)
            template = _get(factory, ref)
            if _is_pool(template, pool):
                return template
    cluster = f" of cluster {pool.cluster}" if pool.cluster else ""
    raise ProviderError(
        f"no GKE instance group of node pool {pool.name!r}{cluster} in zones {', '.join(zones)} "
        "(gcp.nodePool: does the pool exist in these zones?)"
    )


def fetch_template(
    factory: ClientFactory,
    project: str,
    zones: Sequence[str],
    ref: TemplateRef | None,
    pool: NodePoolRef | None,
) -> compute_v1.InstanceTemplate:
    """The configured template (directly, or through the node pool); it must carry ``kube-env``."""
    if ref is not None:
        template = _get(factory, ref)
    elif pool is not None:
        template = _pool_template(factory, project, zones, pool)
    else:
        raise ProviderError("neither gcp.instanceTemplate nor gcp.nodePool is set")
    if not metadata_value(template.properties.metadata, KUBE_ENV):
        raise ProviderError(
            f"instance template {template.name} has no kube-env metadata: it is not a GKE node pool template"
        )
    return template


def _scheduling(shape: Shape, capacity_type: str) -> compute_v1.Scheduling:
    gpus = shape.gpu is not None and shape.gpu_count > 0
    if capacity_type == SPOT:
        # GCE deletes a preempted Spot VM; tidal then sees it gone and launches a replacement.
        return compute_v1.Scheduling(
            provisioning_model="SPOT",
            instance_termination_action="DELETE",
            automatic_restart=False,
            on_host_maintenance="TERMINATE",
            preemptible=False,
        )
    return compute_v1.Scheduling(
        provisioning_model="STANDARD",
        automatic_restart=True,
        on_host_maintenance="TERMINATE" if gpus else "MIGRATE",  # GPU VMs cannot live-migrate
        preemptible=False,
    )


def _disks(
    disks: Sequence[compute_v1.AttachedDisk], project: str, zone: str
) -> list[compute_v1.AttachedDisk]:
    out = []
    for disk in disks:
        copy = compute_v1.AttachedDisk(disk)
        params = copy.initialize_params
        if "initialize_params" in copy and params.disk_type and "/" not in params.disk_type:
            # A template names the disk type; an instance needs the zonal resource.
            params.disk_type = f"projects/{project}/zones/{zone}/diskTypes/{params.disk_type}"
        out.append(copy)
    return out


def build_instance(
    template: compute_v1.InstanceTemplate,
    *,
    project: str,
    name: str,
    shape: Shape,
    offering: Offering,
    gce_labels: Mapping[str, str],
    node_labels: Mapping[str, str],
    taints: Sequence[Taint],
) -> compute_v1.Instance:
    """The ``instances.insert`` body for one launch of ``shape`` as ``offering`` from ``template``."""
    props = template.properties
    instance = compute_v1.Instance(name=name)
    for field in _COPIED:
        if field in props:
            setattr(instance, field, getattr(props, field))
    zone = shape.zone
    instance.disks = _disks(props.disks, project, zone)
    instance.machine_type = f"zones/{zone}/machineTypes/{shape.machine_type}"
    instance.scheduling = _scheduling(shape, offering.capacity_type)
    # Which reservation the VM consumes is tidal's choice, whatever the node pool's template says.
    instance.reservation_affinity = affinity(
        offering, props.reservation_affinity if "reservation_affinity" in props else None
    )
    instance.guest_accelerators = (
        [
            compute_v1.AcceleratorConfig(
                accelerator_type=f"projects/{project}/zones/{zone}/acceleratorTypes/{shape.gpu.type}",
                accelerator_count=shape.gpu_count,
            )
        ]
        if shape.attached and shape.gpu is not None
        else []
    )
    instance.labels = dict(gce_labels)
    items = []
    for item in props.metadata.items:
        value = item.value
        if item.key == KUBE_ENV:
            value = rewrite_kube_env(value, node_labels, taints, zone)
        elif item.key == KUBE_LABELS:
            value = format_labels(node_labels)
        items.append(compute_v1.Items(key=item.key, value=value))
    if metadata_value(props.metadata, KUBE_LABELS) is None:
        items.append(compute_v1.Items(key=KUBE_LABELS, value=format_labels(node_labels)))
    instance.metadata = compute_v1.Metadata(items=items)
    return instance
