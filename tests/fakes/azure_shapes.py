"""Bodies read back through azure-mgmt-compute's own models: every property a body carries must be one the
SDK's model knows (recursively, through nested models, lists and maps), and each must deserialize as the
type the model gives it. An unknown or misspelled property, which the SDK would silently keep as an opaque
key, shows up here.
"""

from __future__ import annotations

from typing import Any

from azure.mgmt.compute import models
from azure.mgmt.compute._utils.model_base import Model

__all__ = ["PAGE_KEYS", "ROUTE_MODELS", "problems"]

PAGE_KEYS = frozenset({"value", "nextLink"})
# The fake ARM's route handlers: (request model, response model, whether the response is a page of them).
ROUTE_MODELS: dict[str, tuple[type[Model] | None, type[Model] | None, bool]] = {
    "skus": (None, models.ResourceSku, True),
    "list_scale_sets": (None, models.VirtualMachineScaleSet, True),
    "get_scale_set": (None, models.VirtualMachineScaleSet, False),
    "patch_scale_set": (models.VirtualMachineScaleSetUpdate, models.VirtualMachineScaleSet, False),
    "put_scale_set": (models.VirtualMachineScaleSet, models.VirtualMachineScaleSet, False),
    "delete_instances": (models.VirtualMachineScaleSetVMInstanceRequiredIDs, None, False),
    "list_scale_set_vms": (None, models.VirtualMachineScaleSetVM, True),
    "get_scale_set_vm": (None, models.VirtualMachineScaleSetVM, False),
    "list_vms": (None, models.VirtualMachine, True),
    "get_vm": (None, models.VirtualMachine, False),
    "put_vm": (models.VirtualMachine, models.VirtualMachine, False),
    "get_capacity_reservation_group": (None, models.CapacityReservationGroup, False),
    "list_capacity_reservations": (None, models.CapacityReservation, True),
}


def problems(model: type[Model], body: Any, where: str = "") -> list[str]:
    """Every property of ``body`` that ``model`` does not know, or cannot read as its type."""
    if not isinstance(body, dict):
        return [f"{where or '(body)'}: {type(body).__name__}, not an object"]
    try:
        instance = model(body)
    except Exception as err:  # the SDK cannot even take it in
        return [f"{where or '(body)'}: {model.__name__} refuses it: {err}"]
    return _walk(instance, where)


def _walk(instance: Model, where: str) -> list[str]:
    fields = type(instance)._attr_to_rest_field  # type: ignore[misc]  # the SDK declares it per instance, sets it per class
    known = {rf._rest_name: attr for attr, rf in fields.items()}
    out: list[str] = []
    for key in list(instance.keys()):
        path = f"{where}.{key}" if where else key
        if key not in known:
            out.append(f"{path}: not a property of {type(instance).__name__}")
            continue
        try:
            value = getattr(instance, known[key])
        except Exception as err:  # the SDK cannot read the value as the type it declares
            out.append(f"{path}: not readable as {type(instance).__name__}.{known[key]} ({err})")
            continue
        out += _nested(value, path)
    return out


def _nested(value: Any, path: str) -> list[str]:
    if isinstance(value, Model):
        return _walk(value, path)
    if isinstance(value, list):
        return [p for i, item in enumerate(value) for p in _nested(item, f"{path}[{i}]")]
    if isinstance(value, dict):
        return [p for k, item in value.items() for p in _nested(item, f"{path}.{k}")]
    return []
