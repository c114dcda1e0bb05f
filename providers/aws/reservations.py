"""EC2 capacity reservations and Capacity Blocks for ML: which ones tidal launches into, as reserved offerings,
and how a node is launched into one.

``aws.capacityReservationIds`` and ``aws.capacityReservationSelector`` (tags, ``'*'`` for any value) choose
the reservations; one DescribeCapacityReservations call lists the account's active and scheduled ones and
the choice is made here, so a listed id that does not exist (or has expired) is one warning line naming it,
not a failed call. A reservation becomes one offering: its instance type in its zone, capacity type
``reserved``, price 0, with the free count EC2 gives (``AvailableInstanceCount``), whether it is open,
targeted or a Capacity Block, and for a block its start and end.

A node goes into a reservation with RunInstances (one instance, with the launch template tidal uses for any
launch), targeting the reservation by id; a Capacity Block also needs the capacity-block market type. EC2
Fleet overrides cannot name a reservation, and a launch template per reservation would not work with a
launch template the user manages.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from autoscaler.cloud import Attempt, Refusal
from autoscaler.core.model import RESERVED
from autoscaler.core.offering import Offering, Reservation, ReservationKind
from providers.aws.errors import refusal
from providers.aws.launch_template import TemplateRef
from providers.aws.settings import AwsSettings

__all__ = [
    "LISTED_STATES",
    "CapacityReservation",
    "fetch_reservations",
    "reservation_refusal",
    "reserved_offering",
    "run_request",
    "selected",
]

# active: launchable now; scheduled: a Capacity Block (or a future-dated reservation) not started yet, listed so
# that pods waiting for it say when it starts.
LISTED_STATES = ("active", "scheduled")
# The reservation has no room for another instance now: like a stockout, for this reservation only.
FULL_CODES = frozenset({"ReservationCapacityExceeded", "InsufficientCapacityReservationCapacity"})
# The reservation cannot be launched into as asked (gone, not active, another platform or zone).
INVALID_CODES = frozenset(
    {
        "InvalidCapacityReservationId.NotFound",
        "InvalidCapacityReservationId.Malformed",
        "InvalidCapacityReservationState",
        "InvalidCapacityReservationId",
        "CapacityReservationNotActive",
    }
)


@dataclass(frozen=True, slots=True)
class CapacityReservation:
    """One reservation as DescribeCapacityReservations lists it (the fields tidal reads)."""

    id: str
    instance_type: str
    zone: str
    total: int
    available: int
    state: str
    match: str  # open | targeted
    reservation_type: str  # default | capacity-block
    platform: str
    tenancy: str
    start: float | None = None
    end: float | None = None
    tags: Mapping[str, str] = field(default_factory=dict)

    @property
    def kind(self) -> ReservationKind:
        if self.reservation_type == "capacity-block":
            return ReservationKind.CAPACITY_BLOCK
        return ReservationKind.TARGETED if self.match == "targeted" else ReservationKind.OPEN

    @property
    def usable(self) -> str:
        """Why EKS nodes cannot run in it ("" when they can)."""
        if self.platform != "Linux/UNIX":
            return f"platform {self.platform}"
        if self.tenancy != "default":
            return f"tenancy {self.tenancy}"
        return ""


def _seconds(value: Any) -> float | None:
    return value.timestamp() if isinstance(value, datetime) else None


def fetch_reservations(ec2: Any) -> list[CapacityReservation]:
    """Every active or scheduled capacity reservation of the account in the client's region."""
    out = []
    paginator = ec2.get_paginator("describe_capacity_reservations")
    for page in paginator.paginate(Filters=[{"Name": "state", "Values": list(LISTED_STATES)}]):
        for r in page.get("CapacityReservations") or []:
            out.append(
                CapacityReservation(
                    id=str(r["CapacityReservationId"]),
                    instance_type=str(r.get("InstanceType") or ""),
                    zone=str(r.get("AvailabilityZone") or ""),
                    total=int(r.get("TotalInstanceCount") or 0),
                    available=int(r.get("AvailableInstanceCount") or 0),
                    state=str(r.get("State") or ""),
                    match=str(r.get("InstanceMatchCriteria") or "open"),
                    reservation_type=str(r.get("ReservationType") or "default"),
                    platform=str(r.get("InstancePlatform") or ""),
                    tenancy=str(r.get("Tenancy") or "default"),
                    start=_seconds(r.get("StartDate")),
                    end=_seconds(r.get("EndDate")) if r.get("EndDateType", "limited") == "limited" else None,
                    tags={str(t["Key"]): str(t.get("Value", "")) for t in r.get("Tags") or []},
                )
            )
    return sorted(out, key=lambda r: r.id)


def _matches(tags: Mapping[str, str], selector: Mapping[str, str]) -> bool:
    return bool(selector) and all(k in tags and (v == "*" or tags[k] == v) for k, v in selector.items())


def selected(
    found: Iterable[CapacityReservation], settings: AwsSettings
) -> tuple[list[CapacityReservation], list[str]]:
    """The reservations the ``aws:`` section chooses, and the listed ids EC2 did not list (not found, expired,
    cancelled, or in another region)."""
    ids = set(settings.capacity_reservation_ids)
    chosen = [r for r in found if r.id in ids or _matches(r.tags, settings.capacity_reservation_selector)]
    missing = sorted(ids - {r.id for r in chosen})
    return chosen, missing


def reserved_offering(r: CapacityReservation, base: Offering) -> Offering:
    """``base`` (the reservation's instance type in its zone, priced on demand) as the reservation's offering:
    free to use, since it is paid for whether used or not."""
    reservation = Reservation(
        id=r.id,
        kind=r.kind,
        available=r.available,
        total=r.total,
        start=r.start if r.state == "scheduled" or r.kind == ReservationKind.CAPACITY_BLOCK else None,
        end=r.end,
        on_demand_price=base.price,
    )
    return replace(
        base, capacity_type=RESERVED, price=0.0, price_source="capacity reservation", reservation=reservation
    )


def run_request(
    offering: Offering, template: TemplateRef, subnet: str, client_token: str, tags: Mapping[str, str]
) -> dict[str, Any]:
    """The RunInstances parameters that launch one node of ``offering`` into its reservation."""
    r = offering.reservation
    assert r is not None, "only reserved offerings are launched into a reservation"
    tag_list = [{"Key": k, "Value": v} for k, v in sorted(tags.items())]
    request: dict[str, Any] = {
        "LaunchTemplate": template.specification(),
        "InstanceType": offering.instance_type,
        "SubnetId": subnet,
        "MinCount": 1,
        "MaxCount": 1,
        "ClientToken": client_token,
        "CapacityReservationSpecification": {"CapacityReservationTarget": {"CapacityReservationId": r.id}},
        # The IAM policy conditions instances and volumes on tidal's cluster tag: tag them in the request.
        "TagSpecifications": [{"ResourceType": t, "Tags": tag_list} for t in ("instance", "volume")],
    }
    if r.block:
        request["InstanceMarketOptions"] = {"MarketType": "capacity-block"}
    return request


def reservation_refusal(code: str, detail: str, offering: Offering) -> Attempt:
    """The contract's refusal for an error of a launch into ``offering``'s reservation."""
    if code in FULL_CODES:
        return Attempt(offering, Refusal.NO_CAPACITY, detail)
    if code in INVALID_CODES:
        return Attempt(offering, Refusal.INVALID, detail)
    return refusal(code, detail, offering)


def by_zone(offerings: Sequence[Offering]) -> dict[str, list[Offering]]:
    out: dict[str, list[Offering]] = {}
    for o in offerings:
        out.setdefault(o.zone, []).append(o)
    return out
