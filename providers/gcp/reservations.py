"""Compute Engine reservations tidal launches into, as reserved offerings, and the affinity that consumes one.

``gcp.reservations`` names them (reservations of this project in the configured zones; a name must be unique
across those zones). ``reservations.list`` is read per zone; a name listed in none is one warning line. A
reservation becomes one offering: its machine type (with its attached GPUs) in its zone, capacity type
``reserved``, price 0, with ``count - inUseCount`` free. A reservation that only VMs naming it may consume
(``specificReservationRequired``) is targeted: tidal uses it for pods that name it. One that Compute Engine
deletes at a fixed time (``deleteAtTime``, as the reservations of a calendar-mode future reservation, whose
VMs go with it) is treated as a Capacity Block ending then.

A VM goes into its reservation with ``reservationAffinity`` SPECIFIC_RESERVATION naming it. Other launches
never carry a SPECIFIC affinity copied from the node pool template: on-demand VMs may consume matching
automatic reservations (ANY_RESERVATION, GCE's default) and Spot VMs none.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from google.cloud import compute_v1

from autoscaler.core.model import RESERVED, SPOT
from autoscaler.core.offering import Offering, Reservation, ReservationKind
from providers.gcp.clients import ClientFactory
from providers.gcp.errors import CALL_ERRORS, api_error
from providers.gcp.gpus import ATTACHABLE, attached_name

__all__ = [
    "AFFINITY_KEY",
    "GceReservation",
    "affinity",
    "fetch_reservations",
    "reservation_of",
    "reserved_offering",
    "selected",
]

AFFINITY_KEY = "compute.googleapis.com/reservation-name"
SPECIFIC = "SPECIFIC_RESERVATION"


@dataclass(frozen=True, slots=True)
class GceReservation:
    """One reservation as ``reservations.list`` gives it (the fields tidal reads)."""

    name: str
    zone: str
    instance_type: str  # the machine type, or ``<machine>+<count>x<accelerator>`` with attached GPUs
    count: int
    in_use: int
    specific_required: bool
    status: str
    end: float | None = None

    @property
    def kind(self) -> ReservationKind:
        if self.end is not None:
            return ReservationKind.CAPACITY_BLOCK
        return ReservationKind.TARGETED if self.specific_required else ReservationKind.OPEN


def _last(url: str) -> str:
    return url.rsplit("/", 1)[-1]


def _time(stamp: str) -> float | None:
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() if stamp else None
    except ValueError:
        return None


def _from_gce(r: compute_v1.Reservation) -> GceReservation | None:
    if "specific_reservation" not in r:
        return None  # an aggregate (TPU) reservation: nothing a GKE node pool template launches
    sku = r.specific_reservation
    props = sku.instance_properties
    instance_type = props.machine_type
    for acc in props.guest_accelerators:
        accel = _last(acc.accelerator_type)
        if accel in ATTACHABLE:
            instance_type = attached_name(props.machine_type, accel, acc.accelerator_count)
    return GceReservation(
        name=r.name,
        zone=_last(r.zone),
        instance_type=instance_type,
        count=int(sku.count or 0),
        in_use=int(sku.in_use_count or 0),
        specific_required=bool(r.specific_reservation_required),
        status=r.status,
        end=_time(r.delete_at_time) if "delete_at_time" in r else None,
    )


def fetch_reservations(factory: ClientFactory, project: str, zones: Sequence[str]) -> list[GceReservation]:
    """Every reservation of ``project`` in ``zones``."""
    client = factory.compute_client(compute_v1.ReservationsClient)
    out = []
    for zone in zones:
        try:
            listed = client.list(
                request=compute_v1.ListReservationsRequest(project=project, zone=zone),
                retry=factory.retry(),
                timeout=factory.timeout,
            )
            out += [found for r in listed if (found := _from_gce(r)) is not None]
        except CALL_ERRORS as err:
            raise api_error(err, f"listing reservations in {zone}") from None
    return sorted(out, key=lambda r: (r.zone, r.name))


def selected(found: Iterable[GceReservation], names: Sequence[str]) -> tuple[list[GceReservation], list[str]]:
    """The named reservations that are ready, and the names listed in no configured zone."""
    wanted = set(names)
    chosen = [r for r in found if r.name in wanted]
    missing = sorted(wanted - {r.name for r in chosen})
    return [r for r in chosen if r.status == "READY"], missing


def reserved_offering(r: GceReservation, base: Offering) -> Offering:
    """``base`` (the reservation's machine in its zone, priced on demand) as the reservation's offering."""
    reservation = Reservation(
        id=r.name,
        kind=r.kind,
        available=max(0, r.count - r.in_use),
        total=r.count,
        end=r.end,
        name=r.name,
        on_demand_price=base.price,
    )
    return replace(
        base, capacity_type=RESERVED, price=0.0, price_source="compute reservation", reservation=reservation
    )


def affinity(
    offering: Offering, template: compute_v1.ReservationAffinity | None
) -> compute_v1.ReservationAffinity:
    """The reservation affinity of a VM of ``offering``: its reservation by name; else the template's, unless
    that names a reservation (tidal chooses reserved capacity itself)."""
    r = offering.reservation
    if r is not None:
        return compute_v1.ReservationAffinity(
            consume_reservation_type=SPECIFIC, key=AFFINITY_KEY, values=[r.name or r.id]
        )
    if offering.capacity_type == SPOT:
        return compute_v1.ReservationAffinity(consume_reservation_type="NO_RESERVATION")
    if (
        template is not None
        and template.consume_reservation_type
        and template.consume_reservation_type != SPECIFIC
    ):
        return template
    return compute_v1.ReservationAffinity(consume_reservation_type="ANY_RESERVATION")


def reservation_of(vm: compute_v1.Instance) -> str:
    """The reservation a VM was launched into by name ("" when none)."""
    found = vm.reservation_affinity if "reservation_affinity" in vm else None
    if found is None or found.consume_reservation_type != SPECIFIC or not found.values:
        return ""
    return _last(found.values[0])


def by_key(offerings: Iterable[Offering]) -> Mapping[tuple[str, str], Offering]:
    """On-demand offerings by (instance type, zone): what a reservation's offering is made from."""
    return {(o.instance_type, o.zone): o for o in offerings if o.capacity_type == "on-demand"}
