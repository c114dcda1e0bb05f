"""Instance catalogs: offerings read from a CSV file (the offline source and every provider's fallback).

The columns are those of the shared instance catalog (cloud, region, instance_type, vcpu, memory_mib,
gpu_count, gpu_model, gpu_memory_mib, arch, on_demand_usd_per_hour, spot_usd_per_hour, …, optional zone and
max_pods). Rows of other clouds and regions are left out; a row without a zone stands for every zone.

Rows of the wanted cloud and region are checked, and a bad one is an error naming the file and line: a row
with fewer or more fields than the header, a row with neither price, and a row that offers an instance type in
a zone that an earlier row already offers (a duplicate would leave which price counts to chance). A UTF-8
byte-order mark (spreadsheet exports) is allowed. Shared-core types (less than one vCPU) are left out quietly:
they cannot host a Kubernetes node.
"""

from __future__ import annotations

import csv
import importlib
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from autoscaler.cloud import registered
from autoscaler.core.model import ON_DEMAND, SPOT, Arch
from autoscaler.core.offering import NodeTemplate, Offering
from autoscaler.core.spot_risk import BUCKET_MONTHLY_SHARE, bucket_rate, rate_bucket

# How a provider says what its nodes look like: the node template of one of its offerings. It needs no
# credentials and no cloud SDK, so that catalogs read offline get the same templates as the live cloud.
TemplateBuilder = Callable[[Offering], NodeTemplate]
# Where tidal finds a provider's TemplateBuilder: this name in the module its ``tidal.providers`` entry point
# names, else on the provider class itself.
TEMPLATE_BUILDER = "offering_template"

REQUIRED_COLUMNS = (
    "cloud",
    "region",
    "instance_type",
    "vcpu",
    "memory_mib",
    "gpu_count",
    "arch",
    "on_demand_usd_per_hour",
)


class CatalogError(ValueError):
    """A catalog file that cannot be read; the message names the file, line and column."""


def with_templates(offerings: Iterable[Offering], builder: TemplateBuilder) -> list[Offering]:
    """``offerings``, each carrying the node template ``builder`` makes of it (equal templates are one
    object, so thousands of offerings of a few kinds of node hold a few templates)."""
    shared: dict[NodeTemplate, NodeTemplate] = {}
    out: list[Offering] = []
    for o in offerings:
        template = builder(o)
        out.append(replace(o, template=shared.setdefault(template, template)))
    return out


def offering_templates(cloud: str) -> TemplateBuilder | None:
    """The node-template builder of the provider registered as ``cloud`` (None when no provider is, or it
    builds none); :class:`CatalogError` when its module cannot be loaded."""
    for ep in (ep for ep in registered() if ep.name == cloud):
        try:
            builder = getattr(importlib.import_module(ep.module), TEMPLATE_BUILDER, None)
            if builder is None:
                builder = getattr(ep.load(), TEMPLATE_BUILDER, None)
        except ImportError as err:
            raise CatalogError(
                f"cloud {cloud!r}: its provider's node templates cannot be loaded ({err})"
            ) from None
        if builder is not None and not callable(builder):
            raise CatalogError(f"cloud {cloud!r}: {ep.module}.{TEMPLATE_BUILDER} is not a function")
        found: TemplateBuilder | None = builder
        return found
    return None


def _number(
    row: Mapping[str, str], column: str, where: str, *, integer: bool = False, default: float | None = None
) -> float:
    raw = (row.get(column) or "").strip()
    if not raw:
        if default is not None:
            return default
        raise CatalogError(f"{where}: {column} is empty")
    try:
        value = float(raw)
    except ValueError:
        raise CatalogError(f"{where}: {column}: {raw!r} is not a number") from None
    if value != value or value < 0 or value == float("inf"):
        raise CatalogError(f"{where}: {column}: {raw!r} is not a non-negative number")
    if integer and value != int(value):
        raise CatalogError(f"{where}: {column}: {raw!r} is not a whole number")
    return value


def _interruption_rate(row: Mapping[str, str], where: str) -> float:
    """The spot interruption rate of a row's ``spot_interruption_bucket`` (0 when empty: not published)."""
    raw = (row.get("spot_interruption_bucket") or "").strip()
    if not raw:
        return 0.0
    top = len(BUCKET_MONTHLY_SHARE) - 1
    if not raw.isdigit() or int(raw) > top:
        raise CatalogError(f"{where}: spot_interruption_bucket: {raw!r} is not a bucket from 0 to {top}")
    return bucket_rate(int(raw))


def offerings_from_rows(
    rows: Iterable[Mapping[str, str]],
    *,
    cloud: str,
    region: str,
    zones: Sequence[str] = (),
    max_pods: int = 110,
    source: str = "catalog",
    price_source: str = "catalog file",
    template: TemplateBuilder | None = None,
) -> list[Offering]:
    """Offerings (one per zone and capacity type with a price) from catalog rows of ``cloud``/``region``,
    with the node templates ``template`` builds (none without it)."""
    out: list[Offering] = []
    seen: dict[tuple[str, str, str], int] = {}
    for n, row in enumerate(rows, start=2):
        if (row.get("cloud") or "").strip() != cloud or (row.get("region") or "").strip() != region:
            continue
        line = getattr(rows, "line_num", n)  # a csv reader knows the physical line (quoted fields span lines)
        where = f"{source}:{line}"
        if None in row.values() or None in row:
            fields = sum(v is not None for k, v in row.items() if k is not None)
            extra = row.get(None)  # type: ignore[call-overload]
            fields += len(extra) if isinstance(extra, list) else 0
            header = sum(1 for k in row if k is not None)
            raise CatalogError(f"{where}: {fields} fields, but the header has {header} columns")
        instance_type = (row.get("instance_type") or "").strip()
        if not instance_type:
            raise CatalogError(f"{where}: instance_type is empty")
        try:
            arch = Arch.parse(row.get("arch") or "x86_64")
        except ValueError as err:
            raise CatalogError(f"{where}: arch: {err}") from None
        vcpu = _number(row, "vcpu", where)
        if vcpu != int(vcpu) or vcpu < 1:
            continue  # shared-core types (e2-micro's 0.25 vCPU) cannot host a Kubernetes node
        gpu_count = int(_number(row, "gpu_count", where, integer=True, default=0))
        fraction = _number(row, "gpu_fraction", where, default=float(gpu_count))
        prices = {
            ON_DEMAND: _number(row, "on_demand_usd_per_hour", where, default=-1),
            SPOT: _number(row, "spot_usd_per_hour", where, default=-1),
        }
        if all(p < 0 for p in prices.values()):
            raise CatalogError(
                f"{where}: {instance_type} has neither on_demand_usd_per_hour nor spot_usd_per_hour"
            )
        risk = _interruption_rate(row, where)
        zone = (row.get("zone") or "").strip()
        row_zones = [zone] if zone else (list(zones) or [""])
        shape = Offering(
            instance_type=instance_type,
            zone="",
            capacity_type=ON_DEMAND,
            price=0.0,
            vcpu=int(vcpu),
            memory_mib=int(_number(row, "memory_mib", where)),
            gpu_count=gpu_count,
            gpu_model=(row.get("gpu_model") or "").strip() if gpu_count else "",
            gpu_vendor=(row.get("gpu_vendor") or ("NVIDIA" if gpu_count else "")).strip(),
            gpu_memory_mib=int(_number(row, "gpu_memory_mib", where, default=0)),
            gpu_fraction=fraction,
            arch=arch,
            max_pods=int(_number(row, "max_pods", where, integer=True, default=max_pods)),
            region=region,
            price_source=price_source,
        )
        for capacity_type, price in prices.items():
            if price < 0:
                continue
            for z in row_zones:
                key = (instance_type, z, capacity_type)
                if key in seen:
                    zone_text = f" in zone {z}" if z else ""
                    raise CatalogError(f"{where}: {instance_type}{zone_text} is already on line {seen[key]}")
                seen[key] = line
                rate = risk if capacity_type == SPOT else 0.0
                out.append(
                    replace(shape, zone=z, capacity_type=capacity_type, price=price, interruption_rate=rate)
                )
    return with_templates(out, template) if template is not None else out


def read_catalog_csv(
    path: str | os.PathLike[str],
    *,
    cloud: str,
    region: str,
    zones: Sequence[str] = (),
    max_pods: int = 110,
    template: TemplateBuilder | None = None,
) -> list[Offering]:
    """Read a catalog CSV, with the node templates ``template`` builds; raise :class:`CatalogError` with file
    and line on bad input."""
    p = Path(path)
    try:
        with p.open(newline="", encoding="utf-8-sig") as fh:
            reader = csv.DictReader(fh)
            header = reader.fieldnames or []
            missing = [c for c in REQUIRED_COLUMNS if c not in header]
            if missing:
                raise CatalogError(f"{p}: missing columns {', '.join(missing)}")
            return offerings_from_rows(
                reader,
                cloud=cloud,
                region=region,
                zones=zones,
                max_pods=max_pods,
                source=str(p),
                price_source=f"catalog file {p.name}",
                template=template,
            )
    except OSError as err:
        raise CatalogError(f"{p}: {err.strerror or err}") from None
    except (UnicodeDecodeError, csv.Error) as err:
        raise CatalogError(f"{p}: not a CSV file ({err})") from None


class OfferingCatalog:
    """The provider's offerings, refreshed every ``refresh_interval`` seconds; the last good list when a
    refresh fails. What the cloud refused lately is not kept here but in
    :class:`autoscaler.runtime.availability.Availability`."""

    def __init__(self, fetch: Callable[[], list[Offering]], *, refresh_interval: float) -> None:
        self._fetch = fetch
        self.refresh_interval = refresh_interval
        self._offerings: list[Offering] = []
        self._fetched_at: float | None = None
        self.last_error = ""

    @property
    def fetched_at(self) -> float | None:
        """When the offerings were last read from the provider (None: never)."""
        return self._fetched_at

    def offerings(self, now: float) -> list[Offering]:
        """Current offerings (the last good list when a refresh fails; the first failure raises)."""
        if self._fetched_at is None or now - self._fetched_at >= self.refresh_interval:
            try:
                self._offerings = self._fetch()
                self._fetched_at = now
                self.last_error = ""
            except Exception as err:  # a provider failure must not stop planning on the last good list
                self.last_error = f"{type(err).__name__}: {err}"
                if self._fetched_at is None:
                    raise
        return self._offerings


CSV_COLUMNS = (
    "cloud",
    "region",
    "instance_type",
    "vcpu",
    "memory_mib",
    "gpu_count",
    "gpu_fraction",
    "gpu_vendor",
    "gpu_model",
    "gpu_memory_mib",
    "arch",
    "on_demand_usd_per_hour",
    "spot_usd_per_hour",
    "zone",
    "max_pods",
    "on_demand_source",
    "spot_source",
    "spot_interruption_bucket",
)


def write_catalog_csv(offerings: Iterable[Offering], out: Any, *, cloud: str, region: str) -> None:
    """Offerings as a catalog CSV (one row per type and zone, both prices) that ``read_catalog_csv`` loads."""
    rows: dict[tuple[str, str], dict[str, str]] = {}
    # A catalog file prices what can be bought: reservations (price 0, paid ahead) are not written.
    bought = (o for o in offerings if o.reservation is None)
    for o in sorted(bought, key=lambda o: (o.instance_type, o.zone, o.capacity_type)):
        row = rows.setdefault(
            (o.instance_type, o.zone),
            {
                "cloud": cloud,
                "region": region,
                "instance_type": o.instance_type,
                "vcpu": str(o.vcpu),
                "memory_mib": str(o.memory_mib),
                "gpu_count": str(o.gpu_count),
                "gpu_fraction": f"{o.gpu_fraction:g}",
                "gpu_vendor": o.gpu_vendor,
                "gpu_model": o.gpu_model,
                "gpu_memory_mib": str(o.gpu_memory_mib),
                "arch": "arm64" if o.arch == Arch.ARM64 else "x86_64",
                "on_demand_usd_per_hour": "",
                "spot_usd_per_hour": "",
                "zone": o.zone,
                "max_pods": str(o.max_pods),
                "on_demand_source": "",
                "spot_source": "",
                "spot_interruption_bucket": "",
            },
        )
        kind = "spot" if o.capacity_type == SPOT else "on_demand"
        row[f"{kind}_usd_per_hour"] = f"{o.price:g}"
        row[f"{kind}_source"] = o.price_source
        bucket = rate_bucket(o.interruption_rate) if o.capacity_type == SPOT else None
        if bucket is not None:
            row["spot_interruption_bucket"] = str(bucket)
    writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows.values())
