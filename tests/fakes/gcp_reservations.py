"""Compute Engine reservations in the fake: ``reservations.list`` per zone, and inserts that name one.

A VM whose ``reservationAffinity`` is SPECIFIC_RESERVATION consumes the reservation it names, as GCE does:
refused inside the insert operation with CONDITION_NOT_MET when the reservation does not exist, is not
READY, holds another machine, or has no free instance ("does not have available resources for the
request"); counted in its ``inUseCount`` while it lives. (VMs with ANY_RESERVATION are not matched against
automatic reservations here: tidal's accounting only ever counts on the ones it targets.)
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from tests.fakes.gcp_rules import last

KEY = "compute.googleapis.com/reservation-name"


@dataclass
class FakeReservation:
    name: str
    zone: str
    machine_type: str
    count: int
    specific_required: bool = False
    accelerators: list[dict[str, Any]] = field(default_factory=list)
    status: str = "READY"
    delete_at: str | None = None
    vms: set[str] = field(default_factory=set)

    def resource(self, project: str, api: str, rid: str) -> dict[str, Any]:
        """The reservation as ``reservations.list`` returns it."""
        zone_url = f"{api}/projects/{project}/zones/{self.zone}"
        props: dict[str, Any] = {"machineType": self.machine_type}
        if self.accelerators:
            props["guestAccelerators"] = copy.deepcopy(self.accelerators)
        out: dict[str, Any] = {
            "kind": "compute#reservation",
            "id": rid,
            "creationTimestamp": "2026-11-01T08:00:00.000-07:00",
            "selfLink": f"{zone_url}/reservations/{self.name}",
            "zone": zone_url,
            "name": self.name,
            "specificReservation": {
                "instanceProperties": props,
                "count": str(self.count),
                "inUseCount": str(len(self.vms)),
                "assuredCount": str(self.count),
            },
            "specificReservationRequired": self.specific_required,
            "status": self.status,
        }
        if self.delete_at is not None:
            out["deleteAtTime"] = self.delete_at
        return out


def target(body: dict[str, Any]) -> str | None:
    """The reservation an insert body names (None: it names none)."""
    found = body.get("reservationAffinity") or {}
    if found.get("consumeReservationType") != "SPECIFIC_RESERVATION" or found.get("key") != KEY:
        return None
    values = found.get("values") or [""]
    return last(values[0])


def refusal(r: FakeReservation | None, name: str, body: dict[str, Any]) -> str | None:
    """Why GCE refuses to put this VM into reservation ``name`` (None: it takes it)."""
    if r is None:
        return f"Specified reservation '{name}' does not exist."
    if r.status != "READY":
        return f"Cannot use reservation '{name}', it requires reservation to be in READY state."
    if last(body.get("machineType", "")) != r.machine_type:
        return f"No available resources in specified reservations '{name}'."
    if len(r.vms) >= r.count:
        return f"Specified reservation '{name}' does not have available resources for the request."
    return None
