"""Fixture data for the GCP fakes, derived from real list prices and specs.

Machine types and prices come from the shared GCP catalog files (``../shared/data/catalog``) when they are
present, else from the project's sample catalog ``config/catalogs/gcp-us-central1.csv`` (same prices, fewer
types; no attachable-GPU prices, so tests of N1 + GPU offerings skip). The Cloud Billing Catalog has no
machine prices, only per-family core/RAM SKUs and per-GPU SKUs: :func:`billing_skus` fits those SKUs to the
machine prices (least squares over every shape of the family in the region), so ``vCPU × core + GiB × RAM
+ GPUs × GPU`` reproduces each listed machine price.
"""

from __future__ import annotations

import csv
import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "data" / "catalog"
SAMPLE = ROOT / "config" / "catalogs" / "gcp-us-central1.csv"
GPU_PRICES = SHARED / "gcp_attachable_gpu_prices_autoscaler.csv"
REGION = "us-central1"
COMPUTE_ENGINE_ID = "6F81-5844-456A"
DECOY_REGION = "europe-west4"

# Which GCE accelerator type a machine family's GPU is.
BUILT_IN = {("A100", 40960): "nvidia-tesla-a100", ("A100", 81920): "nvidia-a100-80gb"}
BUILT_IN_BY_MODEL = {"L4": "nvidia-l4", "H100": "nvidia-h100-80gb"}
SKU_FAMILY = {"n1": "N1 Predefined", "t2a": "T2A Arm", "n2d": "N2D AMD"}
SKU_GPU = {
    "nvidia-tesla-t4": "Tesla T4",
    "nvidia-tesla-v100": "Tesla V100",
    "nvidia-tesla-p100": "Tesla P100",
    "nvidia-tesla-p4": "Tesla P4",
    "nvidia-tesla-a100": "Tesla A100",
    "nvidia-a100-80gb": "A100 80GB",
    "nvidia-l4": "L4",
    "nvidia-h100-80gb": "H100 80GB",
}
SERVED = (
    "e2-micro",
    "e2-standard-2",
    "e2-standard-4",
    "e2-standard-8",
    "n1-standard-1",
    "n1-standard-2",
    "n1-standard-4",
    "n1-standard-8",
    "n1-standard-16",
    "n1-highmem-8",
    "n2-standard-4",
    "n2-standard-8",
    "t2a-standard-4",
    "g2-standard-4",
    "g2-standard-8",
    "a2-highgpu-1g",
    "a2-ultragpu-1g",
    "a3-highgpu-8g",
)
SCARCE = {"a3-highgpu-8g": ("us-central1-a", "us-central1-c"), "a2-ultragpu-1g": ("us-central1-c",)}
ATTACHABLE_IN_ZONE = {"nvidia-tesla-t4": 4, "nvidia-tesla-v100": 8, "nvidia-tesla-p4": 4}
BUILT_IN_IN_ZONE = {"nvidia-l4": 8, "nvidia-tesla-a100": 16, "nvidia-a100-80gb": 16, "nvidia-h100-80gb": 8}


@dataclass(frozen=True)
class Machine:
    """A machine type with its list prices in the region (spot may be None)."""

    name: str
    vcpu: float
    memory_mib: int
    gpu_count: int
    gpu_type: str
    arch: str
    on_demand: float
    spot: float | None

    @property
    def family(self) -> str:
        """``n1`` of ``n1-standard-8``."""
        return self.name.split("-", 1)[0]


def shared_data_present() -> bool:
    """Whether the shared GCP catalog files can be read."""
    return (SHARED / "gcp_machine_types.csv").is_file() and (SHARED / "gcp_compute_prices.csv").is_file()


def _gpu_type(model: str, memory: str) -> str:
    if not model:
        return ""
    return BUILT_IN.get((model, int(float(memory or 0)))) or BUILT_IN_BY_MODEL.get(model, "")


def _number(text: str | None) -> float | None:
    return float(text) if text not in (None, "") else None


def machines(region: str = REGION) -> dict[str, Machine]:
    """Every machine type priced and listed in ``region`` (shared files), or the sample catalog's rows."""
    out: dict[str, Machine] = {}
    if shared_data_present():
        with (SHARED / "gcp_compute_prices.csv").open(newline="") as fh:
            prices = {r["machine_type"]: r for r in csv.DictReader(fh) if r["region"] == region}
        with (SHARED / "gcp_machine_types.csv").open(newline="") as fh:
            for r in csv.DictReader(fh):
                p = prices.get(r["machine_type"])
                if (
                    p is None
                    or p["listed_in_region"] != "True"
                    or _number(p["on_demand_usd_per_hour"]) is None
                ):
                    continue
                out[r["machine_type"]] = Machine(
                    r["machine_type"],
                    float(r["vcpu"]),
                    int(r["memory_mib"]),
                    int(float(r["gpu_count"] or 0)),
                    _gpu_type(r["gpu_model"], r["gpu_memory_mib"]),
                    r["arch"],
                    float(p["on_demand_usd_per_hour"]),
                    _number(p["spot_usd_per_hour"]),
                )
        return out
    with SAMPLE.open(newline="") as fh:
        for r in csv.DictReader(fh):
            if r["region"] != region or r["instance_type"] in out:
                continue
            out[r["instance_type"]] = Machine(
                r["instance_type"],
                float(r["vcpu"]),
                int(r["memory_mib"]),
                int(r["gpu_count"] or 0),
                _gpu_type(r["gpu_model"], r["gpu_memory_mib"]),
                r["arch"],
                float(r["on_demand_usd_per_hour"]),
                _number(r["spot_usd_per_hour"]),
            )
    out.setdefault("e2-micro", Machine("e2-micro", 0.25, 1024, 0, "", "x86_64", 0.008376, 0.002513))
    return out


def attachable_gpu_prices() -> dict[str, tuple[float, float]]:
    """Per-GPU (on-demand, spot) prices of attachable GPUs; empty when the shared file is absent."""
    if not GPU_PRICES.is_file():
        return {}
    with GPU_PRICES.open(newline="") as fh:
        return {
            r["accelerator_type"]: (
                float(r["on_demand_usd_per_gpu_hour"]),
                float(r["preemptible_usd_per_gpu_hour"]),
            )
            for r in csv.DictReader(fh)
            if float(r["on_demand_usd_per_gpu_hour"]) > 0 and r["accelerator_type"] in ATTACHABLE_IN_ZONE
        }


def fit_parts(family: list[Machine], spot: bool) -> dict[str, float]:
    """Core, RAM and per-GPU prices that reproduce the family's machine prices.

    Shapes of one family are often proportional (a2-highgpu-1g … 8g), so the split is not determined by the
    prices alone; the solution closest (relative to a plausible prior) to 0.03 $/vCPU, 0.004 $/GiB and
    1 $/GPU that fits every price is taken.
    """
    gpus = sorted({m.gpu_type for m in family if m.gpu_type})
    rows, prices = [], []
    for m in family:
        price = m.spot if spot else m.on_demand
        if price is None or m.vcpu < 1:
            continue
        rows.append([m.vcpu, m.memory_mib / 1024, *[m.gpu_count if m.gpu_type == g else 0 for g in gpus]])
        prices.append(price)
    if not rows:
        return {}
    a, b = np.array(rows), np.array(prices)
    prior = np.array([0.03, 0.004, *[1.0] * len(gpus)])
    scaled = a * prior
    x = prior * (1 + np.linalg.pinv(scaled) @ (b - scaled @ np.ones(len(prior))))
    return {"core": float(x[0]), "ram": float(x[1]), **{g: float(x[2 + i]) for i, g in enumerate(gpus)}}


_ids = itertools.count(0x1A2B3C)


def _sku(description: str, usage: str, group: str, unit: str, price: float, region: str) -> dict[str, Any]:
    n = next(_ids)
    sku_id = f"{n >> 24 & 0xFFFF:04X}-{n >> 12 & 0xFFF:04X}-{n & 0xFFFF:04X}"
    units, nanos = divmod(round(price * 1e9), 10**9)
    return {
        "name": f"services/{COMPUTE_ENGINE_ID}/skus/{sku_id}",
        "skuId": sku_id,
        "description": description,
        "category": {
            "serviceDisplayName": "Compute Engine",
            "resourceFamily": "Compute" if group != "PDStandard" else "Storage",
            "resourceGroup": group,
            "usageType": usage,
        },
        "serviceRegions": [region],
        "pricingInfo": [
            {
                "summary": "",
                "pricingExpression": {
                    "usageUnit": unit,
                    "usageUnitDescription": "hour" if unit == "h" else "gibibyte hour",
                    "baseUnit": "s" if unit == "h" else "By.s",
                    "displayQuantity": 1,
                    "tieredRates": [
                        {
                            "startUsageAmount": 0,
                            "unitPrice": {"currencyCode": "USD", "units": str(units), "nanos": nanos},
                        }
                    ],
                },
                "currencyConversionRate": 1,
                "effectiveTime": "2026-07-30T06:13:17Z",
            }
        ],
        "serviceProviderName": "Google",
    }


def _family_skus(family: str, parts: dict[str, float], spot: bool, region: str) -> list[dict[str, Any]]:
    prefix = "Spot Preemptible " if spot else ""
    usage = "Preemptible" if spot else "OnDemand"
    name = SKU_FAMILY.get(family, family.upper())
    out = [
        _sku(f"{prefix}{name} Instance Core running in Americas", usage, "CPU", "h", parts["core"], region),
        _sku(
            f"{prefix}{name} Instance Ram running in Americas", usage, "RAM", "GiBy.h", parts["ram"], region
        ),
    ]
    for gpu_type, price in parts.items():
        if gpu_type.startswith("nvidia-"):
            out.append(_gpu_sku(gpu_type, price, spot, region))
    return out


def _gpu_sku(gpu_type: str, price: float, spot: bool, region: str) -> dict[str, Any]:
    attached = " attached to Spot Preemptible VMs" if spot else ""
    usage = "Preemptible" if spot else "OnDemand"
    return _sku(
        f"Nvidia {SKU_GPU[gpu_type]} GPU{attached} running in Americas", usage, "GPU", "h", price, region
    )


def billing_skus(region: str = REGION) -> list[dict[str, Any]]:
    """Compute Engine SKUs for ``region`` (fitted to list prices), plus decoys tidal must not use: another
    region's SKUs, commitments, custom and sole-tenant cores, a virtual-workstation GPU and a disk."""
    catalog = machines(region)
    by_family: dict[str, list[Machine]] = {}
    for m in catalog.values():
        by_family.setdefault(m.family, []).append(m)
    skus: list[dict[str, Any]] = []
    for family in sorted({catalog[n].family for n in SERVED if n in catalog}):
        for spot in (False, True):
            parts = fit_parts(by_family[family], spot)
            if parts:
                skus.extend(_family_skus(family, parts, spot, region))
                skus.extend(_family_skus(family, {k: v * 1.25 for k, v in parts.items()}, spot, DECOY_REGION))
    for gpu_type, (on_demand, spot_price) in attachable_gpu_prices().items():
        skus.append(_gpu_sku(gpu_type, on_demand, False, region))
        skus.append(_gpu_sku(gpu_type, spot_price, True, region))
    skus += [
        _sku(
            "Commitment v1: N1 Predefined Instance Core in Americas for 1 Year",
            "Commit1Yr",
            "CPU",
            "h",
            0.0199,
            region,
        ),
        _sku("N1 Custom Instance Core running in Americas", "OnDemand", "CPU", "h", 0.0332, region),
        _sku("N1 Sole Tenancy Instance Core running in Americas", "OnDemand", "CPU", "h", 0.0348, region),
        _sku(
            "Nvidia Tesla T4 Virtual Workstation GPU running in Americas",
            "OnDemand",
            "GPU",
            "h",
            0.55,
            region,
        ),
        _sku("Storage PD Capacity", "OnDemand", "PDStandard", "GiBy.h", 0.000054, region),
    ]
    return skus


def machine_type_resource(machine: Machine, project: str, zone: str, ident: int) -> dict[str, Any]:
    """A ``compute#machineType`` as machineTypes.list returns it."""
    resource: dict[str, Any] = {
        "kind": "compute#machineType",
        "id": str(900000000000000000 + ident),
        "creationTimestamp": "1969-12-31T16:00:00.000-08:00",
        "name": machine.name,
        "description": f"{machine.vcpu:g} vCPUs, {machine.memory_mib / 1024:g} GB RAM",
        "guestCpus": max(1, int(machine.vcpu)) if machine.vcpu >= 1 else 2,
        "memoryMb": machine.memory_mib,
        "imageSpaceGb": 0,
        "maximumPersistentDisks": 128,
        "maximumPersistentDisksSizeGb": "263168",
        "zone": zone,
        "selfLink": f"https://www.googleapis.com/compute/v1/projects/{project}/zones/{zone}/machineTypes/{machine.name}",
        "isSharedCpu": machine.vcpu < 1,
        "architecture": "ARM64" if machine.arch == "arm64" else "X86_64",
    }
    if machine.gpu_type:
        resource["accelerators"] = [
            {"guestAcceleratorType": machine.gpu_type, "guestAcceleratorCount": machine.gpu_count}
        ]
    return resource


def accelerator_type_resource(name: str, maximum: int, project: str, zone: str, ident: int) -> dict[str, Any]:
    """A ``compute#acceleratorType`` as acceleratorTypes.list returns it."""
    return {
        "kind": "compute#acceleratorType",
        "id": str(10000 + ident),
        "creationTimestamp": "1969-12-31T16:00:00.000-08:00",
        "name": name,
        "description": SKU_GPU.get(name, name),
        "zone": f"https://www.googleapis.com/compute/v1/projects/{project}/zones/{zone}",
        "selfLink": f"https://www.googleapis.com/compute/v1/projects/{project}/zones/{zone}/acceleratorTypes/{name}",
        "maximumCardsPerInstance": maximum,
    }


def zone_catalog(
    project: str, zones: list[str]
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, list[dict[str, Any]]]]:
    """(machine types by zone, accelerator types by zone) for the fake: SERVED types, scarce ones in some
    zones only, attachable GPUs everywhere plus a virtual-workstation type tidal must skip."""
    catalog = machines()
    types: dict[str, list[dict[str, Any]]] = {}
    accels: dict[str, list[dict[str, Any]]] = {}
    ident = itertools.count(1)
    for zone in zones:
        types[zone] = [
            machine_type_resource(catalog[name], project, zone, next(ident))
            for name in SERVED
            if name in catalog and zone in SCARCE.get(name, (zone,))
        ]
        listed = {**ATTACHABLE_IN_ZONE, **BUILT_IN_IN_ZONE, "nvidia-tesla-t4-vws": 4}
        accels[zone] = [
            accelerator_type_resource(n, m, project, zone, next(ident)) for n, m in sorted(listed.items())
        ]
    return types, accels
