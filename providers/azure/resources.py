"""Scale sets and VMs converted from ARM's wire format at the edge, and the ids Kubernetes sees.

AKS writes ``spec.providerID`` with the node resource group in lower case: for a Uniform instance
``azure:///subscriptions/<sub>/resourceGroups/<rg>/providers/Microsoft.Compute``
``/virtualMachineScaleSets/<vmss>/virtualMachines/<n>`` (one string), for a VM of a Flexible set
``…/providers/Microsoft.Compute/virtualMachines/<name>``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from autoscaler.core.model import InstanceState

__all__ = [
    "ScaleSet",
    "VirtualMachine",
    "flexible_provider_id",
    "identity_for_write",
    "instance_state",
    "scale_set_from_wire",
    "uniform_provider_id",
    "vm_from_wire",
    "wire",
]

FLEXIBLE = "Flexible"
SPOT_PRIORITY = "Spot"


def wire(model: Any) -> dict[str, Any]:
    """An SDK model (or a plain dict) as the JSON ARM sent, so the rest of the provider reads one shape."""
    if isinstance(model, dict):
        return model
    as_dict = getattr(model, "as_dict", None)
    if isinstance(model, Mapping) and callable(as_dict):  # current models: keyed by wire names
        result: dict[str, Any] = as_dict()
        return result
    serialize = getattr(model, "serialize", None)  # older, msrest-based models
    if callable(serialize):
        serialized: dict[str, Any] = serialize(keep_readonly=True)
        return serialized
    raise TypeError(f"cannot read a {type(model).__name__} as ARM JSON")


@dataclass(frozen=True, slots=True)
class ScaleSet:
    """A virtual machine scale set, reduced to what launching into it needs."""

    name: str
    size: str
    capacity: int
    orchestration: str  # Uniform | Flexible
    priority: str  # Regular | Spot
    zones: tuple[str, ...]
    tags: Mapping[str, str]
    etag: str | None
    provisioning: str
    raw: Mapping[str, Any] = field(repr=False, default_factory=dict)

    @property
    def flexible(self) -> bool:
        """Flexible orchestration: VMs of any size are added one by one."""
        return self.orchestration == FLEXIBLE

    @property
    def spot(self) -> bool:
        """Every instance of the scale set is a Spot VM."""
        return self.priority == SPOT_PRIORITY


@dataclass(frozen=True, slots=True)
class VirtualMachine:
    """A VM: an instance of a Uniform scale set (``instance_id`` set) or a VM of a Flexible one."""

    name: str
    instance_id: str
    size: str
    zone: str  # ARM zone number, "" when not zonal
    provisioning: str
    power: str  # running, starting, deallocated, stopped, … ("" when ARM did not say)
    priority: str
    tags: Mapping[str, str]
    scale_set: str
    created: float
    reservation_group: str = ""  # the capacity reservation group it is associated with


def scale_set_from_wire(data: Mapping[str, Any]) -> ScaleSet:
    """Parse a ``virtualMachineScaleSets`` GET body."""
    props = data.get("properties") or {}
    sku = data.get("sku") or {}
    profile = props.get("virtualMachineProfile") or {}
    return ScaleSet(
        name=str(data.get("name", "")),
        size=str(sku.get("name", "")),
        capacity=int(sku.get("capacity") or 0),
        orchestration=str(props.get("orchestrationMode") or "Uniform"),
        priority=str(profile.get("priority") or "Regular"),
        zones=tuple(sorted(str(z) for z in data.get("zones") or ())),
        tags=dict(data.get("tags") or {}),
        etag=data.get("etag"),
        provisioning=str(props.get("provisioningState") or ""),
        raw=data,
    )


def identity_for_write(identity: Any) -> dict[str, Any] | None:
    """A scale set's ``identity`` as a write sends it: the type and the user-assigned identities' ids
    (ARM fills in their principal and client ids itself)."""
    if not identity:
        return None
    out: dict[str, Any] = {"type": identity.get("type")}
    if identity.get("userAssignedIdentities"):
        out["userAssignedIdentities"] = {k: {} for k in identity["userAssignedIdentities"]}
    return out


def _created(text: Any) -> float:
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def vm_from_wire(data: Mapping[str, Any], scale_set: str) -> VirtualMachine:
    """Parse a VM or scale-set VM body (with ``$expand=instanceView`` for the power state)."""
    props = data.get("properties") or {}
    power = ""
    for status in (props.get("instanceView") or {}).get("statuses") or []:
        code = str(status.get("code", ""))
        if code.startswith("PowerState/"):
            power = code.split("/", 1)[1]
    size = (props.get("hardwareProfile") or {}).get("vmSize") or (data.get("sku") or {}).get("name") or ""
    zones = data.get("zones") or []
    group = ((props.get("capacityReservation") or {}).get("capacityReservationGroup") or {}).get("id") or ""
    return VirtualMachine(
        name=str(data.get("name", "")),
        instance_id=str(data.get("instanceId") or ""),
        size=str(size),
        zone=str(zones[0]) if zones else "",
        provisioning=str(props.get("provisioningState") or ""),
        power=power,
        priority=str(props.get("priority") or "Regular"),
        tags=dict(data.get("tags") or {}),
        scale_set=scale_set,
        created=_created(props.get("timeCreated")),
        reservation_group=str(group).rstrip("/").rsplit("/", 1)[-1] if group else "",
    )


def instance_state(vm: VirtualMachine) -> InstanceState:
    """The contract's state (pending | running | stopping | terminated) of a VM as ARM reports it."""
    provisioning = vm.provisioning.lower()
    if provisioning == "failed":
        return InstanceState.TERMINATED  # the allocation failed: nothing runs, nothing is billed
    if provisioning == "deleting" or vm.power in ("stopping", "stopped"):
        return InstanceState.STOPPING
    if vm.power in ("deallocated", "deallocating"):
        return InstanceState.TERMINATED  # a Spot VM evicted with the Deallocate policy, or stopped by hand
    if provisioning in ("creating", "updating", "") and vm.power in ("", "starting"):
        return InstanceState.PENDING
    return InstanceState.RUNNING


def _base(subscription: str, resource_group: str) -> str:
    group = resource_group.lower()
    return f"azure:///subscriptions/{subscription}/resourceGroups/{group}/providers/Microsoft.Compute"


def uniform_provider_id(subscription: str, resource_group: str, scale_set: str, instance: str) -> str:
    """The Node providerID of instance ``instance`` of a Uniform scale set, as AKS writes it."""
    base = _base(subscription, resource_group)
    return f"{base}/virtualMachineScaleSets/{scale_set}/virtualMachines/{instance}"


def flexible_provider_id(subscription: str, resource_group: str, vm_name: str) -> str:
    """The Node providerID of a VM in a Flexible scale set (the plain VM form)."""
    return f"{_base(subscription, resource_group)}/virtualMachines/{vm_name}"
