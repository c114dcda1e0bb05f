"""Prices: on-demand from the AWS Price List API, spot from the spot price history, a catalog file as fallback.

Each price carries its source so ``tidal catalog`` can show where a number came from.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from autoscaler.cloud import ProviderError
from autoscaler.core.offering import Offering
from autoscaler.runtime.catalog import CatalogError, read_catalog_csv

__all__ = [
    "ON_DEMAND_SOURCE",
    "SPOT_SOURCE",
    "CatalogFallback",
    "NoRowsForRegion",
    "fetch_on_demand_prices",
    "fetch_spot_prices",
    "parse_price_list_item",
]

ON_DEMAND_SOURCE = "aws price list api"
SPOT_SOURCE = "aws spot price history"
SPOT_PRODUCTS = ("Linux/UNIX", "Linux/UNIX (Amazon VPC)")
_SPOT_TYPE_LIMIT = 200  # beyond this many types, ask for all of them rather than list them


class NoRowsForRegion(CatalogError):
    """The catalog file is fine but prices no offering of this region."""


def _price_filters(region: str) -> list[dict[str, str]]:
    # regionCode is exact and maintained by AWS; the older "location" names ("US East (N. Virginia)",
    # "EU (Frankfurt)") differ from the SDK's region descriptions and would need a table that goes stale.
    terms = {
        "regionCode": region,
        "operatingSystem": "Linux",
        "tenancy": "Shared",
        "preInstalledSw": "NA",
        "capacitystatus": "Used",
        "marketoption": "OnDemand",
    }
    return [{"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in terms.items()]


def parse_price_list_item(item: str | Mapping[str, Any]) -> tuple[str, float] | None:
    """(instance type, USD per hour) from one Price List product document, or None if it has no hourly price."""
    doc = json.loads(item) if isinstance(item, str) else item
    instance_type = doc.get("product", {}).get("attributes", {}).get("instanceType")
    if not instance_type:
        return None
    prices = []
    for term in (doc.get("terms", {}).get("OnDemand") or {}).values():
        for dimension in (term.get("priceDimensions") or {}).values():
            usd = dimension.get("pricePerUnit", {}).get("USD")
            if usd is not None and str(dimension.get("unit", "Hrs")).startswith("Hr"):
                try:
                    value = float(usd)
                except ValueError:
                    continue
                if value > 0:
                    prices.append(value)
    return (str(instance_type), min(prices)) if prices else None


def fetch_on_demand_prices(pricing: Any, region: str) -> dict[str, float]:
    """Linux, shared-tenancy on-demand price per instance type in ``region``."""
    paginator = pricing.get_paginator("get_products")
    out: dict[str, float] = {}
    pages = paginator.paginate(
        ServiceCode="AmazonEC2", Filters=_price_filters(region), FormatVersion="aws_v1", MaxResults=100
    )
    for page in pages:
        for item in page.get("PriceList", []):
            parsed = parse_price_list_item(item)
            if parsed is not None:
                instance_type, price = parsed
                out[instance_type] = min(price, out.get(instance_type, price))
    if not out:  # a filter AWS stopped honouring must not wipe out every price
        raise ProviderError(f"the Price List API returned no Linux on-demand prices for {region}")
    return out


def _stamp(value: Any) -> float:
    if isinstance(value, datetime):
        return value.timestamp()
    try:
        return datetime.fromisoformat(str(value)).timestamp()
    except ValueError:
        return 0.0


def fetch_spot_prices(
    ec2: Any, instance_types: Sequence[str], *, now: float | None = None
) -> dict[tuple[str, str], float]:
    """The latest spot price per (instance type, zone); StartTime = now returns the price in effect now."""
    kwargs: dict[str, Any] = {
        "ProductDescriptions": list(SPOT_PRODUCTS),
        "StartTime": datetime.fromtimestamp(time.time() if now is None else now, UTC),
    }
    if 0 < len(instance_types) <= _SPOT_TYPE_LIMIT:
        kwargs["InstanceTypes"] = sorted(instance_types)
    latest: dict[tuple[str, str], tuple[float, float]] = {}
    paginator = ec2.get_paginator("describe_spot_price_history")
    for page in paginator.paginate(**kwargs):
        for row in page.get("SpotPriceHistory", []):
            key = (str(row["InstanceType"]), str(row["AvailabilityZone"]))
            try:
                price = float(row["SpotPrice"])
            except (KeyError, ValueError):
                continue
            stamp = _stamp(row.get("Timestamp"))
            if price > 0 and (key not in latest or stamp >= latest[key][0]):
                latest[key] = (stamp, price)
    return {key: price for key, (_, price) in latest.items()}


@dataclass(frozen=True, slots=True)
class CatalogFallback:
    """The ``aws.catalogFallback`` file: whole offerings, and prices by (type, capacity type[, zone])."""

    path: Path
    offerings: tuple[Offering, ...]
    source: str
    _prices: Mapping[tuple[str, str, str], float] = field(default_factory=dict)
    # Spot interruption rates by instance type (the file's spot_interruption_bucket): EC2's API has none.
    _rates: Mapping[str, float] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path, *, region: str, max_pods: int) -> CatalogFallback:
        """Read the file; :class:`CatalogError` when it is unreadable, :class:`NoRowsForRegion` when it has no
        rows for ``region``."""
        offerings = read_catalog_csv(path, cloud="aws", region=region, max_pods=max_pods)
        if not offerings:
            raise NoRowsForRegion(f"{path}: no rows for cloud 'aws' region {region!r}")
        prices = {(o.instance_type, o.capacity_type.value, o.zone): o.price for o in offerings}
        rates = {o.instance_type: o.interruption_rate for o in offerings if o.interruption_rate > 0}
        return cls(path, tuple(offerings), offerings[0].price_source, prices, rates)

    def interruption_rate(self, instance_type: str) -> float:
        """The file's spot interruption rate for ``instance_type`` (0 when it gives none)."""
        return self._rates.get(instance_type, 0.0)

    def price(self, instance_type: str, capacity_type: str, zone: str) -> float | None:
        """The file's price for this offering (a row without a zone prices every zone)."""
        found = self._prices.get((instance_type, capacity_type, zone))
        return self._prices.get((instance_type, capacity_type, "")) if found is None else found

    def in_zones(self, zones: Iterable[str] | None) -> list[Offering]:
        """The file's own offerings in ``zones`` (used when EC2 cannot be asked at all); a row without a
        zone is sold in every zone. ``zones`` None: every row as the file has it."""
        if zones is None:
            return list(self.offerings)
        wanted = list(zones)
        out: dict[tuple[str, str, str], Offering] = {}
        for o in self.offerings:
            for zone in wanted if not o.zone else [o.zone] if o.zone in wanted else []:
                out.setdefault((o.instance_type, zone, o.capacity_type), replace(o, zone=zone))
        return list(out.values())
