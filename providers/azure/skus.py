"""VM shapes from Resource SKUs: vCPUs, memory, GPUs, zones and restrictions of each size in one location.

Resource SKUs give the GPU count but not the model, so the model, vendor, memory and the share of a GPU
that partial sizes expose come from Azure's size naming (the table below, the one the shared catalog uses).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from autoscaler.core.model import Arch
from autoscaler.core.offering import Offering

__all__ = ["GpuSpec", "VmShape", "gpu_spec", "shape_from_offering", "shapes_from_skus"]


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """What a size exposes: ``count`` devices of ``memory_mib`` each, ``fraction`` of physical GPUs in all."""

    model: str
    vendor: str
    count: int
    memory_mib: int
    fraction: float


@dataclass(frozen=True, slots=True)
class VmShape:
    """One VM size in one location, as Resource SKUs describe it for this subscription."""

    size: str
    vcpu: int
    memory_mib: int
    arch: Arch = Arch.AMD64
    gpu: GpuSpec | None = None
    zones: tuple[str, ...] = ()  # ARM zone numbers ("1", "2", "3"); () = not zonal here
    restricted_zones: frozenset[str] = frozenset()
    location_restricted: bool = False
    spot_capable: bool = True
    family: str = ""  # the quota family Resource SKUs name ("standardNCASv3_T4Family")

    def zone_available(self, zone: str) -> bool:
        """Whether this subscription may create the size in ``zone`` ("" = wherever the scale set puts it)."""
        if self.location_restricted:
            return False
        if not zone:
            return not self.zones or any(z not in self.restricted_zones for z in self.zones)
        return (not self.zones or zone in self.zones) and zone not in self.restricted_zones


# (size pattern without "Standard_", model, vendor, GiB per full GPU). First match wins.
_GPU_RULES: tuple[tuple[str, str, str, int], ...] = (
    (r"NC\d+as_T4_v3", "T4", "NVIDIA", 16),
    (r"ND40rs_v2", "V100", "NVIDIA", 32),
    (r"NC\d+r?s_v3", "V100", "NVIDIA", 16),
    (r"ND96asr_v4", "A100", "NVIDIA", 40),
    (r"ND96amsr_A100_v4|NC\d+ads_A100_v4", "A100", "NVIDIA", 80),
    (r"NCC?\d+adi?s_H100_v5", "H100 NVL", "NVIDIA", 94),
    (r"ND96isr_H100_v5", "H100", "NVIDIA", 80),
    (r"ND96isr_H200_v5", "H200", "NVIDIA", 141),
    (r"ND96isr?_MI300X_v5", "MI300X", "AMD", 192),
    (r"NC\d+ads_A10_v4", "A10", "NVIDIA", 24),
    (r"NV\d+adm?s_A10_v5", "A10", "NVIDIA", 24),
    (r"NV\d+s_v[23]|NV(6|12|24)(_Promo)?", "M60", "NVIDIA", 8),
    (r"NV\d+as_v4", "Radeon Instinct MI25", "AMD", 16),
    (r"NC(6|12|24)r?(_Promo)?", "K80", "NVIDIA", 12),
    (r"NC\d+r?s_v2", "P100", "NVIDIA", 16),
    (r"ND\d+r?s", "P40", "NVIDIA", 24),
)
# Partial-GPU sizes: the share of one physical GPU by vCPU count (Azure reports one GPU for each).
_PARTIAL = {
    "A10": {6: 1 / 6, 12: 1 / 3, 18: 1 / 2, 36: 1.0, 72: 2.0},
    "Radeon Instinct MI25": {4: 1 / 8, 8: 1 / 4, 16: 1 / 2, 32: 1.0},
}
_PARTIAL_SERIES = re.compile(r"NV(\d+)(adm?s_A10_v5|as_v4)")
_FULL_COUNT = {"MI300X": 8}  # sizes Resource SKUs may list without a GPUs capability


def gpu_spec(size: str, sku_gpus: int = 0) -> GpuSpec | None:
    """The GPUs of ``size`` (``Standard_…``) from its name, with the count Resource SKUs report."""
    short = size.removeprefix("Standard_")
    for pattern, model, vendor, gib in _GPU_RULES:
        if not re.fullmatch(pattern, short):
            continue
        full_mib = gib * 1024
        partial = _PARTIAL_SERIES.fullmatch(short)
        if partial and model in _PARTIAL:
            fraction = _PARTIAL[model].get(int(partial.group(1)))
            if fraction is not None:
                count = max(1, int(fraction))
                return GpuSpec(model, vendor, count, int(full_mib * min(fraction, 1.0)), fraction)
        count = sku_gpus or _FULL_COUNT.get(model, 0)
        return GpuSpec(model, vendor, count, full_mib, float(count)) if count else None
    if sku_gpus:  # a GPU size the table does not know yet: count it, model unknown
        return GpuSpec("", "NVIDIA", sku_gpus, 0, float(sku_gpus))
    return None


def _capabilities(sku: Mapping[str, Any]) -> dict[str, str]:
    return {str(c.get("name")): str(c.get("value")) for c in sku.get("capabilities") or []}


def _number(text: str | None) -> float:
    try:
        return float(text) if text else 0.0
    except ValueError:
        return 0.0


def _restrictions(sku: Mapping[str, Any], location: str) -> tuple[bool, frozenset[str]]:
    whole, zones = False, set[str]()
    for r in sku.get("restrictions") or []:
        info = r.get("restrictionInfo") or {}
        if r.get("type") == "Location" and location in [v.lower() for v in r.get("values") or []]:
            whole = True
        elif r.get("type") == "Zone" and location in [
            v.lower() for v in info.get("locations") or r.get("values") or []
        ]:
            zones.update(str(z) for z in info.get("zones") or [])
    return whole, frozenset(zones)


def shapes_from_skus(skus: Iterable[Mapping[str, Any]], location: str) -> dict[str, VmShape]:
    """Shapes of every virtual machine size Resource SKUs list for ``location``, by size name."""
    location = location.lower()
    out: dict[str, VmShape] = {}
    for sku in skus:
        if sku.get("resourceType") != "virtualMachines" or not str(sku.get("name", "")).startswith(
            "Standard_"
        ):
            continue
        if location not in [str(loc).lower() for loc in sku.get("locations") or []]:
            continue
        caps = _capabilities(sku)
        vcpu = int(_number(caps.get("vCPUs")))
        if vcpu < 1:
            continue
        zones: tuple[str, ...] = ()
        for info in sku.get("locationInfo") or []:
            if str(info.get("location", "")).lower() == location:
                zones = tuple(sorted(str(z) for z in info.get("zones") or []))
        whole, restricted = _restrictions(sku, location)
        name = str(sku["name"])
        out[name] = VmShape(
            size=name,
            vcpu=vcpu,
            memory_mib=int(_number(caps.get("MemoryGB")) * 1024),
            arch=Arch.ARM64 if caps.get("CpuArchitectureType", "").lower() == "arm64" else Arch.AMD64,
            gpu=gpu_spec(name, int(_number(caps.get("GPUs")))),
            zones=zones,
            restricted_zones=restricted,
            location_restricted=whole,
            spot_capable=caps.get("LowPriorityCapable", "True").lower() == "true",
            family=str(sku.get("family") or ""),
        )
    return out


def shape_from_offering(offering: Offering) -> VmShape:
    """A shape from a catalog row, for when Resource SKUs cannot be read (zones and restrictions unknown)."""
    gpu = None
    if offering.gpu_count:
        gpu = GpuSpec(
            offering.gpu_model,
            offering.gpu_vendor or "NVIDIA",
            offering.gpu_count,
            offering.gpu_memory_mib,
            offering.gpu_fraction or float(offering.gpu_count),
        )
    return VmShape(offering.instance_type, offering.vcpu, offering.memory_mib, offering.arch, gpu)
