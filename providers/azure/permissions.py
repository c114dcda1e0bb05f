"""The Azure RBAC actions tidal needs: one per ARM call it makes, plus the linked checks ARM adds to writes.

``deploy/azure/role-definition.json`` (node resource group) and ``role-definition-skus.json``
(subscription) grant exactly ``ACTIONS`` and ``LINKED_ACTIONS``; a test compares them with the calls a full
scenario makes against the fake ARM, and with the resources an AKS node pool's scale set model links to.

**Linked checks.** When a scale set or VM is written (a scale-out, a template copy, a Flexible VM), ARM also
checks that the caller may *use* every resource the model links to: join the subnet, the load balancer's
backend pools, the network security group and the application security groups of its NIC configurations,
and assign its user-assigned identities (a missing one fails with ``LinkedAuthorizationFailed``).
:func:`linked_actions` reads those links from a scale set's model, so what the role must grant is derived
from what AKS actually puts there, not written down by hand; the provider warns about any link the shipped
role does not cover (a custom image gallery, node public IP prefixes, disk encryption sets, …).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import structlog

_log = structlog.get_logger("tidal.providers.azure")

__all__ = [
    "ACTIONS",
    "AKS_IMAGE_SUBSCRIPTION",
    "FLEXIBLE_ACTIONS",
    "LINKED_ACTIONS",
    "LINKED_ACTION_BY_TYPE",
    "SUBSCRIPTION_ACTIONS",
    "LinkWarnings",
    "linked_actions",
    "resource_type",
]

# action -> the ArmCompute method(s) that need it
ACTIONS: dict[str, str] = {
    "Microsoft.Compute/skus/read": "skus",
    "Microsoft.Compute/virtualMachineScaleSets/read": "scale_set, scale_sets",
    "Microsoft.Compute/virtualMachineScaleSets/write": "update_scale_set, create_scale_set",
    "Microsoft.Compute/virtualMachineScaleSets/delete/action": "delete_instances",
    "Microsoft.Compute/virtualMachineScaleSets/virtualMachines/read": "uniform_vms",
    "Microsoft.Compute/virtualMachines/read": "flexible_vms, vm",
    "Microsoft.Compute/virtualMachines/write": "create_vm",
    "Microsoft.Compute/virtualMachines/delete": "delete_vm",
    "Microsoft.Compute/locations/operations/read": "polling every long-running write",
    # Only with azure.capacityReservationGroups.
    "Microsoft.Compute/capacityReservationGroups/read": "capacity_reservation_group",
    "Microsoft.Compute/capacityReservationGroups/capacityReservations/read": "capacity_reservations",
}

# Resource SKUs are listed at subscription scope; everything else stays inside the node resource group.
SUBSCRIPTION_ACTIONS = frozenset({"Microsoft.Compute/skus/read"})

# The action ARM checks on a linked resource, by the resource's type (lower case, as ARM compares them).
LINKED_ACTION_BY_TYPE: dict[str, str] = {
    "microsoft.network/virtualnetworks/subnets": "Microsoft.Network/virtualNetworks/subnets/join/action",
    "microsoft.network/loadbalancers/backendaddresspools": (
        "Microsoft.Network/loadBalancers/backendAddressPools/join/action"
    ),
    "microsoft.network/loadbalancers/inboundnatpools": (
        "Microsoft.Network/loadBalancers/inboundNatPools/join/action"
    ),
    "microsoft.network/applicationgateways/backendaddresspools": (
        "Microsoft.Network/applicationGateways/backendAddressPools/join/action"
    ),
    "microsoft.network/networksecuritygroups": "Microsoft.Network/networkSecurityGroups/join/action",
    "microsoft.network/applicationsecuritygroups": (
        "Microsoft.Network/applicationSecurityGroups/joinIpConfiguration/action"
    ),
    "microsoft.network/publicipprefixes": "Microsoft.Network/publicIPPrefixes/join/action",
    "microsoft.managedidentity/userassignedidentities": (
        "Microsoft.ManagedIdentity/userAssignedIdentities/assign/action"
    ),
    "microsoft.compute/galleries/images/versions": "Microsoft.Compute/galleries/images/versions/read",
    "microsoft.compute/diskencryptionsets": "Microsoft.Compute/diskEncryptionSets/read",
    "microsoft.compute/capacityreservationgroups": "Microsoft.Compute/capacityReservationGroups/deploy/action",
}

# AKS publishes its node images in a gallery of this subscription and Azure grants every AKS cluster's
# writes the use of them: no role of the customer's can (or needs to) grant it.
AKS_IMAGE_SUBSCRIPTION = "109a5e88-712a-48ae-9078-9ca8b3c81345"

# A Flexible VM's NIC is created by Compute from the scale set's NIC configuration and attached to it.
FLEXIBLE_ACTIONS: dict[str, str] = {
    "Microsoft.Network/networkInterfaces/write": "a Flexible VM's NIC is created with it",
    "Microsoft.Network/networkInterfaces/join/action": "and attached to the VM",
}

# What the shipped role grants for linked checks: the links AKS puts in every node pool's model (subnet,
# the cluster load balancer's backend pools, the node NSG, the kubelet identity), the application security
# groups a node pool may name (--asg-ids), and the NIC of a Flexible VM.
LINKED_ACTIONS: dict[str, str] = {
    "Microsoft.Network/virtualNetworks/subnets/join/action": "VMs join the node pool's subnet",
    "Microsoft.Network/loadBalancers/backendAddressPools/join/action": (
        "VMs join the cluster load balancer's backend pools (kubernetes, aksOutboundBackendPool)"
    ),
    "Microsoft.Network/networkSecurityGroups/join/action": "the node NSG on the NIC configuration",
    "Microsoft.Network/applicationSecurityGroups/joinIpConfiguration/action": (
        "a node pool's application security groups"
    ),
    "Microsoft.ManagedIdentity/userAssignedIdentities/assign/action": "VMs carry the kubelet identity",
    **FLEXIBLE_ACTIONS,
    "Microsoft.Compute/capacityReservationGroups/deploy/action": (
        "a VM tidal puts into a capacity reservation is associated with its group"
    ),
}

_ID = re.compile(
    r"^/subscriptions/(?P<sub>[^/]+)/resourceGroups/[^/]+/providers/(?P<ns>[^/]+)/(?P<rest>.+)$",
    re.IGNORECASE,
)


def resource_type(resource_id: str) -> str | None:
    """``microsoft.network/loadbalancers/backendaddresspools`` of a resource id (lower case), or None."""
    m = _ID.match(resource_id.strip())
    if m is None:
        return None
    parts = m.group("rest").strip("/").split("/")
    if len(parts) % 2:
        return None
    return "/".join([m.group("ns"), *parts[0::2]]).lower()


def _ids(node: Any) -> Iterator[str]:
    if isinstance(node, Mapping):
        for key, value in node.items():
            if key == "id" and isinstance(value, str):
                yield value
            elif key == "userAssignedIdentities" and isinstance(value, Mapping):
                yield from (k for k in value if isinstance(k, str))
            else:
                yield from _ids(value)
    elif isinstance(node, list):
        for item in node:
            yield from _ids(item)


def linked_actions(resource: Mapping[str, Any]) -> tuple[dict[str, list[str]], list[str]]:
    """What writing this scale set, or a VM, (as ARM returns or is sent it) needs on linked resources:
    ``({action: [resource ids]}, [ids of linked resources of a type tidal does not know])``.

    AKS's node image gallery (see ``AKS_IMAGE_SUBSCRIPTION``) needs nothing, and neither does a Flexible
    VM's own scale set (the role may write it anyway).
    """
    model = {"identity": resource.get("identity") or {}, "properties": resource.get("properties") or {}}
    needed: dict[str, list[str]] = {}
    unknown: list[str] = []
    for rid in _ids(model):
        kind = resource_type(rid)
        m = _ID.match(rid)
        if kind is None or m is None or kind == "microsoft.compute/virtualmachinescalesets":
            continue
        if kind == "microsoft.compute/galleries/images/versions" and (
            m.group("sub").lower() == AKS_IMAGE_SUBSCRIPTION
        ):
            continue
        action = LINKED_ACTION_BY_TYPE.get(kind)
        if action is None:
            unknown.append(rid)
        elif rid not in needed.setdefault(action, []):
            needed[action].append(rid)
    return needed, unknown


class LinkWarnings:
    """Warns, once each, about resources a scale set's model links to that the shipped role does not let
    tidal use: a scale-out would fail with LinkedAuthorizationFailed until the action is granted."""

    def __init__(self) -> None:
        self._warned: set[tuple[str, str]] = set()

    def check(self, models: Iterable[tuple[str, Mapping[str, Any]]]) -> None:
        """Check each (scale set name, its ARM model)."""
        for name, model in models:
            needed, unknown = linked_actions(model)
            for action, ids in sorted(needed.items()):
                if action not in LINKED_ACTIONS and (name, action) not in self._warned:
                    self._warned.add((name, action))
                    _log.warning(
                        "azure_scale_set_needs_permission", scale_set=name, action=action, scope=ids[0]
                    )
            for rid in unknown:
                if (name, rid) not in self._warned:
                    self._warned.add((name, rid))
                    _log.warning("azure_scale_set_links_unknown_resource", scale_set=name, resource=rid)
