"""``autoscaling.x-k8s.io`` ProvisioningRequests and CapacityBuffers, and core/v1 PodTemplates, as JSON dicts
→ the decision core's model; and the status bodies tidal writes back on the first two.

A PodTemplate is read as the pod it describes (through the pod decoder, so a template reads exactly as
its pods will). From the API server an object is never dropped: what cannot be read is kept, marked
``unreadable`` (a request is then answered ``Failed``, a buffer ``ReadyForProvisioning=False``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from typing import Any

from autoscaler.core.model import (
    CapacityBuffer,
    PodSet,
    PodTemplate,
    ProvisioningRequest,
    ScalableRef,
    StatusCondition,
    Workload,
)
from autoscaler.core.quantity import QuantityMemo
from autoscaler.runtime.kube.convert import pod_from_dict
from autoscaler.runtime.kube.fields import (
    ConversionError,
    FieldError,
    field_map,
    field_maps,
    got,
    guard,
    integer,
    object_name,
    parse_timestamp,
    str_map,
    string,
)

__all__ = [
    "AUTOSCALING_GROUP",
    "buffer_status",
    "capacitybuffer_from_api",
    "capacitybuffer_from_dict",
    "podtemplate_from_api",
    "provisioningrequest_from_api",
    "provisioningrequest_from_dict",
    "request_status",
]

AUTOSCALING_GROUP = "autoscaling.x-k8s.io"
INT32_MAX = 2**31 - 1


def _meta(obj: Mapping[str, Any]) -> tuple[str, str, str, float, int]:
    meta = field_map(obj, "metadata")
    return (
        string(meta, "namespace", "default", "metadata."),
        object_name(meta),
        str(meta.get("uid") or ""),
        parse_timestamp(meta.get("creationTimestamp"), "metadata.creationTimestamp") or 0.0,
        integer(meta, "generation", 0, "metadata."),
    )


def _conditions(obj: Mapping[str, Any]) -> tuple[StatusCondition, ...]:
    status = field_map(obj, "status")
    out = []
    for i, c in enumerate(field_maps(status, "conditions", "status.")):
        where = f"status.conditions[{i}]."
        out.append(
            StatusCondition(
                type=string(c, "type", "", where),
                status=string(c, "status", "Unknown", where),
                reason=string(c, "reason", "", where),
                message=string(c, "message", "", where),
                last_transition=parse_timestamp(c.get("lastTransitionTime"), where + "lastTransitionTime"),
                observed_generation=integer(c, "observedGeneration", 0, where),
            )
        )
    return tuple(out)


def _version(obj: Mapping[str, Any]) -> str:
    api = obj.get("apiVersion")
    return (
        api.rsplit("/", 1)[-1] if isinstance(api, str) and api.startswith(AUTOSCALING_GROUP + "/") else "v1"
    )


# --- PodTemplate -----------------------------------------------------------------------------------------


def podtemplate_from_dict(obj: Mapping[str, Any], memo: QuantityMemo | None = None) -> PodTemplate:
    """A ``v1.PodTemplate``: its ``template`` read as a pending pod of the template's namespace."""

    def read(o: Mapping[str, Any]) -> PodTemplate:
        namespace, name, _, _created, generation = _meta(o)
        template = field_map(o, "template")
        meta = dict(field_map(template, "metadata", "template."))
        meta.update(namespace=namespace, name=str(meta.get("name") or name))
        pod = {
            "metadata": meta,
            "spec": field_map(template, "spec", "template."),
            "status": {"phase": "Pending"},
        }
        try:
            found = pod_from_dict(pod, memo)
        except ConversionError as err:
            raise FieldError("template", str(err).split(": ", 1)[-1]) from None
        return PodTemplate(namespace, name, found, generation=generation)

    return guard(obj, read)


def podtemplate_from_api(obj: Mapping[str, Any], memo: QuantityMemo | None = None) -> PodTemplate:
    """A PodTemplate from the API server: one that cannot be read is kept, with why."""
    try:
        return podtemplate_from_dict(obj, memo)
    except ConversionError as err:
        meta = field_map(obj, "metadata")
        return PodTemplate(str(meta.get("namespace") or "default"), object_name(meta), None, str(err))


# --- Deployments and StatefulSets (a CapacityBuffer's scalableRef) -------------------------------------


def workload_from_api(obj: Mapping[str, Any], memo: QuantityMemo | None = None) -> Workload:
    """An ``apps/v1`` Deployment or StatefulSet: its desired replicas and its template's pod (a template that
    cannot be read is kept, with why)."""

    def read(o: Mapping[str, Any]) -> Workload:
        namespace, name, _, _, _ = _meta(o)
        spec = field_map(o, "spec")
        replicas = integer(spec, "replicas", 1, "spec.")
        template = field_map(spec, "template", "spec.")
        meta = dict(field_map(template, "metadata", "spec.template."))
        meta.update(namespace=namespace, name=name)
        kind = string(o, "kind", "", "") or "Deployment"
        pod = {"metadata": meta, "spec": field_map(template, "spec", "spec.template."), "status": {}}
        try:
            return Workload(namespace, kind, name, replicas, pod_from_dict(pod, memo))
        except ConversionError as err:
            return Workload(namespace, kind, name, replicas, None, str(err).split(": ", 1)[-1])

    return guard(obj, read)


def deployment_from_api(obj: Mapping[str, Any], memo: QuantityMemo | None = None) -> Workload:
    """A Deployment as its informer lists it (list items carry no ``kind``)."""
    return workload_from_api({**obj, "kind": "Deployment"}, memo)


def statefulset_from_api(obj: Mapping[str, Any], memo: QuantityMemo | None = None) -> Workload:
    """A StatefulSet as its informer lists it."""
    return workload_from_api({**obj, "kind": "StatefulSet"}, memo)


# --- ProvisioningRequest --------------------------------------------------------------------------------


def _provisioningrequest(obj: Mapping[str, Any]) -> ProvisioningRequest:
    namespace, name, uid, created, generation = _meta(obj)
    spec = field_map(obj, "spec")
    sets = []
    for i, s in enumerate(field_maps(spec, "podSets", "spec.")):
        ref = field_map(s, "podTemplateRef", f"spec.podSets[{i}].")
        count = integer(s, "count", 0, f"spec.podSets[{i}].")
        if count < 1 or count > INT32_MAX:
            raise FieldError(f"spec.podSets[{i}].count", f"{count} is not between 1 and {INT32_MAX}")
        template = string(ref, "name", "", f"spec.podSets[{i}].podTemplateRef.")
        if not template:
            raise FieldError(f"spec.podSets[{i}].podTemplateRef.name", "missing")
        sets.append(PodSet(template, count))
    if not sets:
        raise FieldError("spec.podSets", "no pod set")
    class_name = string(spec, "provisioningClassName", "", "spec.")
    if not class_name:
        raise FieldError("spec.provisioningClassName", "missing")
    return ProvisioningRequest(
        namespace=namespace,
        name=name,
        class_name=class_name,
        pod_sets=tuple(sets),
        parameters=str_map(spec, "parameters", "spec."),
        conditions=_conditions(obj),
        uid=uid,
        created=created,
        generation=generation,
        version=_version(obj),
    )


def provisioningrequest_from_dict(obj: Mapping[str, Any]) -> ProvisioningRequest:
    """A ProvisioningRequest (v1 or v1beta1: their fields are the same)."""
    return guard(obj, _provisioningrequest)


def provisioningrequest_from_api(obj: Mapping[str, Any]) -> ProvisioningRequest:
    """A ProvisioningRequest from the API server: one that cannot be read is kept, marked unreadable (it
    is answered Failed, with why)."""
    try:
        return provisioningrequest_from_dict(obj)
    except ConversionError as err:
        meta = field_map(obj, "metadata")
        raw = obj.get("spec")
        spec: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        generation = meta.get("generation")
        conditions: tuple[StatusCondition, ...] = ()
        with contextlib.suppress(FieldError, ValueError):
            conditions = _conditions(obj)
        return ProvisioningRequest(
            namespace=str(meta.get("namespace") or "default"),
            name=object_name(meta),
            class_name=str(spec.get("provisioningClassName") or ""),
            conditions=conditions,
            uid=str(meta.get("uid") or ""),
            generation=generation if type(generation) is int else 0,
            version=_version(obj),
            unreadable=str(err).split(": ", 1)[-1],
        )


# --- CapacityBuffer -------------------------------------------------------------------------------------


def _optional_int(spec: Mapping[str, Any], key: str) -> int | None:
    if spec.get(key) is None:
        return None
    value = integer(spec, key, 0, "spec.")
    if value < 0 or value > INT32_MAX:
        raise FieldError(f"spec.{key}", f"{value} is not between 0 and {INT32_MAX}")
    return value


def _capacitybuffer(obj: Mapping[str, Any]) -> CapacityBuffer:
    namespace, name, uid, created, generation = _meta(obj)
    spec = field_map(obj, "spec")
    template = ""
    if spec.get("podTemplateRef") is not None:
        template = string(field_map(spec, "podTemplateRef", "spec."), "name", "", "spec.podTemplateRef.")
    scalable = None
    if spec.get("scalableRef") is not None:
        ref = field_map(spec, "scalableRef", "spec.")
        scalable = ScalableRef(
            kind=string(ref, "kind", "", "spec.scalableRef."),
            name=string(ref, "name", "", "spec.scalableRef."),
            api_group=string(ref, "apiGroup", "", "spec.scalableRef."),
        )
    limits = {}
    for key, value in field_map(spec, "limits", "spec.").items():
        if type(value) not in (str, int, float):
            raise FieldError(f"spec.limits.{key}", f"expected a quantity, got {got(value)}")
        limits[str(key)] = str(value)
    status = field_map(obj, "status")
    status_template = ""
    if status.get("podTemplateRef") is not None:
        status_template = string(
            field_map(status, "podTemplateRef", "status."), "name", "", "status.podTemplateRef."
        )
    return CapacityBuffer(
        namespace=namespace,
        name=name,
        template=template,
        status_replicas=None if status.get("replicas") is None else integer(status, "replicas", 0, "status."),
        status_template=status_template,
        scalable=scalable,
        replicas=_optional_int(spec, "replicas"),
        percentage=_optional_int(spec, "percentage"),
        limits=limits,
        strategy=string(spec, "provisioningStrategy", "buffer.x-k8s.io/active-capacity", "spec."),
        conditions=_conditions(obj),
        uid=uid,
        created=created,
        generation=generation,
    )


def capacitybuffer_from_dict(obj: Mapping[str, Any]) -> CapacityBuffer:
    """A CapacityBuffer (v1beta1)."""
    return guard(obj, _capacitybuffer)


def capacitybuffer_from_api(obj: Mapping[str, Any]) -> CapacityBuffer:
    """A CapacityBuffer from the API server: one that cannot be read is kept, marked unreadable."""
    try:
        return capacitybuffer_from_dict(obj)
    except ConversionError as err:
        meta = field_map(obj, "metadata")
        return CapacityBuffer(
            namespace=str(meta.get("namespace") or "default"),
            name=object_name(meta),
            uid=str(meta.get("uid") or ""),
            unreadable=str(err).split(": ", 1)[-1],
        )


# --- status written back ----------------------------------------------------------------------------------


def rfc3339(ts: float) -> str:
    """Epoch seconds as the RFC 3339 UTC time a ``metav1.Time`` is written in."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def _condition_dicts(conditions: tuple[StatusCondition, ...], now: float) -> list[dict[str, Any]]:
    return [
        {
            "type": c.type,
            "status": c.status,
            "reason": c.reason,
            "message": c.message,
            "lastTransitionTime": rfc3339(c.last_transition if c.last_transition is not None else now),
            "observedGeneration": c.observed_generation,
        }
        for c in conditions
    ]


def request_status(conditions: tuple[StatusCondition, ...], now: float) -> dict[str, Any]:
    """The ``status`` of a ProvisioningRequest with these conditions (a merge patch replaces the list)."""
    return {"conditions": _condition_dicts(conditions, now)}


def buffer_status(
    conditions: tuple[StatusCondition, ...], now: float, *, replicas: int | None, template: str, strategy: str
) -> dict[str, Any]:
    """The ``status`` of a CapacityBuffer: what was resolved, and its conditions."""
    status: dict[str, Any] = {
        "conditions": _condition_dicts(conditions, now),
        "provisioningStrategy": strategy,
    }
    if replicas is not None:
        status["replicas"] = replicas
    if template:
        status["podTemplateRef"] = {"name": template}
    return status
