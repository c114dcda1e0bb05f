"""What this account can launch, and at what price: subnets, instance types, zones and prices, cached.

Shapes and zones change rarely and are kept for hours; prices are refreshed every ``priceRefreshInterval``.
When a refresh fails the last good answer is kept; when there never was one, the ``aws.catalogFallback`` file
stands in, and every offering says where its price came from.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Generic, TypeVar

import botocore.exceptions
import structlog

from autoscaler.cloud import ProviderError
from autoscaler.config.values import Config
from autoscaler.core.model import ON_DEMAND, SPOT
from autoscaler.core.offering import Offering
from autoscaler.runtime.catalog import with_templates
from providers.aws.clients import ClientFactory
from providers.aws.errors import ApiGuard, describe
from providers.aws.instance_types import InstanceSpec, fetch_instance_types, fetch_zone_offerings
from providers.aws.node_template import node_template
from providers.aws.pricing import (
    ON_DEMAND_SOURCE,
    SPOT_SOURCE,
    CatalogFallback,
    fetch_on_demand_prices,
    fetch_spot_prices,
)
from providers.aws.reservations import CapacityReservation, fetch_reservations, reserved_offering, selected
from providers.aws.settings import AwsSettings

__all__ = ["OfferingSource", "Subnets"]

log = structlog.get_logger("tidal.providers.aws")

SHAPE_REFRESH = 6 * 3600.0
RESERVATION_REFRESH = 60.0  # free counts change with every launch, tidal's or anyone's
RETRY_AFTER_FAILURE = 60.0
T = TypeVar("T")
_FAILURES = (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError, ProviderError)


class Cached(Generic[T]):
    """One cached answer from AWS: refreshed when older than ``interval``, kept when a refresh fails."""

    def __init__(
        self, name: str, interval: float, fetch: Callable[[], T], clock: Callable[[], float]
    ) -> None:
        self.name = name
        self.interval = interval
        self._fetch = fetch
        self._clock = clock
        self.value: T | None = None
        self.error = ""
        self._next = 0.0

    def get(self) -> T | None:
        """The current value (None when AWS never answered; ``error`` says why)."""
        now = self._clock()
        if now < self._next:
            return self.value
        try:
            self.value = self._fetch()
        except _FAILURES as err:
            self.error = describe(err)
            self._next = now + min(self.interval, RETRY_AFTER_FAILURE)
            log.warning(
                "aws_refresh_failed", what=self.name, error=self.error, kept_last=self.value is not None
            )
            return self.value
        self.error = ""
        self._next = now + self.interval
        return self.value


class Subnets:
    """The configured subnets, by availability zone."""

    def __init__(self, by_zone: Mapping[str, Sequence[str]]) -> None:
        self.by_zone = {z: tuple(ids) for z, ids in by_zone.items()}
        self.zone_of = {sid: z for z, ids in self.by_zone.items() for sid in ids}


def fetch_subnets(ec2: Any, settings: AwsSettings) -> Subnets:
    """The subnets named by ``aws.subnetIds`` or matched by ``aws.subnetSelector``, by zone."""
    if settings.subnet_ids:
        kwargs: dict[str, Any] = {"SubnetIds": list(settings.subnet_ids)}
    else:
        kwargs = {
            "Filters": [
                {"Name": "tag-key", "Values": [k]} if v == "*" else {"Name": f"tag:{k}", "Values": [v]}
                for k, v in settings.subnet_selector.items()
            ]
        }
    by_zone: dict[str, list[str]] = {}
    for page in ec2.get_paginator("describe_subnets").paginate(**kwargs):
        for subnet in page.get("Subnets", []):
            if subnet.get("State", "available") == "available":
                by_zone.setdefault(str(subnet["AvailabilityZone"]), []).append(str(subnet["SubnetId"]))
    if not by_zone:
        chosen = (
            f"aws.subnetSelector {dict(settings.subnet_selector)}"
            if settings.subnet_selector
            else "aws.subnetIds"
        )
        raise ProviderError(f"{chosen} matches no available subnet")
    return Subnets({z: sorted(ids) for z, ids in sorted(by_zone.items())})


class OfferingSource:
    """Offerings built from the cached pieces; thread-safe (launch threads read subnets and prices)."""

    def __init__(
        self,
        config: Config,
        settings: AwsSettings,
        clients: ClientFactory,
        guard: ApiGuard,
        *,
        fallback: CatalogFallback | None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.settings = settings
        self.clients = clients
        self.guard = guard
        self.fallback = fallback
        self.clock = clock
        prices = settings.price_refresh_interval
        self.subnets = Cached("subnets", SHAPE_REFRESH, self._fetch_subnets, clock)
        self.specs = Cached("instance types", SHAPE_REFRESH, self._fetch_specs, clock)
        self.zones = Cached("instance type offerings", SHAPE_REFRESH, self._fetch_zones, clock)
        self.on_demand = Cached("on-demand prices", prices, self._fetch_on_demand, clock)
        self.spot = Cached("spot prices", prices, self._fetch_spot, clock)
        self.reservations = Cached(
            "capacity reservations", RESERVATION_REFRESH, self._fetch_reservations, clock
        )
        self._lock = threading.RLock()
        self._last: dict[tuple[str, str, str], Offering] = {}
        self._missing: list[str] = []
        self.reservation_ids: frozenset[str] = frozenset()

    # -- fetchers -----------------------------------------------------------------------------------------

    def _fetch_subnets(self) -> Subnets:
        ec2 = self.clients.client("ec2")
        with self.guard.call("DescribeSubnets"):
            return fetch_subnets(ec2, self.settings)

    def _fetch_specs(self) -> dict[str, InstanceSpec]:
        ec2 = self.clients.client("ec2")
        with self.guard.call("DescribeInstanceTypes"):
            return fetch_instance_types(
                ec2,
                families=self.settings.families,
                architectures=self.settings.architectures,
                current_only=self.settings.current_generation_only,
            )

    def _fetch_zones(self) -> dict[str, tuple[str, ...]]:
        ec2 = self.clients.client("ec2")
        with self.guard.call("DescribeInstanceTypeOfferings"):
            return fetch_zone_offerings(
                ec2, self.launch_zones(), instance_types=sorted(self.specs.value or {})
            )

    def _fetch_on_demand(self) -> dict[str, float]:
        pricing = self.clients.client("pricing")
        with self.guard.call("GetProducts"):
            return fetch_on_demand_prices(pricing, self.config.region)

    def _fetch_reservations(self) -> list[CapacityReservation]:
        ec2 = self.clients.client("ec2")
        with self.guard.call("DescribeCapacityReservations"):
            return fetch_reservations(ec2)

    def _fetch_spot(self) -> dict[tuple[str, str], float]:
        ec2 = self.clients.client("ec2")
        with self.guard.call("DescribeSpotPriceHistory"):
            return fetch_spot_prices(ec2, sorted(self.specs.value or {}), now=self.clock())

    # -- queries ------------------------------------------------------------------------------------------

    def launch_zones(self) -> list[str] | None:
        """Zones with a configured subnet (and among ``zones`` when that is set). Without subnets in the
        configuration (listing offerings only): ``zones``, or None for every zone of the region."""
        if not (self.settings.subnet_ids or self.settings.subnet_selector):
            return list(self.config.zones) or None
        with self._lock:
            subnets = self.subnets.get()
        if subnets is None:
            return list(self.config.zones) or [f"{self.config.region}{z}" for z in "abc"]
        zones = list(subnets.by_zone)
        return [z for z in zones if z in self.config.zones] if self.config.zones else zones

    def subnet_map(self) -> Subnets:
        """The subnets, or ProviderError when they cannot be listed."""
        with self._lock:
            subnets = self.subnets.get()
        if subnets is None:
            raise ProviderError(f"cannot list the configured subnets: {self.subnets.error}")
        return subnets

    def spec(self, instance_type: str) -> InstanceSpec | None:
        """The last known shape of ``instance_type`` (None before EC2 has been asked, or when it is unknown)."""
        return (self.specs.value or {}).get(instance_type)

    def known(self, instance_type: str, zone: str, capacity_type: str) -> Offering | None:
        """The offering last listed for this key (for instance prices and GPU counts)."""
        with self._lock:
            return self._last.get((instance_type, zone, capacity_type))

    def offerings(self) -> list[Offering]:
        """Every priced offering in the launch zones; ProviderError when nothing at all can be priced."""
        with self._lock:
            out = with_templates(self._build(), node_template)
            self._last = {(o.instance_type, o.zone, o.capacity_type): o for o in out}
            return out

    def _build(self) -> list[Offering]:
        zones = self.launch_zones()
        if zones is not None and not zones:
            return self._from_fallback(zones, "no configured subnet is in the configured zones")
        specs = self.specs.get()
        if specs is None:
            return self._from_fallback(zones, f"instance types: {self.specs.error}")
        by_type = self.zones.get()
        on_demand = self.on_demand.get()
        spot = self.spot.get()
        region = self.config.region
        out: list[Offering] = []
        unpriced = 0
        for instance_type, spec in sorted(specs.items()):
            type_zones = by_type.get(instance_type, ()) if by_type is not None else (zones or ())
            for zone in (z for z in type_zones if zones is None or z in zones):
                for capacity_type in spec.capacity_types:
                    found = self._price(instance_type, zone, capacity_type, on_demand, spot)
                    if found is None:
                        unpriced += 1
                        continue
                    price, source = found
                    o = spec.offering(zone, capacity_type, price, region, source)
                    if capacity_type == SPOT and self.fallback is not None:
                        # EC2 publishes no interruption rates; the Spot Advisor's, in the catalog file, do.
                        o = replace(o, interruption_rate=self.fallback.interruption_rate(instance_type))
                    out.append(o)
        if not out:
            problems = "; ".join(
                f"{c.name}: {c.error}" for c in (self.zones, self.on_demand, self.spot) if c.error
            )
            return self._from_fallback(zones, problems or "no instance type is offered in the subnets' zones")
        if unpriced:
            log.debug("aws_offerings_unpriced", count=unpriced)
        return out + self._reserved(specs, zones, on_demand)

    def _reserved(
        self,
        specs: Mapping[str, InstanceSpec],
        zones: Sequence[str] | None,
        on_demand: Mapping[str, float] | None,
    ) -> list[Offering]:
        """An offering per chosen reservation in a launch zone; a listed id EC2 does not list is said once."""
        if not self.settings.selects_reservations:
            return []
        found = self.reservations.get()
        if found is None:
            return []  # never listed yet (the refresh failure is logged): plan without reservations for now
        chosen, missing = selected(found, self.settings)
        if missing != self._missing:
            self._missing = missing
            if missing:
                log.warning(
                    "aws_capacity_reservations_not_found",
                    ids=missing,
                    problem=f"aws.capacityReservationIds: {', '.join(missing)} not found among the active or "
                    f"scheduled capacity reservations of {self.config.region}",
                )
        out = []
        for r in chosen:
            spec = specs.get(r.instance_type)
            unusable = r.usable or (
                "" if spec is not None else f"instance type {r.instance_type} not launchable here"
            )
            if not unusable and zones is not None and r.zone not in zones:
                unusable = f"zone {r.zone} has no configured subnet"
            if unusable or spec is None:
                log.debug("aws_capacity_reservation_unused", reservation=r.id, reason=unusable)
                continue
            price = (on_demand or {}).get(r.instance_type)
            if price is None and self.fallback is not None:
                price = self.fallback.price(r.instance_type, ON_DEMAND, r.zone)
            base = spec.offering(r.zone, ON_DEMAND, price or 0.0, self.config.region, "capacity reservation")
            out.append(reserved_offering(r, base))
        self.reservation_ids = frozenset(o.reservation.id for o in out if o.reservation is not None)
        return out

    def _price(
        self,
        instance_type: str,
        zone: str,
        capacity_type: str,
        on_demand: Mapping[str, float] | None,
        spot: Mapping[tuple[str, str], float] | None,
    ) -> tuple[float, str] | None:
        fallback = self.fallback
        if capacity_type == ON_DEMAND:
            if on_demand is not None and instance_type in on_demand:
                return on_demand[instance_type], ON_DEMAND_SOURCE
        elif capacity_type == SPOT and spot is not None:
            # AWS answered: a type without a spot price in a zone is not sold as spot there.
            price = spot.get((instance_type, zone))
            return None if price is None else (price, SPOT_SOURCE)
        if fallback is not None:
            price = fallback.price(instance_type, capacity_type, zone)
            if price is not None:
                return price, fallback.source
        return None

    def _from_fallback(self, zones: Sequence[str] | None, why: str) -> list[Offering]:
        if self.fallback is None:
            unused = self.settings.catalog_fallback_unused
            fallback = unused if unused else "aws.catalogFallback is not set"
            raise ProviderError(f"cannot build EC2 offerings ({why}) and {fallback}")
        s = self.settings
        out = [
            o
            for o in self.fallback.in_zones(zones)
            if (not s.architectures or o.arch.value in s.architectures)
            and (not s.families or o.family in s.families)
        ]
        log.warning(
            "aws_offerings_from_catalog_file",
            file=str(self.fallback.path),
            reason=why,
            count=len(out),
            # The catalog file has no generation column: only EC2 can tell previous-generation types apart.
            **({"current_generation_only": "not applied"} if s.current_generation_only else {}),
        )
        return out
