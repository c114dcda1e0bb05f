"""Which offerings an Azure quota refusal covers, from what ARM says when it refuses a VM.

A quota refusal is ``OperationNotAllowed`` (or ``QuotaExceeded``) whose message names the quota: "…results
in exceeding approved standardNCASv3_T4Family Cores quota. Additional details - Deployment Model: Resource
Manager, Location: eastus, Current Limit: 0…". The name decides the scope:

- ``<family> Cores`` (``standardNCASv3_T4Family Cores``): the VM sizes of that family (the ``family`` of
  their Resource SKU), regular VMs; Spot VMs draw on their own quota;
- ``LowPriorityCores``: every Spot offering of the region;
- ``Total Regional Cores`` (or another name): every regular offering of the region.

``SkuNotAvailable`` ("…Standard_NC4as_T4_v3 is currently not available in location 'eastus' zones '2' for
subscription…") is a restriction of this subscription on one size, in the zones it names.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from autoscaler.cloud import QuotaScope
from autoscaler.core.model import ON_DEMAND, SPOT
from autoscaler.core.offering import Offering
from providers.azure.skus import VmShape
from providers.azure.targets import zone_label

__all__ = ["quota_scope", "sku_scope"]

_APPROVED = re.compile(r"exceeding approved (?P<name>.+?) quota", re.IGNORECASE)
_ZONES = re.compile(r"zones? '(?P<zones>[0-9, ]+)'", re.IGNORECASE)


def quota_scope(message: str, offering: Offering, shapes: Mapping[str, VmShape], region: str) -> QuotaScope:
    """The offerings the quota named in ``message`` covers (a refusal of ``offering``)."""
    found = _APPROVED.search(message or "")
    name = " ".join(found["name"].split()) if found else "Total Regional Cores"
    squashed = name.replace(" ", "").lower()
    if "lowpriority" in squashed or squashed.startswith("spot"):
        return QuotaScope("region", name, region, SPOT)
    if squashed.endswith("familycores"):
        family = name[: -len("Cores")].strip()
        sizes = {size for size, shape in shapes.items() if shape.family.lower() == family.lower()}
        sizes.add(offering.instance_type)
        return QuotaScope("family", family, region, ON_DEMAND, instance_types=frozenset(sizes))
    return QuotaScope("region", name, region, ON_DEMAND)


def sku_scope(message: str, offering: Offering, region: str) -> QuotaScope:
    """The size (in the zones the message names, else everywhere) this subscription may not create."""
    found = _ZONES.search(message or "")
    zones = frozenset(
        zone_label(region, z.strip()) for z in (found["zones"].split(",") if found else []) if z.strip()
    )
    return QuotaScope(
        "instance-type",
        offering.instance_type,
        region,
        offering.capacity_type,
        instance_types=frozenset({offering.instance_type}),
        zones=zones,
    )
