"""Copies of ``templateScaleSet``: one Uniform scale set per (VM size, priority), made on first use.

The copy keeps the template's model (image, disks, network, identity, extensions) and changes only the
size, the priority (Spot: evictionPolicy Delete, maxPrice -1), the computer name prefix (node names must
differ between pools) and the tags that mark it as tidal's. ARM never returns write-only fields (custom
data, extension protected settings), so a template must not depend on them; docs/azure.md says more.
"""

from __future__ import annotations

import copy
from typing import Any

from autoscaler.core.model import LABEL_CLUSTER, LABEL_MANAGED, SPOT
from providers.azure.flexible import arm_tags, spot_settings
from providers.azure.ledger import TOKEN_TAG_PREFIX
from providers.azure.resources import ScaleSet, identity_for_write
from providers.azure.targets import LaunchTarget

__all__ = ["TEMPLATE_TAG", "copy_body", "is_copy_of"]

TEMPLATE_TAG = "tidal.dev.template"
_READ_ONLY = ("provisioningState", "uniqueId", "timeCreated")


def is_copy_of(ss: ScaleSet, template: str, cluster: str) -> bool:
    """Whether ``ss`` is this cluster's copy of ``template``."""
    tags = ss.tags
    return tags.get(TEMPLATE_TAG) == template and tags.get(arm_key(LABEL_CLUSTER)) == cluster


def arm_key(label: str) -> str:
    """The tag name ARM accepts for a label of tidal's (``tidal.dev/cluster`` → ``tidal.dev.cluster``)."""
    return next(iter(arm_tags({label: ""})))


def copy_body(template: ScaleSet, target: LaunchTarget, cluster: str) -> dict[str, Any]:
    """The PUT body of ``target.scale_set`` made from ``template`` (capacity 0: tidal grows it)."""
    raw = copy.deepcopy(dict(template.raw))
    properties = dict(raw.get("properties") or {})
    for key in _READ_ONLY:
        properties.pop(key, None)
    profile = dict(properties.get("virtualMachineProfile") or {})
    for key in ("priority", "evictionPolicy", "billingProfile"):
        profile.pop(key, None)
    profile.update(spot_settings(target.capacity_type == SPOT))
    os_profile = dict(profile.get("osProfile") or {})
    os_profile["computerNamePrefix"] = target.scale_set[:57]  # node names add 6 characters, up to 63
    profile["osProfile"] = os_profile
    properties["virtualMachineProfile"] = profile
    tags = {k: v for k, v in template.tags.items() if not k.startswith(TOKEN_TAG_PREFIX)}
    tags.update(arm_tags({LABEL_CLUSTER: cluster, LABEL_MANAGED: "true"}))
    tags[TEMPLATE_TAG] = template.name
    sku = dict(raw.get("sku") or {})
    body: dict[str, Any] = {
        "location": raw.get("location"),
        "sku": {"name": target.size, "tier": sku.get("tier") or "Standard", "capacity": 0},
        "tags": tags,
        "properties": properties,
    }
    if template.zones:
        body["zones"] = list(template.zones)
    identity = identity_for_write(raw.get("identity"))
    if identity:
        body["identity"] = identity
    return body
