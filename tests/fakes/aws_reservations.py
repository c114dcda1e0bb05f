"""EC2 capacity reservations and Capacity Blocks, which moto does not implement, at the wire.

DescribeCapacityReservations is answered with the XML the EC2 API reference documents (parsed by botocore's
own parser); a RunInstances that targets a reservation is refused as EC2 refuses it (no such reservation, not
active yet, no free instance) or sent on to moto, which launches the instance, and then counted in the
reservation; DescribeInstances then shows each such instance's ``CapacityReservationId``, as EC2 does, and a
terminated instance gives its place back. Hooks only: the SDK runs unmodified.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs
from xml.sax.saxutils import escape

from botocore.awsrequest import AWSResponse

from tests.fakes.aws_cloud import REGION, _Body, ec2_error

OWNER = "123456789012"
TARGET = "CapacityReservationSpecification.CapacityReservationTarget.CapacityReservationId"


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


@dataclass
class Record:
    id: str
    instance_type: str
    zone: str
    total: int
    match: str = "open"  # open | targeted
    reservation_type: str = "default"  # default | capacity-block
    state: str = "active"
    start: float | None = None
    end: float | None = None
    platform: str = "Linux/UNIX"
    tags: Mapping[str, str] = field(default_factory=dict)
    instances: set[str] = field(default_factory=set)

    @property
    def available(self) -> int:
        return max(0, self.total - len(self.instances)) if self.state == "active" else 0

    def xml(self) -> str:
        tags = "".join(
            f"<item><key>{escape(k)}</key><value>{escape(v)}</value></item>" for k, v in self.tags.items()
        )
        dates = f"<startDate>{iso(self.start)}</startDate>" if self.start is not None else ""
        if self.end is not None:
            dates += f"<endDate>{iso(self.end)}</endDate><endDateType>limited</endDateType>"
        else:
            dates += "<endDateType>unlimited</endDateType>"
        return (
            "<item>"
            f"<capacityReservationId>{self.id}</capacityReservationId>"
            f"<ownerId>{OWNER}</ownerId>"
            f"<capacityReservationArn>arn:aws:ec2:{REGION}:{OWNER}:capacity-reservation/{self.id}"
            "</capacityReservationArn>"
            f"<availabilityZoneId>use1-az{ord(self.zone[-1]) - ord('a') + 1}</availabilityZoneId>"
            f"<instanceType>{self.instance_type}</instanceType>"
            f"<instancePlatform>{escape(self.platform)}</instancePlatform>"
            f"<availabilityZone>{self.zone}</availabilityZone>"
            "<tenancy>default</tenancy>"
            f"<totalInstanceCount>{self.total}</totalInstanceCount>"
            f"<availableInstanceCount>{self.available}</availableInstanceCount>"
            "<ebsOptimized>true</ebsOptimized>"
            "<ephemeralStorage>false</ephemeralStorage>"
            f"<state>{self.state}</state>"
            f"{dates}"
            f"<instanceMatchCriteria>{self.match}</instanceMatchCriteria>"
            "<createDate>2026-11-01T00:00:00.000Z</createDate>"
            f"<tagSet>{tags}</tagSet>"
            f"<reservationType>{self.reservation_type}</reservationType>"
            "</item>"
        )


def _params(request: Any) -> dict[str, list[str]]:
    body = request.body
    return parse_qs(body.decode() if isinstance(body, bytes) else str(body or ""))


class CapacityReservations:
    """The account's capacity reservations, and the hooks that make EC2 (moto) honour them."""

    def __init__(self) -> None:
        self.records: dict[str, Record] = {}
        self.describe_calls: list[dict[str, list[str]]] = []
        self.launches: list[dict[str, list[str]]] = []  # RunInstances requests that targeted a reservation

    def add(self, rid: str, instance_type: str, zone: str, total: int, **kw: Any) -> Record:
        record = self.records[rid] = Record(rid, instance_type, zone, total, **kw)
        return record

    def remove(self, rid: str) -> None:
        """The reservation is cancelled (or expired): EC2 no longer lists it as active."""
        self.records.pop(rid, None)

    # -- hooks ------------------------------------------------------------------------------------------

    @property
    def hooks(self) -> tuple[tuple[str, Callable[..., Any]], ...]:
        return (
            ("before-send.ec2.DescribeCapacityReservations", self._describe),
            ("before-call.ec2.RunInstances", self._remember_target),
            ("before-send.ec2.RunInstances", self._check_launch),
            ("after-call.ec2.RunInstances", self._count_launch),
            ("after-call.ec2.DescribeInstances", self._show_reservations),
            ("after-call.ec2.TerminateInstances", self._release),
        )

    def _describe(self, request: Any, **_: Any) -> AWSResponse:
        params = _params(request)
        self.describe_calls.append(params)
        states: set[str] | None = None
        for key, value in params.items():
            if key.startswith("Filter.") and key.endswith(".Name") and value == ["state"]:
                prefix = key[: -len("Name")]
                states = {v for k, vs in params.items() if k.startswith(f"{prefix}Value.") for v in vs}
        ids = {v for k, vs in params.items() if k.startswith("CapacityReservationId.") for v in vs}
        items = "".join(
            r.xml()
            for r in sorted(self.records.values(), key=lambda r: r.id)
            if (states is None or r.state in states) and (not ids or r.id in ids)
        )
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>'
            '<DescribeCapacityReservationsResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">'
            "<requestId>7f2e1a3b-reservations</requestId>"
            f"<capacityReservationSet>{items}</capacityReservationSet>"
            "</DescribeCapacityReservationsResponse>"
        ).encode()
        return AWSResponse("https://ec2.fixture", 200, {"Content-Type": "text/xml"}, _Body(body))

    def _remember_target(self, params: Mapping[str, Any], context: dict[str, Any], **_: Any) -> None:
        body = params.get("body") or {}
        context["reservation"] = body.get(TARGET) if isinstance(body, Mapping) else None

    def _check_launch(self, request: Any, **_: Any) -> AWSResponse | None:
        params = _params(request)
        target = params.get(TARGET, [""])[0]
        if not target:
            return None
        self.launches.append(params)
        record = self.records.get(target)
        if record is None:
            return ec2_error(
                "InvalidCapacityReservationId.NotFound",
                f"The capacity reservation ID '{target}' does not exist",
                400,
            )
        if record.state != "active":
            return ec2_error(
                "InvalidCapacityReservationState",
                f"The Capacity Reservation {target} is not active (state {record.state})",
                400,
            )
        wrong = params.get("InstanceType", [""])[0] != record.instance_type
        if wrong or (record.reservation_type == "capacity-block") != (
            params.get("InstanceMarketOptions.MarketType", [""])[0] == "capacity-block"
        ):
            return ec2_error(
                "InvalidParameterCombination",
                "The instance type or market type does not match the Capacity Reservation",
                400,
            )
        if record.available < 1:
            return ec2_error(
                "ReservationCapacityExceeded",
                "The requested reservation does not have sufficient compatible and available capacity "
                "for this request.",
                400,
            )
        return None

    def _count_launch(self, parsed: Mapping[str, Any], context: Mapping[str, Any], **_: Any) -> None:
        record = self.records.get(context.get("reservation") or "")
        if record is not None:
            record.instances.update(str(i["InstanceId"]) for i in parsed.get("Instances") or [])

    def _show_reservations(self, parsed: dict[str, Any], **_: Any) -> None:
        where = {i: r.id for r in self.records.values() for i in r.instances}
        for reservation in parsed.get("Reservations") or []:
            for instance in reservation.get("Instances") or []:
                rid = where.get(instance.get("InstanceId"))
                if rid is not None:
                    instance["CapacityReservationId"] = rid

    def _release(self, parsed: Mapping[str, Any], **_: Any) -> None:
        for change in parsed.get("TerminatingInstances") or []:
            for r in self.records.values():
                r.instances.discard(str(change.get("InstanceId")))
