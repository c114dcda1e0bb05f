"""``resource.k8s.io/v1`` JSON (as dicts) → :mod:`autoscaler.core.dra` values: DeviceClasses, ResourceClaims,
ResourceClaimTemplates, and the claims a pod names.

Errors read as in ``kube/convert.py``: a :class:`ConversionError` naming the object, the field path and the
value. The checks are the API server's own (``pkg/apis/resource/validation``): a request is ``exactly`` one
kind of device or ``firstAvailable`` alternatives, never both; ``count`` is above 0 and only with
``ExactCount``; a pod claim names either a ResourceClaim or a ResourceClaimTemplate.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autoscaler.core.dra import (
    AllocationMode,
    ClaimSpec,
    DeviceClass,
    DeviceConstraint,
    DeviceRequest,
    DeviceSubRequest,
    PodClaim,
    ResourceClaim,
    ResourceClaimTemplate,
)
from autoscaler.runtime.kube.fields import (
    ConversionError,
    FieldError,
    boolean,
    field_list,
    field_map,
    field_maps,
    got,
    guard,
    object_name,
    string,
)
from autoscaler.runtime.kube.scheduling import INT32_MAX

__all__ = [
    "ConversionError",
    "deviceclass_from_dict",
    "pod_claims",
    "resourceclaim_from_dict",
    "resourceclaimtemplate_from_dict",
]

_MODES = tuple(m.value for m in AllocationMode)


def _selectors(raw: Mapping[str, Any], where: str) -> tuple[str, ...]:
    out = []
    for i, selector in enumerate(field_maps(raw, "selectors", where)):
        at = f"{where}selectors[{i}]."
        cel = field_map(selector, "cel", at)
        expression = cel.get("expression")
        if type(expression) is not str or not expression.strip():
            problem = "missing" if not expression else f"expected a string, got {got(expression)}"
            raise FieldError(f"{at}cel.expression", problem)
        out.append(expression)
    return tuple(out)


def _count(raw: Mapping[str, Any], mode: AllocationMode, where: str) -> int:
    value = raw.get("count")
    if mode == AllocationMode.ALL:
        if value is not None:
            raise FieldError(f"{where}count", f"{got(value)} must not be set with allocationMode All")
        return 0
    if value is None:
        return 1
    if type(value) is not int or not 0 < value <= INT32_MAX:
        raise FieldError(f"{where}count", f"{got(value)} is not a whole number above 0")
    return value


def _subrequest(raw: Mapping[str, Any], name: str, where: str) -> DeviceSubRequest:
    device_class = string(raw, "deviceClassName", where=where)
    if not device_class:
        raise FieldError(f"{where}deviceClassName", "missing")
    mode_text = string(raw, "allocationMode", AllocationMode.EXACT_COUNT.value, where)
    if mode_text not in _MODES:
        raise FieldError(f"{where}allocationMode", f"{got(mode_text)} is not one of {', '.join(_MODES)}")
    mode = AllocationMode(mode_text)
    return DeviceSubRequest(
        name=name,
        device_class=device_class,
        allocation_mode=mode,
        count=_count(raw, mode, where),
        selectors=_selectors(raw, where),
        admin_access=boolean(raw, "adminAccess", where),
    )


def _request_name(raw: Mapping[str, Any], where: str, seen: set[str]) -> str:
    name = string(raw, "name", where=where)
    if not name:
        raise FieldError(f"{where}name", "missing")
    if name in seen:
        raise FieldError(f"{where}name", f"{got(name)} is used by another request of this claim")
    seen.add(name)
    return name


def _request(raw: Mapping[str, Any], where: str, seen: set[str]) -> DeviceRequest:
    name = _request_name(raw, where, seen)
    exactly = raw.get("exactly")
    first_available = raw.get("firstAvailable")
    if (exactly is None) == (first_available is None):
        raise FieldError(where.rstrip("."), "exactly one of exactly and firstAvailable must be set")
    if exactly is not None:
        return DeviceRequest(
            name, exactly=_subrequest(field_map(raw, "exactly", where), name, f"{where}exactly.")
        )
    alternatives = []
    sub_names: set[str] = set()
    for i, sub in enumerate(field_maps(raw, "firstAvailable", where)):
        at = f"{where}firstAvailable[{i}]."
        sub_name = _request_name(sub, at, sub_names)
        alternatives.append(_subrequest(sub, f"{name}/{sub_name}", at))
    if not alternatives:
        raise FieldError(f"{where}firstAvailable", "must not be empty")
    return DeviceRequest(name, first_available=tuple(alternatives))


def _claim_spec(spec: Mapping[str, Any], where: str) -> ClaimSpec:
    devices = field_map(spec, "devices", where)
    at = f"{where}devices."
    seen: set[str] = set()
    requests = tuple(
        _request(r, f"{at}requests[{i}].", seen) for i, r in enumerate(field_maps(devices, "requests", at))
    )
    constraints = []
    for i, c in enumerate(field_maps(devices, "constraints", at)):
        cat = f"{at}constraints[{i}]."
        names = field_list(c, "requests", cat)
        for j, n in enumerate(names):
            if n not in seen:
                raise FieldError(f"{cat}requests[{j}]", f"{got(n)} is not a request of this claim")
        constraints.append(
            DeviceConstraint(
                requests=tuple(names),
                match_attribute=string(c, "matchAttribute", where=cat),
                distinct_attribute=string(c, "distinctAttribute", where=cat),
            )
        )
    return ClaimSpec(requests, tuple(constraints))


def _deviceclass(obj: Mapping[str, Any]) -> DeviceClass:
    meta = field_map(obj, "metadata")
    spec = field_map(obj, "spec")
    return DeviceClass(
        name=object_name(meta),
        selectors=_selectors(spec, "spec."),
        extended_resource_name=string(spec, "extendedResourceName", where="spec."),
    )


def deviceclass_from_dict(obj: Mapping[str, Any]) -> DeviceClass:
    """A ``resource.k8s.io/v1`` DeviceClass."""
    return guard(obj, _deviceclass)


def _allocated_nodes(allocation: Mapping[str, Any]) -> tuple[str, ...]:
    """Nodes named by an allocation's node selector (``matchFields metadata.name In [...]``, which is how the
    scheduler pins a node-local device); empty when the devices are reachable from many nodes."""
    selector = field_map(allocation, "nodeSelector", "status.allocation.")
    nodes: list[str] = []
    where = "status.allocation.nodeSelector."
    for i, term in enumerate(field_maps(selector, "nodeSelectorTerms", where)):
        for j, field in enumerate(field_maps(term, "matchFields", f"{where}nodeSelectorTerms[{i}].")):
            if field.get("key") == "metadata.name" and field.get("operator") == "In":
                at = f"{where}nodeSelectorTerms[{i}].matchFields[{j}]."
                nodes.extend(str(v) for v in field_list(field, "values", at))
    return tuple(sorted(set(nodes)))


def _resourceclaim(obj: Mapping[str, Any]) -> ResourceClaim:
    meta = field_map(obj, "metadata")
    status = field_map(obj, "status")
    allocation = status.get("allocation")
    devices: tuple[str, ...] = ()
    if allocation is not None:
        allocation = field_map(status, "allocation", "status.")
        results = field_maps(
            field_map(allocation, "devices", "status.allocation."), "results", "status.allocation.devices."
        )
        devices = tuple(f"{r.get('driver', '')}/{r.get('pool', '')}/{r.get('device', '')}" for r in results)
    reserved = field_maps(status, "reservedFor", "status.")
    return ResourceClaim(
        namespace=string(meta, "namespace", "default", "metadata."),
        name=object_name(meta),
        spec=_claim_spec(field_map(obj, "spec"), "spec."),
        allocated=allocation is not None,
        allocated_nodes=_allocated_nodes(allocation) if allocation is not None else (),
        reserved_for=tuple(str(r.get("name") or "") for r in reserved if r.get("resource", "pods") == "pods"),
        devices=devices,
    )


def resourceclaim_from_dict(obj: Mapping[str, Any]) -> ResourceClaim:
    """A ``resource.k8s.io/v1`` ResourceClaim."""
    return guard(obj, _resourceclaim)


def _template(obj: Mapping[str, Any]) -> ResourceClaimTemplate:
    meta = field_map(obj, "metadata")
    spec = field_map(obj, "spec")
    return ResourceClaimTemplate(
        namespace=string(meta, "namespace", "default", "metadata."),
        name=object_name(meta),
        spec=_claim_spec(field_map(spec, "spec", "spec."), "spec.spec."),
    )


def resourceclaimtemplate_from_dict(obj: Mapping[str, Any]) -> ResourceClaimTemplate:
    """A ``resource.k8s.io/v1`` ResourceClaimTemplate."""
    return guard(obj, _template)


def _pod_claims(obj: Mapping[str, Any]) -> tuple[PodClaim, ...]:
    spec = field_map(obj, "spec")
    generated: dict[str, str] = {}
    for s in field_maps(field_map(obj, "status"), "resourceClaimStatuses", "status."):
        if s.get("resourceClaimName"):
            generated[str(s.get("name") or "")] = str(s["resourceClaimName"])
    out = []
    names: set[str] = set()
    for i, raw in enumerate(field_maps(spec, "resourceClaims", "spec.")):
        at = f"spec.resourceClaims[{i}]."
        name = _request_name(raw, at, names)
        claim = string(raw, "resourceClaimName", where=at)
        template = string(raw, "resourceClaimTemplateName", where=at)
        if bool(claim) == bool(template):
            raise FieldError(
                at.rstrip("."), "exactly one of resourceClaimName and resourceClaimTemplateName must be set"
            )
        out.append(PodClaim(name, claim, template, generated.get(name, "") if template else ""))
    return tuple(out)


def pod_claims_of(obj: Mapping[str, Any]) -> tuple[PodClaim, ...]:
    """As :func:`pod_claims`, raising FieldError for the caller's own guard (a pod being converted)."""
    spec = obj.get("spec") if isinstance(obj, Mapping) else None
    if isinstance(spec, Mapping) and not spec.get("resourceClaims"):
        return ()
    return _pod_claims(obj)


def pod_claims(obj: Mapping[str, Any]) -> tuple[PodClaim, ...]:
    """The claims a ``v1.Pod`` JSON object names in ``spec.resourceClaims`` (empty for most pods)."""
    spec = obj.get("spec") if isinstance(obj, Mapping) else None
    if isinstance(spec, Mapping) and not spec.get("resourceClaims"):
        return ()  # the common case, kept cheap for 100,000-pod lists
    return guard(obj, _pod_claims)
