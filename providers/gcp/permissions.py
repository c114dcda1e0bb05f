"""The IAM permissions each Compute Engine API method tidal calls needs (``deploy/gcp/`` grants exactly these).

``instances.insert`` needs more than ``compute.instances.create``: setting metadata, labels, network tags
and a service account, creating the boot disk from an image and using the subnetwork each need their own
permission. Acting as the node service account (``iam.serviceAccounts.actAs``) is granted on that service
account, not in the project role (docs/gcp.md). The Cloud Billing Catalog is public and needs no permission,
only the Cloud Billing API enabled in the project.
"""

from __future__ import annotations

__all__ = ["API_PERMISSIONS", "SERVICE_ACCOUNT_PERMISSIONS", "role_permissions"]

API_PERMISSIONS: dict[str, tuple[str, ...]] = {
    "compute.machineTypes.list": ("compute.machineTypes.list",),
    "compute.acceleratorTypes.list": ("compute.acceleratorTypes.list",),
    "compute.instanceTemplates.get": ("compute.instanceTemplates.get",),
    # Regional templates share the instanceTemplates permissions.
    "compute.regionInstanceTemplates.get": ("compute.instanceTemplates.get",),
    "compute.instanceGroupManagers.list": ("compute.instanceGroupManagers.list",),
    # Only with gcp.reservations; consuming a reservation of the project needs no permission of its own.
    "compute.reservations.list": ("compute.reservations.list",),
    "compute.instances.insert": (
        "compute.instances.create",
        "compute.instances.setMetadata",
        "compute.instances.setLabels",
        "compute.instances.setTags",
        "compute.instances.setServiceAccount",
        "compute.disks.create",
        "compute.images.useReadOnly",
        "compute.subnetworks.use",
    ),
    "compute.instances.get": ("compute.instances.get",),
    "compute.instances.aggregatedList": ("compute.instances.list",),
    "compute.instances.delete": ("compute.instances.delete",),
    "compute.zoneOperations.get": ("compute.zoneOperations.get",),
    "cloudbilling.services.list": (),
    "cloudbilling.services.skus.list": (),
}
SERVICE_ACCOUNT_PERMISSIONS = ("iam.serviceAccounts.actAs",)


def role_permissions() -> list[str]:
    """Every project-level permission the provider needs, sorted."""
    return sorted({p for perms in API_PERMISSIONS.values() for p in perms})
