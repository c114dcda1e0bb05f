"""VM prices: the Azure Retail Prices API, cached and refreshed, with a catalog file as the fallback.

The price sheet lists many rows per size. tidal wants the Linux pay-as-you-go and Spot hourly prices:
``type`` Consumption (not DevTestConsumption or Reservation), ``unitOfMeasure`` "1 Hour", no "Windows" in
``productName``, and Spot recognised only by the " Spot" suffix of ``skuName``/``meterName`` (" Low Priority"
rows are the retired low-priority VMs and are left out).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from autoscaler.core.model import ON_DEMAND, SPOT
from autoscaler.core.offering import Offering

__all__ = ["API_SOURCE", "PriceBook", "Prices", "classify_item", "prices_from_items"]

log = structlog.get_logger("tidal.providers.azure")

API_SOURCE = "Azure Retail Prices API"
PriceKey = tuple[str, str]  # (VM size, capacity type)


def classify_item(item: Mapping[str, Any], region: str) -> tuple[str, str, float] | None:
    """``(size, capacity type, $/hour)`` for a Linux hourly VM price row of ``region``; None for any other."""
    if str(item.get("armRegionName", "")).lower() != region.lower():
        return None
    if item.get("type") != "Consumption" or item.get("unitOfMeasure") != "1 Hour":
        return None
    if "windows" in str(item.get("productName", "")).lower():
        return None
    names = (str(item.get("skuName", "")), str(item.get("meterName", "")))
    if any(n.endswith(" Low Priority") for n in names):
        return None
    size = str(item.get("armSkuName", ""))
    price = item.get("retailPrice")
    if not size.startswith("Standard_") or not isinstance(price, (int, float)) or price <= 0:
        return None
    return size, SPOT if any(n.endswith(" Spot") for n in names) else ON_DEMAND, float(price)


def prices_from_items(items: Iterable[Mapping[str, Any]], region: str) -> dict[PriceKey, float]:
    """The wanted price of every (size, capacity type) among price rows; the primary meter region wins."""
    out: dict[PriceKey, tuple[bool, float]] = {}
    for item in items:
        found = classify_item(item, region)
        if found is None:
            continue
        size, capacity_type, price = found
        primary = item.get("isPrimaryMeterRegion", True) is not False
        have = out.get((size, capacity_type))
        # Several meters can price one size (e.g. a secondary meter region); prefer the primary one, then
        # the lower price, so the answer does not depend on the order of pages.
        if have is None or (primary, -price) > (have[0], -have[1]):
            out[(size, capacity_type)] = (primary, price)
    return {k: v for k, (_, v) in out.items()}


@dataclass(frozen=True, slots=True)
class PriceBook:
    """Prices from the API (possibly empty) and the catalog fallback, with why the fallback is used."""

    api: Mapping[PriceKey, float] = field(default_factory=dict)
    fallback: Mapping[PriceKey, float] = field(default_factory=dict)
    fallback_name: str = ""
    api_error: str = ""

    def price(self, size: str, capacity_type: str) -> tuple[float, str] | None:
        """``(price, price source)`` for one offering, or None when nothing prices it."""
        key = (size, capacity_type)
        if key in self.api:
            return self.api[key], API_SOURCE
        if key in self.fallback:
            why = "Retail Prices API unavailable" if self.api_error else "not in the Retail Prices API"
            return self.fallback[key], f"catalog file {self.fallback_name} ({why})"
        return None


def fallback_prices(offerings: Iterable[Offering]) -> dict[PriceKey, float]:
    """Catalog offerings (one per size and capacity type) as a price map."""
    return {(o.instance_type, o.capacity_type): o.price for o in offerings}


class Prices:
    """The price book, fetched through ``fetch`` at most every ``refresh_interval`` seconds.

    A failed refresh keeps the last good prices (a price sheet outage must not change what tidal buys);
    only before the first success does the catalog fallback stand in for the whole sheet.
    """

    def __init__(
        self,
        fetch: Callable[[], dict[PriceKey, float]],
        *,
        refresh_interval: float,
        fallback: Mapping[PriceKey, float] | None = None,
        fallback_name: str = "",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._fetch = fetch
        self.refresh_interval = refresh_interval
        self._fallback = dict(fallback or {})
        self._fallback_name = fallback_name
        self._clock = clock
        self._api: dict[PriceKey, float] = {}
        self._fetched_at: float | None = None
        self._failed_at: float | None = None
        self._error = ""

    def book(self) -> PriceBook:
        """Current prices, refreshing them first when they are older than the refresh interval."""
        now = self._clock()
        due = self._fetched_at is None or now - self._fetched_at >= self.refresh_interval
        retry_due = self._failed_at is None or now - self._failed_at >= min(60.0, self.refresh_interval)
        if due and retry_due:
            try:
                fetched = self._fetch()
            except Exception as err:  # any transport or parsing failure: keep what we have, say why
                self._failed_at = now
                self._error = f"{type(err).__name__}: {err}"[:300]
                log.warning("azure_prices_refresh_failed", error=self._error, have_prices=bool(self._api))
            else:
                if fetched:
                    self._api, self._fetched_at, self._failed_at, self._error = fetched, now, None, ""
                    log.info("azure_prices_refreshed", prices=len(fetched))
                else:
                    self._failed_at, self._error = now, "the price sheet returned no VM prices"
                    log.warning("azure_prices_empty")
        error = self._error if not self._api else ""
        return PriceBook(self._api, self._fallback, self._fallback_name, error)
