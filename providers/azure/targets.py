"""Where each offering's nodes come from (a launch target) and the offerings the targets make.

A target is one (VM size, capacity type) and the scale set that grows for it: a node pool named in
``scaleSets``/``spotScaleSets``, a Flexible scale set that takes VMs of any size, or a copy of
``templateScaleSet`` made on first use. A Uniform node pool's priority is part of its model, so a pool
named under ``scaleSets`` whose model says ``priority: Spot`` is the Spot pool of its size
(``spotScaleSets`` says the same explicitly, and is how a size gets both a regular and a Spot pool). A Spot
pool is used only when its model evicts with ``Delete`` and caps the price at ``-1`` (see
:func:`spot_policy_problem`). A Uniform scale set spanning several zones picks the zone of each
new instance itself, so its offerings carry no zone; a single-zone one carries that zone; a Flexible one
offers every zone it spans, because each VM is placed in the zone tidal asks for.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import structlog

from autoscaler.core.model import ON_DEMAND, SPOT, CapacityType
from autoscaler.core.offering import Offering
from providers.azure.prices import PriceBook
from providers.azure.resources import ScaleSet
from providers.azure.settings import AzureSettings
from providers.azure.skus import VmShape

__all__ = [
    "LaunchTarget",
    "copy_name",
    "make_offerings",
    "plan_targets",
    "spot_policy_problem",
    "zone_label",
]

log = structlog.get_logger("tidal.providers.azure")

OfferingKey = tuple[str, str, str]  # (instance type, zone, capacity type)


@dataclass(frozen=True, slots=True)
class LaunchTarget:
    """The scale set a (size, capacity type) grows; ``template`` is copied first when it does not exist."""

    size: str
    capacity_type: str
    scale_set: str
    flexible: bool
    zones: tuple[str, ...]  # ARM zone numbers the scale set spans; () = not zonal
    template: str = ""


def copy_name(template: str, size: str, spot: bool) -> str:
    """The deterministic name of a template copy: ``aks-gpu-12345678-nc24adsa100v4-spot-vmss``."""
    base = template.removesuffix("-vmss")
    slug = re.sub(r"[^a-z0-9]", "", size.lower().removeprefix("standard_"))
    tail = f"-{slug}" + ("-spot" if spot else "") + "-vmss"
    return base[: 64 - len(tail)] + tail


def zone_label(region: str, zone: str) -> str:
    """AKS's ``topology.kubernetes.io/zone`` for an ARM zone number (``eastus-1``); "" when not zonal."""
    return f"{region}-{zone}" if zone else ""


def spot_policy_problem(ss: ScaleSet) -> str | None:
    """Why a Spot scale set's model does not suit tidal, or None when it does.

    Evicted VMs must be deleted (``evictionPolicy: Delete``; a deallocated one keeps its capacity and
    disks, and Azure's default for Spot is Deallocate), and the price must never evict them
    (``billingProfile.maxPrice: -1``, also Azure's default when no price is given): tidal plans with the
    Spot price as a cost, not as a bid.
    """
    profile = (ss.raw.get("properties") or {}).get("virtualMachineProfile") or {}
    eviction = profile.get("evictionPolicy") or "Deallocate"
    max_price = (profile.get("billingProfile") or {}).get("maxPrice", -1)
    problems = []
    if eviction != "Delete":
        problems.append(f"evictionPolicy is {eviction}, not Delete")
    if max_price is not None and float(max_price) != -1:
        problems.append(f"billingProfile.maxPrice is {max_price}, not -1")
    return "; ".join(problems) or None


def _mapped(
    sizes: Mapping[str, str], spot_only: bool, scale_sets: Mapping[str, ScaleSet | None]
) -> Iterable[LaunchTarget]:
    """Targets of ``scaleSets`` (``spot_only`` False) or ``spotScaleSets`` (True)."""
    for size, name in sorted(sizes.items()):
        ss = scale_sets.get(name)
        if ss is None:
            log.warning("azure_scale_set_not_found", scale_set=name, size=size)
            continue
        if ss.flexible:  # a Flexible scale set takes VMs of any size and priority
            yield LaunchTarget(size, SPOT if spot_only else ON_DEMAND, name, True, ss.zones)
            continue
        if ss.size != size:
            log.warning("azure_scale_set_size_mismatch", scale_set=name, configured=size, actual=ss.size)
            continue
        if spot_only and not ss.spot:
            # A Uniform pool's priority is fixed when AKS creates it: a regular pool under spotScaleSets
            # would be sold at the Spot price.
            log.warning(
                "azure_scale_set_priority_mismatch", scale_set=name, priority=ss.priority, wanted=SPOT
            )
            continue
        if ss.spot:
            problem = spot_policy_problem(ss)
            if problem is not None:
                log.warning(
                    "azure_spot_scale_set_refused",
                    scale_set=name,
                    size=size,
                    reason=f"{problem} (recreate the node pool with --eviction-policy Delete "
                    "--spot-max-price -1)",
                )
                continue
        yield LaunchTarget(size, SPOT if ss.spot else ON_DEMAND, name, False, ss.zones)


def plan_targets(
    settings: AzureSettings, scale_sets: Mapping[str, ScaleSet | None], shapes: Mapping[str, VmShape]
) -> list[LaunchTarget]:
    """Every launch target: mapped node pools first, then what the template can make."""
    targets = [
        *_mapped(settings.scale_sets, False, scale_sets),
        *_mapped(settings.spot_scale_sets, True, scale_sets),
    ]
    template = settings.template_scale_set
    if not template:
        return targets
    t = scale_sets.get(template)
    if t is None:
        log.warning("azure_template_scale_set_not_found", scale_set=template)
        return targets
    mapped = {(x.size, x.capacity_type) for x in targets}
    for size in sorted(shapes):
        for capacity_type in (ON_DEMAND, SPOT):
            if (size, capacity_type) in mapped or (capacity_type == SPOT and not shapes[size].spot_capable):
                continue
            if t.flexible:  # a Flexible scale set takes VMs of any size and priority
                targets.append(LaunchTarget(size, capacity_type, template, True, t.zones))
            else:
                name = copy_name(template, size, capacity_type == SPOT)
                targets.append(LaunchTarget(size, capacity_type, name, False, t.zones, template))
    return targets


def _zones(target: LaunchTarget, shape: VmShape) -> list[str]:
    if target.flexible and target.zones:
        return [z for z in target.zones if not shape.zones or z in shape.zones]
    return [target.zones[0]] if len(target.zones) == 1 else [""]


def _available(shape: VmShape, target: LaunchTarget, zone: str) -> bool:
    if shape.location_restricted:
        return False
    if zone:
        return shape.zone_available(zone)
    return not target.zones or any(shape.zone_available(z) for z in target.zones)


def every_size_targets(shapes: Mapping[str, VmShape]) -> list[LaunchTarget]:
    """A target per VM size and capacity type, in every zone the size has, growing no scale set: what
    ``tidal catalog`` lists when no scale set is configured (nothing is launched from these)."""
    return [
        LaunchTarget(size, capacity_type, "", True, shapes[size].zones)
        for size in sorted(shapes)
        for capacity_type in (ON_DEMAND, SPOT)
        if capacity_type == ON_DEMAND or shapes[size].spot_capable
    ]


def make_offerings(
    targets: Sequence[LaunchTarget],
    shapes: Mapping[str, VmShape],
    prices: PriceBook,
    *,
    region: str,
    max_pods: int,
    zones: Sequence[str] = (),
) -> tuple[list[Offering], dict[OfferingKey, LaunchTarget]]:
    """Offerings of the targets that have a shape and a price, and the target behind each offering."""
    offerings: list[Offering] = []
    by_key: dict[OfferingKey, LaunchTarget] = {}
    unpriced = set()
    for target in targets:
        shape = shapes.get(target.size)
        priced = prices.price(target.size, target.capacity_type)
        if shape is None or priced is None:
            if shape is not None:
                unpriced.add(f"{target.size}/{target.capacity_type}")
            continue
        price, source = priced
        gpu = shape.gpu
        for zone in _zones(target, shape):
            label = zone_label(region, zone)
            key = (target.size, label, target.capacity_type)
            if key in by_key or (zones and label and label not in zones):
                continue
            by_key[key] = target
            offerings.append(
                Offering(
                    instance_type=target.size,
                    zone=label,
                    capacity_type=CapacityType(target.capacity_type),
                    vcpu=shape.vcpu,
                    memory_mib=shape.memory_mib,
                    price=price,
                    gpu_count=gpu.count if gpu else 0,
                    gpu_model=gpu.model if gpu else "",
                    gpu_vendor=gpu.vendor if gpu else "",
                    gpu_memory_mib=gpu.memory_mib if gpu else 0,
                    gpu_fraction=gpu.fraction if gpu else 0.0,
                    arch=shape.arch,
                    max_pods=max_pods,
                    region=region,
                    available=_available(shape, target, zone),
                    price_source=source,
                )
            )
    if unpriced:
        log.debug("azure_offerings_without_price", count=len(unpriced), examples=sorted(unpriced)[:5])
    return offerings, by_key
