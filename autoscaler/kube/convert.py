"""Kubernetes JSON (as dicts) → the decision core's model.

Both the offline snapshot loader and the informers decode raw JSON straight into these values; generated
``V1Pod`` objects are never built (they are slow and not needed). Every error names the object and field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from autoscaler.model import (
    Condition,
    DaemonSet,
    DisruptionBudget,
    Node,
    OwnerRef,
    Pod,
    PodGroup,
    Queue,
    QueueLimits,
    Requirement,
    Taint,
    Toleration,
)
from autoscaler.quantity import QuantityError
from autoscaler.resources import EMPTY, Resources

POD_GROUP_ANNOTATION = "pod-group-name"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
KAI_GROUP = "scheduling.run.ai"


class ConversionError(ValueError):
    """A Kubernetes object that cannot be understood; the message names the object and field."""


def parse_time(value: object) -> float | None:
    """RFC 3339 timestamp → epoch seconds (``None`` when absent)."""
    if value in (None, ""):
        return None
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a timestamp")
    text = value.replace("Z", "+00:00")
    return datetime.fromisoformat(text).timestamp()


def _map(obj: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = obj.get(key)
    if value is None:
        return {}
    if type(value) is not dict and not isinstance(value, Mapping):
        raise ValueError(f"{key}: expected a map, got {type(value).__name__}")
    return value


def _list(obj: Mapping[str, Any], key: str) -> Sequence[Any]:
    value = obj.get(key)
    if value is None:
        return ()
    if type(value) is not list:
        raise ValueError(f"{key}: expected a list, got {type(value).__name__}")
    return value


def _str_map(obj: Mapping[str, Any], key: str) -> Mapping[str, str]:
    raw = _map(obj, key)
    if type(raw) is dict and all(type(v) is str for v in raw.values()):
        return raw  # JSON maps of strings are used as they are: nothing in tidal mutates them
    return {str(k): "" if v is None else str(v) for k, v in raw.items()}


def _ident(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    kind = obj.get("kind", "object")
    name = meta.get("name", "?") if isinstance(meta, Mapping) else "?"
    ns = meta.get("namespace") if isinstance(meta, Mapping) else None
    return f"{kind} {ns}/{name}" if ns else f"{kind} {name}"


def _guard(obj: Mapping[str, Any], fn: Any) -> Any:
    try:
        return fn(obj)
    except (ValueError, TypeError, KeyError, AttributeError, QuantityError) as err:
        raise ConversionError(f"{_ident(obj)}: {err}") from None


def requirement(raw: Mapping[str, Any]) -> Requirement:
    """One ``matchExpressions`` entry."""
    op = raw.get("operator", "")
    if op not in ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"):
        raise ValueError(f"operator {op!r} is not one of In, NotIn, Exists, DoesNotExist, Gt, Lt")
    return Requirement(str(raw["key"]), op, tuple(str(v) for v in raw.get("values") or ()))


def required_affinity(spec: Mapping[str, Any]) -> tuple[tuple[Requirement, ...], ...]:
    """``affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution`` as OR-of-AND terms."""
    node_affinity = _map(_map(spec, "affinity"), "nodeAffinity")
    required = _map(node_affinity, "requiredDuringSchedulingIgnoredDuringExecution")
    terms = []
    for term in _list(required, "nodeSelectorTerms"):
        reqs = [requirement(e) for e in term.get("matchExpressions") or ()]
        # matchFields only supports metadata.name; a new node's name is unknown, so keep it as a label key.
        reqs += [requirement({**e, "key": "metadata.name"}) for e in term.get("matchFields") or ()]
        terms.append(tuple(reqs))
    return tuple(terms)


def tolerations(spec: Mapping[str, Any]) -> tuple[Toleration, ...]:
    return tuple(
        Toleration(
            key=t.get("key") or "",
            operator=t.get("operator") or "Equal",
            value=t.get("value") or "",
            effect=t.get("effect") or "",
        )
        for t in _list(spec, "tolerations")
    )


def _container_requests(container: Mapping[str, Any], field: str) -> Resources:
    resources = _map(container, "resources")
    requests = resources.get("requests")
    limits = resources.get("limits")
    parsed = Resources.parse(requests, field=f"{field}.resources.requests") if requests else EMPTY
    if limits:
        # The API server defaults a missing request to its limit.
        parsed_limits = Resources.parse(limits, field=f"{field}.resources.limits")
        missing = {k: v for k, v in parsed_limits.items() if k not in parsed}
        if missing:
            parsed = parsed + missing
    return parsed


def pod_requests(spec: Mapping[str, Any]) -> Resources:
    """max(sum of containers + restartable init containers, largest init container) + overhead."""
    containers = _list(spec, "containers")
    if len(containers) == 1 and not spec.get("initContainers") and not spec.get("overhead"):
        return _container_requests(containers[0], "spec.containers[0]")  # the common case, kept cheap
    total = EMPTY
    for i, c in enumerate(containers):
        total = total + _container_requests(c, f"spec.containers[{i}]")
    init_peak = EMPTY
    sidecars = EMPTY
    for i, c in enumerate(_list(spec, "initContainers")):
        req = _container_requests(c, f"spec.initContainers[{i}]")
        if c.get("restartPolicy") == "Always":
            # A sidecar keeps running, so it adds to everything that starts after it.
            sidecars = sidecars + req
            init_peak = init_peak.maximum(sidecars)
        else:
            init_peak = init_peak.maximum(req + sidecars)
    total = (total + sidecars).maximum(init_peak)
    overhead = spec.get("overhead")
    if overhead:
        total = total + Resources.parse(overhead, field="spec.overhead")
    return total


def owner(meta: Mapping[str, Any]) -> OwnerRef | None:
    refs = _list(meta, "ownerReferences")
    chosen = next((r for r in refs if r.get("controller")), refs[0] if refs else None)
    if chosen is None:
        return None
    return OwnerRef(
        kind=str(chosen.get("kind", "")),
        name=str(chosen.get("name", "")),
        controller=bool(chosen.get("controller")),
    )


def _pod(obj: Mapping[str, Any]) -> Pod:
    meta = _map(obj, "metadata")
    spec = _map(obj, "spec")
    status = _map(obj, "status")
    scheduled = None
    for cond in _list(status, "conditions"):
        if cond.get("type") == "PodScheduled":
            scheduled = Condition(
                status=str(cond.get("status", "")),
                reason=str(cond.get("reason") or ""),
                message=str(cond.get("message") or ""),
                last_transition=parse_time(cond.get("lastTransitionTime")),
            )
    annotations = _str_map(meta, "annotations")
    local = any(
        ("emptyDir" in v and (v.get("emptyDir") or {}).get("medium") != "Memory") or "hostPath" in v
        for v in _list(spec, "volumes")
    )
    return Pod(
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta["name"]),
        uid=str(meta.get("uid") or ""),
        created=parse_time(meta.get("creationTimestamp")) or 0.0,
        labels=_str_map(meta, "labels"),
        annotations=annotations,
        scheduler_name=str(spec.get("schedulerName") or "default-scheduler"),
        node_name=str(spec.get("nodeName") or ""),
        phase=str(status.get("phase") or "Pending"),
        scheduling_gates=tuple(str(g.get("name", "")) for g in _list(spec, "schedulingGates")),
        scheduled=scheduled,
        requests=pod_requests(spec),
        node_selector=_str_map(spec, "nodeSelector"),
        affinity=required_affinity(spec),
        tolerations=tolerations(spec),
        owner=owner(meta),
        priority=int(spec.get("priority") or 0),
        local_storage=local,
        mirror=MIRROR_ANNOTATION in annotations,
        terminating=meta.get("deletionTimestamp") is not None,
        grace_period_s=int(spec.get("terminationGracePeriodSeconds") or 30),
    )


def pod_from_dict(obj: Mapping[str, Any]) -> Pod:
    """A ``v1.Pod`` JSON object."""
    result: Pod = _guard(obj, _pod)
    return result


def _node(obj: Mapping[str, Any]) -> Node:
    meta = _map(obj, "metadata")
    spec = _map(obj, "spec")
    status = _map(obj, "status")
    ready = False
    ready_since = None
    for cond in _list(status, "conditions"):
        if cond.get("type") == "Ready":
            ready = cond.get("status") == "True"
            ready_since = parse_time(cond.get("lastTransitionTime")) if ready else None
    return Node(
        name=str(meta["name"]),
        uid=str(meta.get("uid") or ""),
        created=parse_time(meta.get("creationTimestamp")) or 0.0,
        labels=_str_map(meta, "labels"),
        annotations=_str_map(meta, "annotations"),
        taints=tuple(
            Taint(str(t["key"]), str(t.get("value") or ""), str(t.get("effect") or "NoSchedule"))
            for t in _list(spec, "taints")
        ),
        capacity=Resources.parse(status.get("capacity"), field="status.capacity"),
        allocatable=Resources.parse(status.get("allocatable"), field="status.allocatable"),
        provider_id=str(spec.get("providerID") or ""),
        unschedulable=bool(spec.get("unschedulable")),
        ready=ready,
        ready_since=ready_since,
        deleting=meta.get("deletionTimestamp") is not None,
    )


def node_from_dict(obj: Mapping[str, Any]) -> Node:
    """A ``v1.Node`` JSON object."""
    result: Node = _guard(obj, _node)
    return result


def label_selector(raw: Mapping[str, Any] | None) -> tuple[Requirement, ...] | None:
    """A ``LabelSelector`` as requirements; ``None`` for an absent selector (selects nothing)."""
    if raw is None:
        return None
    reqs = [Requirement(str(k), "In", (str(v),)) for k, v in (raw.get("matchLabels") or {}).items()]
    reqs += [requirement(e) for e in raw.get("matchExpressions") or ()]
    return tuple(reqs)


def _pdb(obj: Mapping[str, Any]) -> DisruptionBudget:
    meta = _map(obj, "metadata")
    return DisruptionBudget(
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta["name"]),
        selector=label_selector(_map(obj, "spec").get("selector")),
        disruptions_allowed=int(_map(obj, "status").get("disruptionsAllowed") or 0),
    )


def pdb_from_dict(obj: Mapping[str, Any]) -> DisruptionBudget:
    """A ``policy/v1`` PodDisruptionBudget."""
    result: DisruptionBudget = _guard(obj, _pdb)
    return result


def _daemonset(obj: Mapping[str, Any]) -> DaemonSet:
    meta = _map(obj, "metadata")
    template_spec = _map(_map(_map(obj, "spec"), "template"), "spec")
    return DaemonSet(
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta["name"]),
        requests=pod_requests(template_spec),
        node_selector=_str_map(template_spec, "nodeSelector"),
        affinity=required_affinity(template_spec),
        tolerations=tolerations(template_spec),
    )


def daemonset_from_dict(obj: Mapping[str, Any]) -> DaemonSet:
    """An ``apps/v1`` DaemonSet (its pod template is what every new node will run)."""
    result: DaemonSet = _guard(obj, _daemonset)
    return result


def _podgroup(obj: Mapping[str, Any]) -> PodGroup:
    meta = _map(obj, "metadata")
    spec = _map(obj, "spec")
    min_member = int(spec.get("minMember") or 1)
    if min_member < 1:
        raise ValueError(f"spec.minMember: {min_member} is below 1")
    return PodGroup(
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta["name"]),
        min_member=min_member,
        queue=str(spec.get("queue") or ""),
    )


def podgroup_from_dict(obj: Mapping[str, Any]) -> PodGroup:
    """A KAI PodGroup."""
    result: PodGroup = _guard(obj, _podgroup)
    return result


def _limit(value: object) -> int | None:
    if value is None:
        return None
    number = float(str(value))
    return None if number < 0 else int(number)


def _queue(obj: Mapping[str, Any]) -> Queue:
    meta = _map(obj, "metadata")
    spec = _map(obj, "spec")
    gpu = _map(_map(spec, "resources"), "gpu")
    return Queue(
        name=str(meta["name"]),
        parent=str(spec.get("parentQueue") or ""),
        gpu=QueueLimits(
            quota=_limit(gpu.get("quota")),
            limit=_limit(gpu.get("limit")),
            over_quota_weight=int(gpu.get("overQuotaWeight") or 1),
        ),
        priority=int(spec.get("priority") or 0),
    )


def queue_from_dict(obj: Mapping[str, Any]) -> Queue:
    """A KAI Queue."""
    result: Queue = _guard(obj, _queue)
    return result
