"""Kubernetes JSON (as dicts) → the decision core's model.

Both the offline snapshot loader and the informers decode raw JSON straight into these values; generated
``V1Pod`` objects are never built (they are slow and not needed). Every error names the object, the field
path (``spec.tolerations[0]``) and the value. The checks that make this so are ``type(x) is dict`` tests on
the way and, for anything rarer, a path added in the ``except`` branch: decoding 100,000 pods stays cheap.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

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
OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
TOLERATION_OPERATORS = ("Exists", "Equal")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
INT32_MAX = 2**31 - 1

T = TypeVar("T")


class ConversionError(ValueError):
    """A Kubernetes object that cannot be understood; the message names the object, field and value."""


class FieldError(ValueError):
    """One field of an object is wrong: ``path`` (``spec.tolerations[0]``) and what is wrong with it."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(path, problem)
        self.path = path
        self.problem = problem

    def __str__(self) -> str:
        return f"{self.path}: {self.problem}" if self.path else self.problem

    def under(self, prefix: str) -> FieldError:
        """The same error seen from the object that contains the field (``prefix`` is its path)."""
        if not self.path:
            return FieldError(prefix, self.problem)
        sep = "" if self.path.startswith("[") else "."
        return FieldError(f"{prefix}{sep}{self.path}", self.problem)


def _got(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# --- time -------------------------------------------------------------------------------------------


def _epoch(value: str) -> float | None:
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        return None  # RFC 3339 always carries Z or an offset; a local time would depend on the machine
    return parsed.timestamp()


def parse_time(value: object) -> float | None:
    """RFC 3339 timestamp → epoch seconds; ``None`` when absent *or not a timestamp* (never raises).

    For values tidal reads back from its own annotations (``tidal.dev/unneeded-since``) and leases, where a
    mangled value must mean "start counting again", not stop a reconcile.
    """
    if type(value) is not str or not value:
        return None
    return _epoch(value)


def parse_timestamp(value: object, field: str) -> float | None:
    """A timestamp field of an object: ``None`` when absent; anything else but RFC 3339 is a FieldError."""
    if value is None or value == "":
        return None
    if type(value) is str:
        epoch = _epoch(value)
        if epoch is not None:
            return epoch
    raise FieldError(field, f"{_got(value)} is not an RFC 3339 time (e.g. 2026-11-20T10:00:00Z)")


# --- fields -----------------------------------------------------------------------------------------


def _map(obj: Mapping[str, Any], key: str, where: str = "") -> Mapping[str, Any]:
    value = obj.get(key)
    if value is None:
        return {}
    if type(value) is not dict and not isinstance(value, Mapping):
        raise FieldError(where + key, f"expected a map, got {_got(value)}")
    return value


def _list(obj: Mapping[str, Any], key: str, where: str = "") -> Sequence[Any]:
    value = obj.get(key)
    if value is None:
        return ()
    if type(value) is not list:
        raise FieldError(where + key, f"expected a list, got {_got(value)}")
    return value


def _maps(obj: Mapping[str, Any], key: str, where: str = "") -> Sequence[Mapping[str, Any]]:
    """A list whose entries are all maps (containers, tolerations, conditions, …)."""
    value = obj.get(key)
    if value is None:
        return ()
    if type(value) is list:
        for entry in value:
            if type(entry) is not dict:
                return _checked_maps(value, key, where)
        return value  # the JSON case, checked with one type test per entry
    return _checked_maps(value, key, where)


def _checked_maps(value: object, key: str, where: str) -> Sequence[Mapping[str, Any]]:
    if type(value) is not list:
        raise FieldError(where + key, f"expected a list, got {_got(value)}")
    for i, entry in enumerate(value):
        if not isinstance(entry, Mapping):
            raise FieldError(f"{where}{key}[{i}]", f"expected a map, got {_got(entry)}")
    return value


def _str_map(obj: Mapping[str, Any], key: str, where: str = "") -> Mapping[str, str]:
    raw = _map(obj, key, where)
    if type(raw) is dict and all(type(v) is str for v in raw.values()):
        return raw  # JSON maps of strings are used as they are: nothing in tidal mutates them
    out: dict[str, str] = {}
    for k, v in raw.items():
        # The API server refuses a number or a bool here (`tier: 1` in YAML), so tidal does not guess a string.
        if v is not None and type(v) is not str:
            raise FieldError(f"{where}{key}.{k}", f"expected a string, got {_got(v)}")
        out[str(k)] = v or ""
    return out


def _string(obj: Mapping[str, Any], key: str, default: str = "", where: str = "") -> str:
    """A string field; absent or empty is ``default``, any other type a FieldError (the API server refuses a
    number or a bool where a string goes, so tidal does not guess one)."""
    value = obj.get(key)
    if type(value) is str:
        return value or default
    if value is None:
        return default
    raise FieldError(where + key, f"expected a string, got {_got(value)}")


def _int(obj: Mapping[str, Any], key: str, default: int, where: str = "") -> int:
    value = obj.get(key)
    if type(value) is int:
        return value
    if value is None:
        return default
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if type(value) is str:
        try:
            return int(value.strip())
        except ValueError:
            pass
    raise FieldError(where + key, f"expected an integer, got {_got(value)}")


def _bool(obj: Mapping[str, Any], key: str, where: str = "") -> bool:
    value = obj.get(key)
    if value is None:
        return False
    if type(value) is not bool:  # bool("false") is True
        raise FieldError(where + key, f"expected true or false, got {_got(value)}")
    return value


def _name(meta: Mapping[str, Any]) -> str:
    name = meta.get("name")
    if type(name) is not str or not name:
        raise FieldError("metadata.name", "missing" if not name else f"expected a string, got {_got(name)}")
    return name


def _ident(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    kind = obj.get("kind", "object") if isinstance(obj, Mapping) else "object"
    name = meta.get("name", "?") if isinstance(meta, Mapping) else "?"
    ns = meta.get("namespace") if isinstance(meta, Mapping) else None
    return f"{kind} {ns}/{name}" if ns and type(ns) is str else f"{kind} {name}"


def _guard(obj: Mapping[str, Any], fn: Callable[[Mapping[str, Any]], T]) -> T:
    if type(obj) is not dict and not isinstance(obj, Mapping):
        raise ConversionError(f"expected a Kubernetes object (a map), got {_got(obj)}")
    try:
        return fn(obj)
    except (FieldError, QuantityError) as err:
        raise ConversionError(f"{_ident(obj)}: {err}") from None
    except KeyError as err:  # not expected: every field above is checked; keep the message useful anyway
        raise ConversionError(f"{_ident(obj)}: field {err.args[0]!r} is missing") from None
    except (ValueError, TypeError, AttributeError) as err:
        raise ConversionError(f"{_ident(obj)}: malformed object ({err})") from None


# --- scheduling constraints ---------------------------------------------------------------------------


def requirement(raw: Mapping[str, Any]) -> Requirement:
    """One ``matchExpressions`` entry (a FieldError's path is relative to the entry)."""
    op = raw.get("operator")
    if op not in OPERATORS:
        raise FieldError("operator", f"{_got(op)} is not one of {', '.join(OPERATORS)}")
    key = raw.get("key")
    if type(key) is not str or not key:
        raise FieldError("key", "missing" if not key else f"expected a string, got {_got(key)}")
    values = _list(raw, "values")
    for i, v in enumerate(values):
        if isinstance(v, (Mapping, list)) or v is None:
            raise FieldError(f"values[{i}]", f"expected a string, got {_got(v)}")
    if op in ("Exists", "DoesNotExist"):
        if values:
            raise FieldError("values", f"must be empty for operator {op}")
    elif not values:
        raise FieldError("values", f"must not be empty for operator {op}")
    elif op in ("Gt", "Lt") and len(values) != 1:
        raise FieldError("values", f"must have exactly one value for operator {op}")
    return Requirement(key, op, tuple(str(v) for v in values))


def _requirements(term: Mapping[str, Any], key: str, where: str) -> list[Requirement]:
    out = []
    for i, e in enumerate(_maps(term, key, where)):
        try:
            out.append(requirement(e))
        except FieldError as err:
            raise err.under(f"{where}{key}[{i}]") from None
    return out


def required_affinity(spec: Mapping[str, Any], where: str = "spec.") -> tuple[tuple[Requirement, ...], ...]:
    """``affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution`` as OR-of-AND terms."""
    affinity = spec.get("affinity")
    if not affinity:
        return ()
    prefix = where + "affinity."
    node_affinity = _map(_map(spec, "affinity", where), "nodeAffinity", prefix)
    prefix += "nodeAffinity."
    required = _map(node_affinity, "requiredDuringSchedulingIgnoredDuringExecution", prefix)
    prefix += "requiredDuringSchedulingIgnoredDuringExecution."
    terms = []
    for i, term in enumerate(_maps(required, "nodeSelectorTerms", prefix)):
        at = f"{prefix}nodeSelectorTerms[{i}]."
        reqs = _requirements(term, "matchExpressions", at)
        # matchFields only supports metadata.name; a new node's name is unknown, so keep it as a label key.
        fields = _requirements(term, "matchFields", at)
        reqs += [Requirement("metadata.name", r.operator, r.values) for r in fields]
        terms.append(tuple(reqs))
    return tuple(terms)


def _toleration(t: Mapping[str, Any]) -> Toleration:
    key = t.get("key") or ""
    operator = t.get("operator") or "Equal"
    value = t.get("value") or ""
    effect = t.get("effect") or ""
    if (
        type(key) is str
        and type(value) is str
        and ((operator == "Exists" and not value) or (operator == "Equal" and key))
        and (not effect or effect in TAINT_EFFECTS)
        and (effect == "NoExecute" or t.get("tolerationSeconds") is None)
    ):
        return Toleration(key, operator, value, effect)
    toleration = Toleration(
        key=_string(t, "key"),
        operator=_string(t, "operator", "Equal"),
        value=_string(t, "value"),
        effect=_string(t, "effect"),
    )
    # Anything else would match no taint, or every taint, depending on how it is compared.
    if toleration.operator not in TOLERATION_OPERATORS:
        raise FieldError("operator", f"{_got(operator)} is not one of {', '.join(TOLERATION_OPERATORS)}")
    if toleration.effect and toleration.effect not in TAINT_EFFECTS:
        raise FieldError("effect", f"{_got(effect)} is not one of {', '.join(TAINT_EFFECTS)}")
    # The API server refuses both: an Equal toleration without a key would match no taint, and an Exists one
    # would ignore its value, so either would tolerate something other than what it says.
    if not toleration.key and toleration.operator != "Exists":
        raise FieldError(
            "operator",
            f"{_got(operator)} must be Exists when key is empty"
            if t.get("operator")
            else "missing (must be Exists when key is empty)",
        )
    if toleration.operator == "Exists" and toleration.value:
        raise FieldError("value", f"{_got(value)} must be empty when operator is Exists")
    # Only a NoExecute taint evicts, so only there can a toleration run out; the API server wants that effect
    # named, even though an empty one would match it.
    if toleration.effect != "NoExecute" and t.get("tolerationSeconds") is not None:
        raise FieldError(
            "effect",
            f"{_got(effect)} must be NoExecute when tolerationSeconds is set"
            if toleration.effect
            else "missing (must be NoExecute when tolerationSeconds is set)",
        )
    return toleration


def tolerations(spec: Mapping[str, Any], where: str = "spec.") -> tuple[Toleration, ...]:
    out = []
    for i, t in enumerate(_maps(spec, "tolerations", where)):
        try:
            out.append(_toleration(t))
        except FieldError as err:
            raise err.under(f"{where}tolerations[{i}]") from None
    return tuple(out)


# --- resources ----------------------------------------------------------------------------------------


def _container_requests(container: Mapping[str, Any], field: str) -> Resources:
    resources = container.get("resources")
    if not resources:
        return EMPTY
    if type(resources) is not dict and not isinstance(resources, Mapping):
        raise FieldError(f"{field}.resources", f"expected a map, got {_got(resources)}")
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


def pod_requests(spec: Mapping[str, Any], where: str = "spec.") -> Resources:
    """max(sum of containers + restartable init containers, largest init container) + overhead."""
    containers = _maps(spec, "containers", where)
    if len(containers) == 1 and not spec.get("initContainers") and not spec.get("overhead"):
        return _container_requests(containers[0], f"{where}containers[0]")  # the common case, kept cheap
    total = EMPTY
    for i, c in enumerate(containers):
        total = total + _container_requests(c, f"{where}containers[{i}]")
    init_peak = EMPTY
    sidecars = EMPTY
    for i, c in enumerate(_maps(spec, "initContainers", where)):
        req = _container_requests(c, f"{where}initContainers[{i}]")
        if c.get("restartPolicy") == "Always":
            # A sidecar keeps running, so it adds to everything that starts after it.
            sidecars = sidecars + req
            init_peak = init_peak.maximum(sidecars)
        else:
            init_peak = init_peak.maximum(req + sidecars)
    total = (total + sidecars).maximum(init_peak)
    overhead = spec.get("overhead")
    if overhead:
        total = total + Resources.parse(overhead, field=f"{where}overhead")
    return total


# --- objects ------------------------------------------------------------------------------------------


def owner(meta: Mapping[str, Any]) -> OwnerRef | None:
    refs = _maps(meta, "ownerReferences", "metadata.")
    chosen = next((r for r in refs if r.get("controller")), refs[0] if refs else None)
    if chosen is None:
        return None
    return OwnerRef(
        kind=str(chosen.get("kind", "")),
        name=str(chosen.get("name", "")),
        controller=bool(chosen.get("controller")),
    )


def _scheduled(status: Mapping[str, Any]) -> Condition | None:
    scheduled = None
    for i, cond in enumerate(_maps(status, "conditions", "status.")):
        if cond.get("type") == "PodScheduled":
            scheduled = Condition(
                status=str(cond.get("status", "")),
                reason=str(cond.get("reason") or ""),
                message=str(cond.get("message") or ""),
                last_transition=parse_timestamp(
                    cond.get("lastTransitionTime"), f"status.conditions[{i}].lastTransitionTime"
                ),
            )
    return scheduled


def _local_storage(spec: Mapping[str, Any]) -> bool:
    """A volume whose data lives on the node's disk (emptyDir not in memory, hostPath)."""
    for i, v in enumerate(_maps(spec, "volumes", "spec.")):
        if "hostPath" in v:
            return True
        if "emptyDir" in v:
            empty_dir = v["emptyDir"]
            if empty_dir is None:
                return True
            if not isinstance(empty_dir, Mapping):
                raise FieldError(f"spec.volumes[{i}].emptyDir", f"expected a map, got {_got(empty_dir)}")
            if empty_dir.get("medium") != "Memory":
                return True
    return False


def _pod(obj: Mapping[str, Any]) -> Pod:
    meta = _map(obj, "metadata")
    spec = _map(obj, "spec")
    status = _map(obj, "status")
    annotations = _str_map(meta, "annotations", "metadata.")
    return Pod(
        namespace=_string(meta, "namespace", "default", "metadata."),
        name=_name(meta),
        uid=str(meta.get("uid") or ""),
        created=parse_timestamp(meta.get("creationTimestamp"), "metadata.creationTimestamp") or 0.0,
        labels=_str_map(meta, "labels", "metadata."),
        annotations=annotations,
        scheduler_name=str(spec.get("schedulerName") or "default-scheduler"),
        node_name=str(spec.get("nodeName") or ""),
        phase=_string(status, "phase", "Pending", "status."),
        scheduling_gates=tuple(str(g.get("name", "")) for g in _maps(spec, "schedulingGates", "spec.")),
        scheduled=_scheduled(status),
        requests=pod_requests(spec),
        node_selector=_str_map(spec, "nodeSelector", "spec."),
        affinity=required_affinity(spec),
        tolerations=tolerations(spec),
        owner=owner(meta),
        priority=_int(spec, "priority", 0, "spec."),
        local_storage=_local_storage(spec),
        mirror=MIRROR_ANNOTATION in annotations,
        terminating=meta.get("deletionTimestamp") is not None,
        grace_period_s=_int(spec, "terminationGracePeriodSeconds", 30, "spec."),
    )


def pod_from_dict(obj: Mapping[str, Any]) -> Pod:
    """A ``v1.Pod`` JSON object."""
    return _guard(obj, _pod)


def _taint(t: Mapping[str, Any]) -> Taint:
    key = t.get("key")
    if type(key) is not str or not key:
        raise FieldError("key", "missing" if not key else f"expected a string, got {_got(key)}")
    # Unlike a toleration's, a taint's effect is required: reading a missing one as NoSchedule would guess.
    effect = t.get("effect")
    if not effect:
        raise FieldError("effect", "missing")
    if effect not in TAINT_EFFECTS:
        raise FieldError("effect", f"{_got(effect)} is not one of {', '.join(TAINT_EFFECTS)}")
    return Taint(key, _string(t, "value"), effect)


def _taints(spec: Mapping[str, Any]) -> tuple[Taint, ...]:
    out = []
    first: dict[tuple[str, str], int] = {}
    for i, t in enumerate(_maps(spec, "taints", "spec.")):
        try:
            taint = _taint(t)
        except FieldError as err:
            raise err.under(f"spec.taints[{i}]") from None
        # The API server keeps one taint per key and effect, so a second cannot have come from a real node.
        seen = first.setdefault((taint.key, taint.effect), i)
        if seen != i:
            raise FieldError(
                f"spec.taints[{i}]",
                f"{_got(taint.key)} with effect {taint.effect} is already spec.taints[{seen}] "
                "(taints must be unique by key and effect)",
            )
        out.append(taint)
    return tuple(out)


def _node(obj: Mapping[str, Any]) -> Node:
    meta = _map(obj, "metadata")
    spec = _map(obj, "spec")
    status = _map(obj, "status")
    ready = False
    ready_since = None
    for i, cond in enumerate(_maps(status, "conditions", "status.")):
        if cond.get("type") == "Ready":
            ready = cond.get("status") == "True"
            since = parse_timestamp(
                cond.get("lastTransitionTime"), f"status.conditions[{i}].lastTransitionTime"
            )
            ready_since = since if ready else None
    return Node(
        name=_name(meta),
        uid=str(meta.get("uid") or ""),
        created=parse_timestamp(meta.get("creationTimestamp"), "metadata.creationTimestamp") or 0.0,
        labels=_str_map(meta, "labels", "metadata."),
        annotations=_str_map(meta, "annotations", "metadata."),
        taints=_taints(spec),
        capacity=Resources.parse(status.get("capacity"), field="status.capacity"),
        allocatable=Resources.parse(status.get("allocatable"), field="status.allocatable"),
        provider_id=_string(spec, "providerID", "", "spec."),
        unschedulable=_bool(spec, "unschedulable", "spec."),
        ready=ready,
        ready_since=ready_since,
        deleting=meta.get("deletionTimestamp") is not None,
    )


def node_from_dict(obj: Mapping[str, Any]) -> Node:
    """A ``v1.Node`` JSON object."""
    return _guard(obj, _node)


def label_selector(raw: object, where: str = "selector") -> tuple[Requirement, ...] | None:
    """A ``LabelSelector`` as requirements; ``None`` for an absent selector (selects nothing)."""
    if raw is None:
        return None
    if type(raw) is not dict and not isinstance(raw, Mapping):
        raise FieldError(where, f"expected a map, got {_got(raw)}")
    labels = _str_map(raw, "matchLabels", f"{where}.")
    reqs = [Requirement(str(k), "In", (v,)) for k, v in labels.items()]
    reqs += _requirements(raw, "matchExpressions", f"{where}.")
    return tuple(reqs)


def _int_or_percent(spec: Mapping[str, Any], key: str) -> None:
    """Check ``minAvailable``/``maxUnavailable`` as the API server does: a count from 0, or 0% to 100%.

    Scale-down goes by ``status.disruptionsAllowed``, but a budget the API server would refuse cannot have come
    from one, and its status would be a guess.
    """
    value = spec.get(key)
    if value is None:
        return
    field = f"spec.{key}"
    if type(value) is int:
        if value < 0:
            raise FieldError(field, f"{value} is below 0")
        return
    if (
        type(value) is not str
        or not value.endswith("%")
        or not value[:-1].isascii()
        or not value[:-1].isdigit()
    ):
        raise FieldError(field, f"{_got(value)} is not an integer or a percentage (e.g. '5%')")
    if int(value[:-1]) > 100:
        raise FieldError(field, f"{_got(value)} is more than 100%")


def _pdb(obj: Mapping[str, Any]) -> DisruptionBudget:
    meta = _map(obj, "metadata")
    spec = _map(obj, "spec")
    # Which of the two would bound evictions is not defined, so the API server accepts only one.
    if spec.get("minAvailable") is not None and spec.get("maxUnavailable") is not None:
        raise FieldError("spec", "minAvailable and maxUnavailable cannot both be set")
    _int_or_percent(spec, "minAvailable")
    _int_or_percent(spec, "maxUnavailable")
    return DisruptionBudget(
        namespace=_string(meta, "namespace", "default", "metadata."),
        name=_name(meta),
        selector=label_selector(spec.get("selector"), "spec.selector"),
        disruptions_allowed=_int(_map(obj, "status"), "disruptionsAllowed", 0, "status."),
    )


def pdb_from_dict(obj: Mapping[str, Any]) -> DisruptionBudget:
    """A ``policy/v1`` PodDisruptionBudget."""
    return _guard(obj, _pdb)


def _daemonset(obj: Mapping[str, Any]) -> DaemonSet:
    meta = _map(obj, "metadata")
    template = _map(_map(obj, "spec"), "template", "spec.")
    where = "spec.template.spec."
    template_spec = _map(template, "spec", "spec.template.")
    return DaemonSet(
        namespace=_string(meta, "namespace", "default", "metadata."),
        name=_name(meta),
        requests=pod_requests(template_spec, where),
        node_selector=_str_map(template_spec, "nodeSelector", where),
        affinity=required_affinity(template_spec, where),
        tolerations=tolerations(template_spec, where),
    )


def daemonset_from_dict(obj: Mapping[str, Any]) -> DaemonSet:
    """An ``apps/v1`` DaemonSet (its pod template is what every new node will run)."""
    return _guard(obj, _daemonset)


def _podgroup(obj: Mapping[str, Any]) -> PodGroup:
    meta = _map(obj, "metadata")
    spec = _map(obj, "spec")
    min_member = _int(spec, "minMember", 1, "spec.") or 1
    if min_member < 1:
        raise FieldError("spec.minMember", f"{min_member} is below 1")
    if min_member > INT32_MAX:  # the CRD declares int32, so the API server refuses a larger one
        raise FieldError("spec.minMember", f"{min_member} is above {INT32_MAX}")
    return PodGroup(
        namespace=_string(meta, "namespace", "default", "metadata."),
        name=_name(meta),
        min_member=min_member,
        queue=str(spec.get("queue") or ""),
        preemptibility=preemptibility(spec.get("preemptibility")),
    )


PREEMPTIBILITY = ("preemptible", "non-preemptible", "semi-preemptible")


def preemptibility(value: object) -> str:
    """A KAI preemptibility value, lowercased; "" for none or one KAI does not know (it then goes by priority,
    and so does tidal)."""
    text = value.lower() if isinstance(value, str) else ""
    return text if text in PREEMPTIBILITY else ""


def podgroup_from_dict(obj: Mapping[str, Any]) -> PodGroup:
    """A KAI PodGroup."""
    return _guard(obj, _podgroup)


def _limit(gpu: Mapping[str, Any], key: str) -> int | None:
    """A KAI queue quota or limit: a number of GPUs, or -1 for none (``None``); other negatives are errors."""
    value = gpu.get(key)
    if value is None:
        return None
    if type(value) is int and value >= 0:
        return value
    try:
        number = float(value) if not isinstance(value, bool) else float("nan")
    except (TypeError, ValueError):
        number = float("nan")
    if number != number or number in (float("inf"), float("-inf")):
        raise FieldError(f"spec.resources.gpu.{key}", f"expected a number of GPUs, got {_got(value)}")
    if number == -1:
        return None
    if number < 0:
        # -1 is KAI's one word for "no limit"; reading -2 as unlimited too would lift a limit that is a typo.
        raise FieldError(
            f"spec.resources.gpu.{key}", f"{_got(value)} is below 0 and not -1 (which means no limit)"
        )
    return int(number)


def _queue(obj: Mapping[str, Any]) -> Queue:
    meta = _map(obj, "metadata")
    spec = _map(obj, "spec")
    gpu = _map(_map(spec, "resources", "spec."), "gpu", "spec.resources.")
    return Queue(
        name=_name(meta),
        parent=str(spec.get("parentQueue") or ""),
        gpu=QueueLimits(
            quota=_limit(gpu, "quota"),
            limit=_limit(gpu, "limit"),
            over_quota_weight=_int(gpu, "overQuotaWeight", 1, "spec.resources.gpu.") or 1,
        ),
        priority=_int(spec, "priority", 0, "spec."),
    )


def queue_from_dict(obj: Mapping[str, Any]) -> Queue:
    """A KAI Queue."""
    return _guard(obj, _queue)
