"""Capacity reservation groups in the fake ARM: their reservations, and the VMs associated with them.

A VM created with ``capacityReservation.capacityReservationGroup`` takes a place in the group's reservation
of its size and zone while one is free (it is then listed in that reservation's
``utilizationInfo.virtualMachinesAllocated``); past that, Azure still creates it, over-allocated, with no
capacity guarantee. The group's GET with ``$expand=instanceView`` and the reservations list have the shapes
azure-mgmt-compute's models read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tests.fakes.azure_model import ArmError


@dataclass
class FakeCapacityReservation:
    name: str
    size: str
    zone: str
    capacity: int
    start: str | None = None  # a block's schedule, as ARM writes times
    end: str | None = None
    allocated: list[str] = field(default_factory=list)  # VM ids


@dataclass
class FakeGroup:
    name: str
    reservation_type: str = "Targeted"
    zones: tuple[str, ...] = ()
    reservations: dict[str, FakeCapacityReservation] = field(default_factory=dict)

    def allocate(self, vm_id: str, size: str, zone: str) -> bool:
        """Place a VM of ``size`` in ``zone``: True when a reservation of the group had room for it."""
        for r in self.reservations.values():
            if r.size == size and (not r.zone or r.zone == zone) and len(r.allocated) < r.capacity:
                r.allocated.append(vm_id)
                return True
        return False

    def release(self, vm_id: str) -> None:
        for r in self.reservations.values():
            if vm_id in r.allocated:
                r.allocated.remove(vm_id)


def group_name(props: dict[str, Any]) -> str:
    """The group a VM body associates with ("" when none)."""
    found = ((props.get("capacityReservation") or {}).get("capacityReservationGroup") or {}).get("id")
    return str(found).rstrip("/").rsplit("/", 1)[-1] if found else ""


def check_group(groups: dict[str, FakeGroup], name: str) -> FakeGroup:
    group = groups.get(name)
    if group is None:
        raise ArmError(
            404,
            "ResourceNotFound",
            f"The Resource 'Microsoft.Compute/capacityReservationGroups/{name}' was not found.",
        )
    return group


def group_json(
    group: FakeGroup, rg_path: str, location: str, vm_path: str, *, expand: bool
) -> dict[str, Any]:
    base = f"{rg_path}/capacityReservationGroups/{group.name}"
    props: dict[str, Any] = {
        "capacityReservations": [{"id": f"{base}/capacityReservations/{n}"} for n in group.reservations],
        "virtualMachinesAssociated": [
            {"id": f"{vm_path}/{vm}"} for r in group.reservations.values() for vm in r.allocated
        ],
    }
    if group.reservation_type != "Targeted":
        props["reservationType"] = group.reservation_type
    if expand:
        props["instanceView"] = {
            "capacityReservations": [
                {
                    "name": r.name,
                    "utilizationInfo": {
                        "currentCapacity": r.capacity,
                        "virtualMachinesAllocated": [{"id": f"{vm_path}/{vm}"} for vm in r.allocated],
                    },
                    "statuses": [{"code": "ProvisioningState/succeeded", "level": "Info"}],
                }
                for r in group.reservations.values()
            ]
        }
    body: dict[str, Any] = {
        "id": base,
        "name": group.name,
        "type": "Microsoft.Compute/capacityReservationGroups",
        "location": location,
        "properties": props,
    }
    if group.zones:
        body["zones"] = list(group.zones)
    return body


def reservation_json(
    group: FakeGroup, r: FakeCapacityReservation, rg_path: str, location: str
) -> dict[str, Any]:
    props: dict[str, Any] = {
        "reservationId": f"{group.name}-{r.name}-0000",
        "platformFaultDomainCount": 1,
        "provisioningState": "Succeeded",
        "timeCreated": "2026-11-01T08:00:00.0000000+00:00",
    }
    if r.start or r.end:
        props["scheduleProfile"] = {k: v for k, v in (("start", r.start), ("end", r.end)) if v}
    body: dict[str, Any] = {
        "id": f"{rg_path}/capacityReservationGroups/{group.name}/capacityReservations/{r.name}",
        "name": r.name,
        "type": "Microsoft.Compute/capacityReservationGroups/capacityReservations",
        "location": location,
        "sku": {"name": r.size, "capacity": r.capacity},
        "properties": props,
    }
    if r.zone:
        body["zones"] = [r.zone]
    return body
