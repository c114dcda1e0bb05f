"""Azure capacity reservation groups tidal launches into, as reserved offerings.

``azure.capacityReservationGroups`` names groups of the node resource group. Each capacity reservation in a
group (one VM size, in one zone or none) becomes one offering: capacity type ``reserved``, price 0, with its
capacity less the VMs allocated in it (the group's instance view). A VM consumes a group only when it is
associated with it, which tidal does for the VMs it puts into a reservation, so every listed group is open
to any pod that may use reserved capacity; a group of reservation type ``Block`` is a Capacity Block, its
window each reservation's schedule. Nodes go into a group as VMs of a Flexible scale set that launches their
size, associated with the group (``capacityReservation.capacityReservationGroup``); a Uniform node pool is
associated as a whole, when its node pool is created, and is not something tidal changes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import structlog
from azure.core.exceptions import AzureError

from autoscaler.cloud import ProviderError
from autoscaler.core.model import ON_DEMAND, RESERVED
from autoscaler.core.offering import Offering, Reservation, ReservationKind
from providers.azure.arm import ArmCompute
from providers.azure.errors import classify
from providers.azure.targets import LaunchTarget, zone_label

__all__ = [
    "AzureReservation",
    "ReservationGroups",
    "association",
    "group_of",
    "read_groups",
    "reserved_offerings",
]

_log = structlog.get_logger("tidal.providers.azure")


@dataclass(frozen=True, slots=True)
class AzureReservation:
    """One capacity reservation of a listed group, with what its instance view says is allocated."""

    group: str
    name: str
    size: str
    zone: str  # ARM zone number, "" when not zonal
    capacity: int
    allocated: int
    block: bool = False
    start: float | None = None
    end: float | None = None
    state: str = "Succeeded"


def _time(text: Any) -> float | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _last(rid: str) -> str:
    return rid.rstrip("/").rsplit("/", 1)[-1]


def read_groups(arm: ArmCompute, names: Sequence[str]) -> tuple[list[AzureReservation], list[str]]:
    """The reservations of the listed groups, and the groups ARM does not have."""
    out: list[AzureReservation] = []
    missing: list[str] = []
    for group in names:
        try:
            found = arm.capacity_reservation_group(group)
            if found is None:
                missing.append(group)
                continue
            listed = arm.capacity_reservations(group)
        except AzureError as err:
            raise classify(err, what=f"reading capacity reservation group {group}") from None
        props = found.get("properties") or {}
        allocated = {
            str(view.get("name")): len(
                (view.get("utilizationInfo") or {}).get("virtualMachinesAllocated") or []
            )
            for view in (props.get("instanceView") or {}).get("capacityReservations") or []
        }
        block = str(props.get("reservationType") or "") == "Block"
        for r in listed:
            rprops = r.get("properties") or {}
            schedule = rprops.get("scheduleProfile") or {}
            zones = r.get("zones") or []
            name = str(r.get("name") or "")
            out.append(
                AzureReservation(
                    group=group,
                    name=name,
                    size=str((r.get("sku") or {}).get("name") or ""),
                    zone=str(zones[0]) if zones else "",
                    capacity=int((r.get("sku") or {}).get("capacity") or 0),
                    allocated=allocated.get(name, 0),
                    block=block,
                    start=_time(schedule.get("start")),
                    end=_time(schedule.get("end")),
                    state=str(rprops.get("provisioningState") or "Succeeded"),
                )
            )
    return out, missing


def _target_for(r: AzureReservation, targets: Iterable[LaunchTarget]) -> LaunchTarget | None:
    """A Flexible scale set that launches the reservation's size on demand, in its zone."""
    return next(
        (
            t
            for t in targets
            if t.flexible
            and t.size == r.size
            and t.capacity_type == ON_DEMAND
            and (not r.zone or not t.zones or r.zone in t.zones)
        ),
        None,
    )


def reserved_offerings(
    found: Iterable[AzureReservation],
    targets: Sequence[LaunchTarget],
    offerings: Iterable[Offering],
    region: str,
) -> tuple[list[Offering], dict[str, LaunchTarget], list[str]]:
    """An offering per reservation a Flexible scale set can launch into (made from its on-demand offering),
    the target of each by offering key, and why the others are not offered."""
    bases: Mapping[tuple[str, str], Offering] = {
        (o.instance_type, o.zone): o for o in offerings if o.capacity_type == ON_DEMAND
    }
    out: list[Offering] = []
    by_key: dict[str, LaunchTarget] = {}
    unused: list[str] = []
    for r in found:
        target = _target_for(r, targets)
        base = bases.get((r.size, zone_label(region, r.zone))) if target is not None else None
        if target is None or base is None or r.state != "Succeeded":
            why = (
                "not provisioned"
                if r.state != "Succeeded"
                else "no Flexible scale set launches its size there"
            )
            unused.append(f"{r.group}/{r.name} ({why})")
            continue
        reservation = Reservation(
            id=r.name,
            kind=ReservationKind.CAPACITY_BLOCK if r.block else ReservationKind.OPEN,
            available=max(0, r.capacity - r.allocated),
            total=r.capacity,
            start=r.start if r.block else None,
            end=r.end,
            name=r.group,
            on_demand_price=base.price,
        )
        offering = replace(
            base,
            capacity_type=RESERVED,
            price=0.0,
            price_source="capacity reservation",
            reservation=reservation,
        )
        out.append(offering)
        by_key[offering.key] = target
    return out, by_key, unused


def association(group_id: str) -> dict[str, Any]:
    """What a VM's properties carry to be placed in a capacity reservation group."""
    return {"capacityReservation": {"capacityReservationGroup": {"id": group_id}}}


def group_of(properties: Mapping[str, Any]) -> str:
    """The capacity reservation group a VM is associated with ("" when none)."""
    found = ((properties.get("capacityReservation") or {}).get("capacityReservationGroup") or {}).get("id")
    return _last(str(found)) if found else ""


class ReservationGroups:
    """The capacity reservation groups of ``azure.capacityReservationGroups``, read into reserved offerings
    each time offerings are listed; a group ARM does not have, or a reservation no scale set can use, is
    said once (again only when that changes)."""

    def __init__(self, arm: ArmCompute, groups: Sequence[str], *, region: str, resource_group: str) -> None:
        self.arm = arm
        self.groups = tuple(groups)
        self.region = region
        self.resource_group = resource_group
        self._said: tuple[list[str], list[str]] = ([], [])

    def offerings(
        self, targets: list[LaunchTarget], offerings: list[Offering]
    ) -> tuple[list[Offering], dict[str, LaunchTarget]]:
        """Offerings of the reservations a Flexible scale set launches into, and that scale set by
        reservation id; none while the groups cannot be read."""
        if not self.groups:
            return [], {}
        try:
            found, missing = read_groups(self.arm, self.groups)
        except ProviderError as err:  # plan without reservations until they can be read
            _log.warning("azure_capacity_reservations_unavailable", error=str(err))
            return [], {}
        reserved, by_key, unused = reserved_offerings(found, targets, offerings, self.region)
        if (missing, unused) != self._said:
            self._said = (missing, unused)
            if missing:
                _log.warning(
                    "azure_capacity_reservation_groups_not_found",
                    groups=missing,
                    problem=f"azure.capacityReservationGroups: {', '.join(missing)} not found in "
                    f"resource group {self.resource_group}",
                )
            if unused:
                _log.warning("azure_capacity_reservations_unused", reservations=unused)
        return reserved, by_key
