"""The resources of the fake ARM (scale sets, VMs, operations, faults) and ARM's rules for them."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

_BASE36 = "0123456789abcdefghijklmnopqrstuvwxyz"
FORBIDDEN_TAG_CHARS = set("<>%&\\?/")
MAX_TAGS = 50


class ArmError(Exception):
    """An error response: HTTP status, ARM error code and message (and Retry-After for 429)."""

    def __init__(self, status: int, code: str, message: str, retry_after: int | None = None) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status, self.code, self.message, self.retry_after = status, code, message, retry_after


def computer_name_suffix(instance_id: int) -> str:
    """The six base-36 digits AKS node names end with (``aks-pool-12345678-vmss00000a``)."""
    digits = ""
    n = instance_id
    while True:
        n, r = divmod(n, 36)
        digits = _BASE36[r] + digits
        if n == 0:
            break
    return digits.rjust(6, "0")


@dataclass
class FakeVM:
    name: str
    scale_set: str
    size: str
    zone: str
    priority: str
    computer_name: str
    instance_id: str = ""  # Uniform only
    tags: dict[str, str] = field(default_factory=dict)
    provisioning: str = "Creating"
    power: str = "starting"
    vm_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    created: float = field(default_factory=time.time)
    body: dict[str, Any] = field(default_factory=dict)  # what a Flexible VM PUT sent


@dataclass
class FakeScaleSet:
    name: str
    size: str
    orchestration: str = "Uniform"
    zones: tuple[str, ...] = ()
    priority: str = "Regular"
    capacity: int = 0
    tags: dict[str, str] = field(default_factory=dict)
    profile: dict[str, Any] = field(default_factory=dict)
    provisioning: str = "Succeeded"
    identity: dict[str, Any] = field(default_factory=dict)
    etag_counter: int = 1
    next_instance_id: int = 0
    vms: dict[str, FakeVM] = field(default_factory=dict)  # Uniform: by instance id

    @property
    def etag(self) -> str:
        return f'"{self.etag_counter}"'


@dataclass
class Operation:
    id: str
    style: str  # "async" (Azure-AsyncOperation) or "location"
    polls_left: int
    on_success: Callable[[], None]
    on_failure: Callable[[], None]
    error: tuple[str, str] | None = None
    status: str = "InProgress"
    held: bool = False
    result: Callable[[], Any] | None = None  # the resource a finished Location-style poll returns


@dataclass
class AllocationFault:
    size: str | None
    zone: str | None
    priority: str | None
    code: str
    remaining: int | None  # None = until cleared


AKS_IMAGE_SUBSCRIPTION = "109a5e88-712a-48ae-9078-9ca8b3c81345"  # where AKS publishes node images
CLUSTER_ID = "12345678"  # the number AKS puts in the names of a cluster's node resources


def node_resource_ids(subscription: str, resource_group: str) -> dict[str, str]:
    """The resources AKS creates in the node resource group and links every node pool's VMs to."""
    net = f"/subscriptions/{subscription}/resourceGroups/{resource_group}/providers/Microsoft.Network"
    identity = (
        f"/subscriptions/{subscription}/resourceGroups/{resource_group}"
        "/providers/Microsoft.ManagedIdentity/userAssignedIdentities"
    )
    return {
        "subnet": f"{net}/virtualNetworks/aks-vnet-{CLUSTER_ID}/subnets/aks-subnet",
        "nsg": f"{net}/networkSecurityGroups/aks-agentpool-{CLUSTER_ID}-nsg",
        "inbound_pool": f"{net}/loadBalancers/kubernetes/backendAddressPools/kubernetes",
        "outbound_pool": f"{net}/loadBalancers/kubernetes/backendAddressPools/aksOutboundBackendPool",
        "asg": f"{net}/applicationSecurityGroups/gpu-nodes-asg",
        "kubelet_identity": f"{identity}/tidal-agentpool",
    }


def default_profile(
    priority: str = "Regular",
    *,
    subscription: str = "00000000-0000-4000-8000-000000000001",
    resource_group: str = "MC_tidal-rg_tidal_eastus",
    application_security_groups: bool = False,
) -> dict[str, Any]:
    """A node pool's VM profile as ARM returns it for an AKS scale set (minus the write-only parts it
    never returns: customData, secrets): AKS's gallery image, and a NIC configuration in the cluster's
    subnet, behind the node NSG, in the cluster load balancer's backend pools."""
    ids = node_resource_ids(subscription, resource_group)
    ip_configuration: dict[str, Any] = {
        "name": "ipconfig1",
        "properties": {
            "primary": True,
            "privateIPAddressVersion": "IPv4",
            "subnet": {"id": ids["subnet"]},
            "loadBalancerBackendAddressPools": [{"id": ids["inbound_pool"]}, {"id": ids["outbound_pool"]}],
        },
    }
    if application_security_groups:  # a node pool created with --asg-ids
        ip_configuration["properties"]["applicationSecurityGroups"] = [{"id": ids["asg"]}]
    image = (
        f"/subscriptions/{AKS_IMAGE_SUBSCRIPTION}/resourceGroups/AKS-Ubuntu/providers/Microsoft.Compute"
        "/galleries/AKSUbuntu/images/2204gen2containerd/versions/202501.12.0"
    )
    profile: dict[str, Any] = {
        "storageProfile": {
            "imageReference": {"id": image},
            "osDisk": {"createOption": "FromImage", "caching": "ReadOnly", "diskSizeGB": 128},
        },
        "osProfile": {"computerNamePrefix": "", "adminUsername": "azureuser", "linuxConfiguration": {}},
        "networkProfile": {
            "networkInterfaceConfigurations": [
                {
                    "name": f"aks-nodepool-{CLUSTER_ID}-vmss",
                    "properties": {
                        "primary": True,
                        "enableAcceleratedNetworking": True,
                        "enableIPForwarding": True,
                        "networkSecurityGroup": {"id": ids["nsg"]},
                        "ipConfigurations": [ip_configuration],
                    },
                }
            ]
        },
    }
    if priority == "Spot":
        profile.update(priority="Spot", evictionPolicy="Delete", billingProfile={"maxPrice": -1})
    return profile


def kubelet_identity(subscription: str, resource_group: str) -> dict[str, Any]:
    """The scale set's identity block: AKS's kubelet identity, user-assigned."""
    principal = {"principalId": str(uuid.uuid4()), "clientId": str(uuid.uuid4())}
    return {
        "type": "UserAssigned",
        "userAssignedIdentities": {
            node_resource_ids(subscription, resource_group)["kubelet_identity"]: principal
        },
    }


def check_tags(tags: dict[str, str]) -> None:
    """ARM's tag rules: at most 50; names without ``<>%&\\?/``, at most 512 long; values at most 256."""
    if len(tags) > MAX_TAGS:
        raise ArmError(400, "InvalidTagCount", f"{len(tags)} tags; at most {MAX_TAGS} are allowed")
    for key, value in tags.items():
        if FORBIDDEN_TAG_CHARS & set(key):
            raise ArmError(400, "InvalidTagNameCharacters", f"The tag name {key!r} has invalid characters")
        if len(key) > 512 or len(str(value)) > 256:
            raise ArmError(400, "InvalidTag", f"tag {key!r} is too long")


def allocation_message(code: str, size: str) -> str:
    """The message Azure gives with an allocation failure code."""
    if code == "OverconstrainedAllocationRequest":
        return (
            "Allocation failed. VM(s) with the following constraints cannot be allocated, because the "
            "condition is too restrictive."
        )
    where = "this zone" if code == "ZonalAllocationFailed" else "this region"
    return (
        f"Allocation failed. We do not have sufficient capacity for the requested VM size {size} in {where}."
    )


def parse_filter_value(text: str, name: str) -> str | None:
    """The quoted value of ``name eq '…'`` in an OData $filter, if present."""
    match = re.search(rf"'?{re.escape(name)}'?\s+eq\s+'([^']*)'", text or "", flags=re.IGNORECASE)
    return match.group(1) if match else None
