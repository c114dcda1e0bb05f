"""The Azure RBAC actions tidal needs: one per ARM call it makes, plus the linked checks ARM adds to writes.

``deploy/azure/role-definition.json`` (node resource group) and ``role-definition-skus.json``
(subscription) grant exactly ``ACTIONS`` and ``LINKED_ACTIONS``; a test compares them with the calls a full
scenario makes against the fake ARM.
"""

from __future__ import annotations

__all__ = ["ACTIONS", "LINKED_ACTIONS", "SUBSCRIPTION_ACTIONS"]

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
}

# Resource SKUs are listed at subscription scope; everything else stays inside the node resource group.
SUBSCRIPTION_ACTIONS = frozenset({"Microsoft.Compute/skus/read"})

# Checks ARM makes on other resources when a scale set or VM is written: a node pool's VMs join the
# cluster's subnet and carry the kubelet's user-assigned identity, so growing the pool or creating a VM
# like its siblings needs the right to use both.
LINKED_ACTIONS: dict[str, str] = {
    "Microsoft.Network/virtualNetworks/subnets/join/action": "VMs join the node pool's subnet",
    "Microsoft.ManagedIdentity/userAssignedIdentities/assign/action": "VMs carry the kubelet identity",
    "Microsoft.Network/networkInterfaces/write": "a Flexible VM's NIC is created with it",
}
