"""Fixture data for the Azure fakes: Resource SKUs of one location and Retail Prices API items.

Shapes follow Azure's published sizes; the eastus prices are the pay-as-you-go and Spot list prices in
../shared/data/catalog (Karpenter-Azure 2026-06-18 and the skypilot snapshot). Spot prices exist only for
GPU sizes there, so the CPU sizes here have none.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Size:
    name: str
    family: str
    vcpus: int
    memory_gb: float
    gpus: int = 0
    arch: str = "x64"
    on_demand: float | None = None
    spot: float | None = None


SIZES = (
    Size("Standard_D4s_v5", "standardDSv5Family", 4, 16, on_demand=0.192),
    Size("Standard_D8s_v5", "standardDSv5Family", 8, 32, on_demand=0.384),
    Size("Standard_D16s_v5", "standardDSv5Family", 16, 64, on_demand=0.768),
    Size("Standard_D4ps_v5", "standardDPSv5Family", 4, 16, arch="Arm64", on_demand=0.154),
    Size("Standard_NC4as_T4_v3", "standardNCASv3_T4Family", 4, 28, 1, on_demand=0.526, spot=0.062699),
    Size("Standard_NC8as_T4_v3", "standardNCASv3_T4Family", 8, 56, 1, on_demand=0.752, spot=0.089638),
    Size("Standard_NC16as_T4_v3", "standardNCASv3_T4Family", 16, 110, 1, on_demand=1.204, spot=0.143517),
    Size("Standard_NC6s_v3", "standardNCSv3Family", 6, 112, 1, on_demand=3.06, spot=0.3978),
    Size("Standard_NC24ads_A100_v4", "StandardNCADSA100v4Family", 24, 220, 1, on_demand=3.673, spot=0.444433),
    Size("Standard_NC40ads_H100_v5", "standardNCadsH100v5Family", 40, 320, 1, on_demand=6.98),
    Size("Standard_NV6ads_A10_v5", "StandardNVADSA10v5Family", 6, 55, 1, on_demand=0.454),
    Size("Standard_NV36ads_A10_v5", "StandardNVADSA10v5Family", 36, 440, 1, on_demand=3.2, spot=0.8),
    Size("Standard_NV72ads_A10_v5", "StandardNVADSA10v5Family", 72, 880, 2, on_demand=6.52, spot=1.63),
    Size("Standard_ND96asr_v4", "standardNDASv4_A100Family", 96, 900, 8, on_demand=27.197, spot=2.99167),
    Size("Standard_ND96isr_H100_v5", "standardNDSH100v5Family", 96, 1900, 8, on_demand=98.32),
    Size("Standard_ND96isr_MI300X_v5", "standardNDISRMI300Xv5Family", 96, 1850, 8),
)
SIZES_BY_NAME = {s.name: s for s in SIZES}


def sku_resource(size: Size, location: str, zones: tuple[str, ...] = ("1", "2", "3")) -> dict[str, Any]:
    """One ``Microsoft.Compute/skus`` item as ARM returns it for a virtual machine size."""
    capabilities = [
        ("vCPUs", str(size.vcpus)),
        ("MemoryGB", f"{size.memory_gb:g}"),
        ("CpuArchitectureType", size.arch),
        ("LowPriorityCapable", "True"),
        ("HyperVGenerations", "V1,V2"),
    ]
    if size.gpus:
        capabilities.append(("GPUs", str(size.gpus)))
    return {
        "resourceType": "virtualMachines",
        "name": size.name,
        "tier": "Standard",
        "size": size.name.removeprefix("Standard_"),
        "family": size.family,
        "locations": [location],
        "locationInfo": [{"location": location, "zones": list(zones), "zoneDetails": []}],
        "capabilities": [{"name": k, "value": v} for k, v in capabilities],
        "restrictions": [],
    }


def disk_sku(location: str) -> dict[str, Any]:
    """A non-VM SKU, which the Resource SKUs API lists alongside sizes."""
    return {
        "resourceType": "disks",
        "name": "Premium_LRS",
        "tier": "Premium",
        "size": "P30",
        "locations": [location],
        "locationInfo": [{"location": location, "zones": ["1", "2", "3"]}],
        "capabilities": [{"name": "MaxSizeGiB", "value": "1024"}],
        "restrictions": [],
    }


def _meter(size_name: str) -> tuple[str, str]:
    """(meter/sku name, product name) as the price sheet spells them (``NC4as T4 v3``, ``… Series``)."""
    short = size_name.removeprefix("Standard_")
    head, _, tail = short.partition("_")
    meter = " ".join([head, *tail.split("_")]) if tail else head
    letters = re.sub(r"\d+", "", head, count=1)
    series = f"{letters}_{tail}" if tail else letters
    return meter, f"Virtual Machines {series} Series"


def _item(
    size: str,
    region: str,
    price: float,
    *,
    suffix: str = "",
    windows: bool = False,
    kind: str = "Consumption",
) -> dict[str, Any]:
    meter, product = _meter(size)
    return {
        "currencyCode": "USD",
        "tierMinimumUnits": 0.0,
        "retailPrice": price,
        "unitPrice": price,
        "armRegionName": region,
        "location": "US East" if region == "eastus" else region,
        "effectiveStartDate": "2026-01-01T00:00:00Z",
        "meterId": f"meter-{size}-{region}-{suffix or 'regular'}-{windows}-{kind}",
        "meterName": meter + suffix,
        "productId": f"product-{product}",
        "skuId": f"sku-{size}-{suffix}",
        "productName": product + (" Windows" if windows else ""),
        "skuName": meter + suffix,
        "serviceName": "Virtual Machines",
        "serviceId": "DZH313Z7MMC8",
        "serviceFamily": "Compute",
        "unitOfMeasure": "1 Hour",
        "type": kind,
        "isPrimaryMeterRegion": True,
        "armSkuName": size,
    }


def price_items(region: str = "eastus", sizes: tuple[Size, ...] = SIZES) -> list[dict[str, Any]]:
    """Every price row of ``sizes``: the Linux ones tidal wants, then the kinds it must leave out.

    The rows to leave out come after the wanted ones and some are cheaper (Low Priority, Dev/Test), so a
    reader that keeps the last or the cheapest row per size gets the wrong price.
    """
    wanted: list[dict[str, Any]] = []
    unwanted: list[dict[str, Any]] = []
    for size in sizes:
        if size.on_demand is None:
            continue
        wanted.append(_item(size.name, region, size.on_demand))
        unwanted.append(_item(size.name, region, round(size.on_demand * 1.4, 4), windows=True))
        unwanted.append(_item(size.name, region, round(size.on_demand * 0.7, 4), kind="DevTestConsumption"))
        if size.spot is not None:
            wanted.append(_item(size.name, region, size.spot, suffix=" Spot"))
            unwanted.append(_item(size.name, region, round(size.spot * 1.5, 4), suffix=" Spot", windows=True))
            unwanted.append(_item(size.name, region, round(size.spot * 0.8, 6), suffix=" Low Priority"))
    return wanted + unwanted
