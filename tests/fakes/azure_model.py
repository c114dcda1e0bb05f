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


def default_profile(priority: str = "Regular") -> dict[str, Any]:
    """A node pool's VM profile, minus the write-only parts ARM never returns (customData, secrets)."""
    profile: dict[str, Any] = {
        "storageProfile": {
            "imageReference": {"id": "/subscriptions/x/resourceGroups/AKS-Ubuntu/providers/images/2204gen2"},
            "osDisk": {"createOption": "FromImage", "caching": "ReadOnly", "diskSizeGB": 128},
        },
        "osProfile": {"computerNamePrefix": "", "adminUsername": "azureuser", "linuxConfiguration": {}},
        "networkProfile": {
            "networkInterfaceConfigurations": [
                {"name": "nic", "properties": {"primary": True, "ipConfigurations": [{"name": "ip"}]}}
            ]
        },
    }
    if priority == "Spot":
        profile.update(priority="Spot", evictionPolicy="Delete", billingProfile={"maxPrice": -1})
    return profile


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
