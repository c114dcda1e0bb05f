"""Prices from files, for when the Cloud Billing Catalog cannot be read or lacks a SKU.

``gcp.catalogFallback`` is an instance catalog CSV (the columns of ``config/catalogs/*.csv``): whole-machine
on-demand and spot prices. ``gcp.gpuPriceFallback`` prices attached GPUs per GPU, in the columns
``accelerator_type,on_demand_usd_per_gpu_hour,preemptible_usd_per_gpu_hour``; an N1 VM with attached GPUs
costs its machine price plus ``count × GPU price``. A zero GPU price means "included in the machine price"
(how A100 and L4 appear in such tables) and is not used for attachment.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from autoscaler.core.model import ON_DEMAND, SPOT
from autoscaler.runtime.catalog import CatalogError, read_catalog_csv
from providers.gcp.settings import SECTION, ProviderConfigError
from providers.gcp.shapes import Shape

__all__ = ["FallbackPrices", "load_fallback"]

_GPU_COLUMNS = {ON_DEMAND: "on_demand_usd_per_gpu_hour", SPOT: "preemptible_usd_per_gpu_hour"}


@dataclass(frozen=True, slots=True)
class FallbackPrices:
    """Machine prices by (machine type, zone, capacity type) and attached-GPU prices by (type, capacity)."""

    machines: dict[tuple[str, str, str], float] = field(default_factory=dict)
    gpus: dict[tuple[str, str], float] = field(default_factory=dict)
    machine_source: str = ""
    gpu_source: str = ""

    def price(self, shape: Shape, capacity_type: str) -> tuple[float, str] | None:
        """``(price, source)`` for ``shape`` from the files, or None when they do not price it."""
        machine = self.machines.get((shape.machine_type, shape.zone, capacity_type))
        if machine is None:
            return None
        if not shape.attached:
            return machine, self.machine_source
        gpu = self.gpus.get((shape.gpu.type if shape.gpu else "", capacity_type))
        if gpu is None:
            return None
        return round(machine + shape.gpu_count * gpu, 6), f"{self.machine_source} + {self.gpu_source}"

    def __bool__(self) -> bool:
        return bool(self.machines)


def _gpu_prices(path: Path) -> dict[tuple[str, str], float]:
    where = f"{SECTION}.gpuPriceFallback"
    out: dict[tuple[str, str], float] = {}
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            missing = [
                c for c in ("accelerator_type", *_GPU_COLUMNS.values()) if c not in (reader.fieldnames or ())
            ]
            if missing:
                raise ProviderConfigError(
                    [f"{where}: {str(path)!r} has no column {', '.join(missing)}"], SECTION
                )
            for line, row in enumerate(reader, start=2):
                for capacity, column in _GPU_COLUMNS.items():
                    raw = (row.get(column) or "").strip()
                    try:
                        price = float(raw) if raw else 0.0
                    except ValueError:
                        raise ProviderConfigError(
                            [f"{where}: {path.name}:{line}: {column}: {raw!r} is not a number"], SECTION
                        ) from None
                    if price > 0:
                        out[((row.get("accelerator_type") or "").strip(), capacity)] = price
    except OSError as err:
        raise ProviderConfigError([f"{where}: {str(path)!r}: {err.strerror or err}"], SECTION) from None
    return out


def load_fallback(
    catalog: Path | None, gpu_prices: Path | None, *, region: str, zones: Sequence[str]
) -> FallbackPrices:
    """Read the fallback files named in the settings; ProviderConfigError when one cannot be used."""
    machines: dict[tuple[str, str, str], float] = {}
    if catalog is not None:
        try:
            offerings = read_catalog_csv(catalog, cloud="gcp", region=region, zones=zones)
        except CatalogError as err:
            raise ProviderConfigError([f"{SECTION}.catalogFallback: {err}"], SECTION) from None
        if not offerings:
            raise ProviderConfigError(
                [f"{SECTION}.catalogFallback: {str(catalog)!r} has no gcp rows for region {region}"], SECTION
            )
        machines = {(o.instance_type, o.zone, o.capacity_type): o.price for o in offerings}
    gpus = _gpu_prices(gpu_prices) if gpu_prices is not None else {}
    return FallbackPrices(
        machines,
        gpus,
        f"catalog file {catalog.name}" if catalog is not None else "",
        f"gpu price file {gpu_prices.name}" if gpu_prices is not None else "",
    )
