"""A pod's scheduling constraints and resource requests from its JSON spec, as kube-scheduler reads them.

Each reader checks what the API server's validation checks, so that a field the API server would refuse
(an unknown operator, ``maxSkew: 0``, an empty ``topologyKey``) is one FieldError naming the path and value
rather than a constraint tidal would then read in some other way than the scheduler does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from autoscaler.core.model import (
    HostPort,
    NodeSelectorTerm,
    PodAffinityTerm,
    Requirement,
    Selector,
    SpreadConstraint,
    Toleration,
)
from autoscaler.core.quantity import QuantityMemo
from autoscaler.core.resources import EMPTY, Resources
from autoscaler.runtime.kube.fields import (
    FieldError,
    field_list,
    field_map,
    field_maps,
    got,
    str_map,
    string,
)

OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
TOLERATION_OPERATORS = ("Exists", "Equal")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
PORT_PROTOCOLS = ("TCP", "UDP", "SCTP")
WHEN_UNSATISFIABLE = ("DoNotSchedule", "ScheduleAnyway")
INCLUSION_POLICIES = ("Honor", "Ignore")
# Pod-level requests replace the containers' sum for these (PodLevelResources, beta and on since 1.34).
POD_LEVEL_RESOURCES = ("cpu", "memory")
INT32_MAX = 2**31 - 1

# --- requirements and selectors ----------------------------------------------------------------------


def requirement(raw: Mapping[str, Any], operators: Sequence[str] = OPERATORS) -> Requirement:
    """One ``matchExpressions`` entry (a FieldError's path is relative to the entry)."""
    op = raw.get("operator")
    if op not in operators:
        raise FieldError("operator", f"{got(op)} is not one of {', '.join(operators)}")
    key = raw.get("key")
    if type(key) is not str or not key:
        raise FieldError("key", "missing" if not key else f"expected a string, got {got(key)}")
    values = field_list(raw, "values")
    for i, v in enumerate(values):
        if type(v) is not str:
            raise FieldError(f"values[{i}]", f"expected a string, got {got(v)}")
    if op in ("Exists", "DoesNotExist"):
        if values:
            raise FieldError("values", f"must be empty for operator {op}")
    elif not values:
        raise FieldError("values", f"must not be empty for operator {op}")
    elif op in ("Gt", "Lt") and len(values) != 1:
        raise FieldError("values", f"must have exactly one value for operator {op}")
    return Requirement(key, str(op), tuple(values))


def _requirements(
    term: Mapping[str, Any], key: str, where: str, operators: Sequence[str] = OPERATORS
) -> list[Requirement]:
    out = []
    for i, e in enumerate(field_maps(term, key, where)):
        try:
            out.append(requirement(e, operators))
        except FieldError as err:
            raise err.under(f"{where}{key}[{i}]") from None
    return out


def label_selector(raw: object, where: str = "selector") -> Selector:
    """A ``LabelSelector`` as requirements; ``None`` for an absent selector (selects nothing)."""
    if raw is None:
        return None
    if type(raw) is not dict and not isinstance(raw, Mapping):
        raise FieldError(where, f"expected a map, got {got(raw)}")
    labels = str_map(raw, "matchLabels", f"{where}.")
    reqs = [Requirement(str(k), "In", (v,)) for k, v in labels.items()]
    reqs += _requirements(raw, "matchExpressions", f"{where}.", SELECTOR_OPERATORS)
    return tuple(reqs)


def required_affinity(spec: Mapping[str, Any], where: str = "spec.") -> tuple[NodeSelectorTerm, ...]:
    """``affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution`` as OR-ed terms."""
    if not spec.get("affinity"):
        return ()
    prefix = where + "affinity."
    node_affinity = field_map(field_map(spec, "affinity", where), "nodeAffinity", prefix)
    prefix += "nodeAffinity."
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is None:
        return ()
    required = field_map(node_affinity, "requiredDuringSchedulingIgnoredDuringExecution", prefix)
    prefix += "requiredDuringSchedulingIgnoredDuringExecution."
    terms = field_maps(required, "nodeSelectorTerms", prefix)
    if not terms:
        # The API server refuses a required node affinity with no terms: it could never be satisfied.
        raise FieldError(f"{prefix}nodeSelectorTerms", "must have at least one term")
    out = []
    for i, term in enumerate(terms):
        at = f"{prefix}nodeSelectorTerms[{i}]."
        expressions = _requirements(term, "matchExpressions", at)
        fields = _requirements(term, "matchFields", at, ("In", "NotIn"))
        for j, f in enumerate(fields):
            if f.key != "metadata.name":
                raise FieldError(
                    f"{at}matchFields[{j}].key", f"{got(f.key)} is not supported (metadata.name is)"
                )
            if len(f.values) != 1:
                raise FieldError(f"{at}matchFields[{j}].values", "must have exactly one node name")
        out.append(NodeSelectorTerm(tuple(expressions), tuple(fields)))
    return tuple(out)


# --- tolerations -------------------------------------------------------------------------------------


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
        key=string(t, "key"),
        operator=string(t, "operator", "Equal"),
        value=string(t, "value"),
        effect=string(t, "effect"),
    )
    # Anything else would match no taint, or every taint, depending on how it is compared.
    if toleration.operator not in TOLERATION_OPERATORS:
        raise FieldError("operator", f"{got(operator)} is not one of {', '.join(TOLERATION_OPERATORS)}")
    if toleration.effect and toleration.effect not in TAINT_EFFECTS:
        raise FieldError("effect", f"{got(effect)} is not one of {', '.join(TAINT_EFFECTS)}")
    # The API server refuses both: an Equal toleration without a key would match no taint, and an Exists one
    # would ignore its value, so either would tolerate something other than what it says.
    if not toleration.key and toleration.operator != "Exists":
        raise FieldError(
            "operator",
            f"{got(operator)} must be Exists when key is empty"
            if t.get("operator")
            else "missing (must be Exists when key is empty)",
        )
    if toleration.operator == "Exists" and toleration.value:
        raise FieldError("value", f"{got(value)} must be empty when operator is Exists")
    # Only a NoExecute taint evicts, so only there can a toleration run out; the API server wants that effect
    # named, even though an empty one would match it.
    if toleration.effect != "NoExecute" and t.get("tolerationSeconds") is not None:
        raise FieldError(
            "effect",
            f"{got(effect)} must be NoExecute when tolerationSeconds is set"
            if toleration.effect
            else "missing (must be NoExecute when tolerationSeconds is set)",
        )
    return toleration


def tolerations(spec: Mapping[str, Any], where: str = "spec.") -> tuple[Toleration, ...]:
    """``spec.tolerations``."""
    out = []
    for i, t in enumerate(field_maps(spec, "tolerations", where)):
        try:
            out.append(_toleration(t))
        except FieldError as err:
            raise err.under(f"{where}tolerations[{i}]") from None
    return tuple(out)


# --- inter-pod affinity and topology spread ---------------------------------------------------------


def _label_keys(raw: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    keys = field_list(raw, key, where)
    for i, k in enumerate(keys):
        if type(k) is not str or not k:
            raise FieldError(f"{where}{key}[{i}]", "missing" if not k else f"expected a string, got {got(k)}")
    return tuple(keys)


def _merge_label_keys(
    selector: Selector, labels: Mapping[str, str], match: Sequence[str], mismatch: Sequence[str] = ()
) -> Selector:
    """What the API server does with ``matchLabelKeys``/``mismatchLabelKeys`` when it stores a pod: each key
    the pod has becomes ``key In (value)`` (or ``NotIn``) in the selector. An absent selector stays absent."""
    if selector is None or not (match or mismatch):
        return selector
    extra = [Requirement(k, "In", (labels[k],)) for k in match if k in labels]
    extra += [Requirement(k, "NotIn", (labels[k],)) for k in mismatch if k in labels]
    return selector + tuple(r for r in extra if r not in selector)


def _affinity_term(
    raw: Mapping[str, Any], where: str, namespace: str, labels: Mapping[str, str]
) -> PodAffinityTerm:
    topology_key = raw.get("topologyKey")
    if type(topology_key) is not str or not topology_key:
        raise FieldError(
            f"{where}topologyKey",
            "missing" if not topology_key else f"expected a string, got {got(topology_key)}",
        )
    selector = label_selector(raw.get("labelSelector"), f"{where}labelSelector")
    namespaces = field_list(raw, "namespaces", where)
    for i, ns in enumerate(namespaces):
        if type(ns) is not str or not ns:
            raise FieldError(f"{where}namespaces[{i}]", f"expected a namespace name, got {got(ns)}")
    ns_selector = label_selector(raw.get("namespaceSelector"), f"{where}namespaceSelector")
    match = _label_keys(raw, "matchLabelKeys", where)
    mismatch = _label_keys(raw, "mismatchLabelKeys", where)
    if (match or mismatch) and selector is None:
        key = "matchLabelKeys" if match else "mismatchLabelKeys"
        raise FieldError(f"{where}{key}", "cannot be set when labelSelector is not set")
    both = sorted(set(match) & set(mismatch))
    if both:
        raise FieldError(f"{where}mismatchLabelKeys", f"{got(both[0])} is also in matchLabelKeys")
    return PodAffinityTerm(
        topology_key=topology_key,
        selector=_merge_label_keys(selector, labels, match, mismatch),
        namespaces=tuple(namespaces),
        namespace_selector=ns_selector,
        owner_namespace=namespace,
    )


def pod_affinity_terms(
    spec: Mapping[str, Any], kind: str, namespace: str, labels: Mapping[str, str], where: str = "spec."
) -> tuple[PodAffinityTerm, ...]:
    """Required terms of ``affinity.podAffinity`` or ``affinity.podAntiAffinity`` (``kind``)."""
    affinity = spec.get("affinity")
    if not affinity:
        return ()
    section = field_map(field_map(spec, "affinity", where), kind, f"{where}affinity.")
    prefix = f"{where}affinity.{kind}."
    terms = field_maps(section, "requiredDuringSchedulingIgnoredDuringExecution", prefix)
    prefix += "requiredDuringSchedulingIgnoredDuringExecution"
    return tuple(_affinity_term(t, f"{prefix}[{i}].", namespace, labels) for i, t in enumerate(terms))


def _positive_int(raw: Mapping[str, Any], key: str, where: str) -> int | None:
    value = raw.get(key)
    if value is None:
        return None
    if type(value) is not int or not 0 < value <= INT32_MAX:
        raise FieldError(f"{where}{key}", f"{got(value)} is not a whole number above 0")
    return value


def _policy(raw: Mapping[str, Any], key: str, default: str, where: str) -> str:
    value = raw.get(key)
    if value is None:
        return default
    if value not in INCLUSION_POLICIES:
        raise FieldError(f"{where}{key}", f"{got(value)} is not one of {', '.join(INCLUSION_POLICIES)}")
    return str(value)


def spread_constraints(
    spec: Mapping[str, Any], labels: Mapping[str, str], where: str = "spec."
) -> tuple[SpreadConstraint, ...]:
    """``topologySpreadConstraints`` with ``whenUnsatisfiable: DoNotSchedule``; ``ScheduleAnyway`` ones are
    checked and dropped (they only score nodes, and tidal plans feasibility)."""
    out = []
    seen: dict[tuple[str, str], int] = {}
    for i, raw in enumerate(field_maps(spec, "topologySpreadConstraints", where)):
        at = f"{where}topologySpreadConstraints[{i}]."
        max_skew = _positive_int(raw, "maxSkew", at)
        if max_skew is None:
            raise FieldError(f"{at}maxSkew", "missing")
        topology_key = raw.get("topologyKey")
        if type(topology_key) is not str or not topology_key:
            raise FieldError(
                f"{at}topologyKey",
                "missing" if not topology_key else f"expected a string, got {got(topology_key)}",
            )
        when = raw.get("whenUnsatisfiable")
        if when not in WHEN_UNSATISFIABLE:
            raise FieldError(
                f"{at}whenUnsatisfiable",
                "missing" if when is None else f"{got(when)} is not one of {', '.join(WHEN_UNSATISFIABLE)}",
            )
        first = seen.setdefault((topology_key, str(when)), i)
        if first != i:
            raise FieldError(
                at.rstrip("."),
                f"topologyKey {got(topology_key)} with {when} is already topologySpreadConstraints[{first}]",
            )
        min_domains = _positive_int(raw, "minDomains", at)
        if min_domains is not None and when != "DoNotSchedule":
            raise FieldError(f"{at}minDomains", "can only be set with whenUnsatisfiable DoNotSchedule")
        selector = label_selector(raw.get("labelSelector"), f"{at}labelSelector")
        match = _label_keys(raw, "matchLabelKeys", at)
        if selector is not None:
            clash = next((r.key for r in selector if r.key in match), None)
            if clash is not None:
                raise FieldError(f"{at}matchLabelKeys", f"{got(clash)} is also in labelSelector")
        affinity_policy = _policy(raw, "nodeAffinityPolicy", "Honor", at)
        taints_policy = _policy(raw, "nodeTaintsPolicy", "Ignore", at)
        if when != "DoNotSchedule":
            continue
        out.append(
            SpreadConstraint(
                max_skew=max_skew,
                topology_key=topology_key,
                selector=_merge_label_keys(selector, labels, match),
                min_domains=min_domains or 1,
                honor_node_affinity=affinity_policy == "Honor",
                honor_node_taints=taints_policy == "Honor",
            )
        )
    return tuple(out)


# --- host ports --------------------------------------------------------------------------------------


def host_ports(spec: Mapping[str, Any], where: str = "spec.") -> tuple[HostPort, ...]:
    """Ports the pod binds on its node: of its containers and its sidecars (restartable init containers).
    With ``hostNetwork`` every container port is a host port (the API server defaults hostPort to it)."""
    host_network = spec.get("hostNetwork") is True
    out: list[HostPort] = []
    for section in ("initContainers", "containers"):
        for i, c in enumerate(field_maps(spec, section, where)):
            if section == "initContainers" and c.get("restartPolicy") != "Always":
                continue
            if c.get("ports") is None:
                continue  # most containers
            for j, p in enumerate(field_maps(c, "ports", f"{where}{section}[{i}].")):
                port = p.get("hostPort")
                if port is None and host_network:
                    port = p.get("containerPort")
                if port is None or port == 0:
                    continue
                at = f"{where}{section}[{i}].ports[{j}]."
                if type(port) is not int or not 0 < port < 65536:
                    raise FieldError(f"{at}hostPort", f"{got(port)} is not a port number (1-65535)")
                protocol = p.get("protocol") or "TCP"
                if protocol not in PORT_PROTOCOLS:
                    raise FieldError(
                        f"{at}protocol", f"{got(protocol)} is not one of {', '.join(PORT_PROTOCOLS)}"
                    )
                host_ip = p.get("hostIP") or "0.0.0.0"
                if type(host_ip) is not str:
                    raise FieldError(f"{at}hostIP", f"expected a string, got {got(host_ip)}")
                out.append(HostPort(port, protocol, host_ip))
    return tuple(out)


# --- resources ---------------------------------------------------------------------------------------


def _requests(holder: Mapping[str, Any], field: str, memo: QuantityMemo | None) -> Resources:
    """``resources.requests``, with a missing request defaulted to its limit as the API server does."""
    resources = holder.get("resources")
    if not resources:
        return EMPTY
    if type(resources) is not dict and not isinstance(resources, Mapping):
        raise FieldError(f"{field}.resources", f"expected a map, got {got(resources)}")
    requests = resources.get("requests")
    limits = resources.get("limits")
    parsed = Resources.parse(requests, field=f"{field}.resources.requests", memo=memo) if requests else EMPTY
    if limits and not (
        # Limits that only repeat requests (memory: 1Gi in both) were read with them and add nothing.
        requests and type(limits) is dict and all(requests.get(k) == v for k, v in limits.items())
    ):
        parsed_limits = Resources.parse(limits, field=f"{field}.resources.limits", memo=memo)
        missing = {k: v for k, v in parsed_limits.items() if k not in parsed}
        if missing:
            parsed = parsed + missing
    return parsed


def pod_requests(
    spec: Mapping[str, Any], where: str = "spec.", memo: QuantityMemo | None = None
) -> Resources:
    """What NodeResourcesFit charges a node for the pod: max(containers + sidecars, each init container with
    the sidecars started before it), pod-level cpu/memory requests in place of the containers' where set,
    plus the RuntimeClass overhead. ``memo`` is the decoder's quantity memo."""
    containers = field_maps(spec, "containers", where)
    if (
        len(containers) == 1
        and not spec.get("initContainers")
        and not spec.get("overhead")
        and not spec.get("resources")
    ):
        return _requests(containers[0], f"{where}containers[0]", memo)  # the common case, kept cheap
    total = EMPTY
    for i, c in enumerate(containers):
        total = total + _requests(c, f"{where}containers[{i}]", memo)
    init_peak = EMPTY
    sidecars = EMPTY
    for i, c in enumerate(field_maps(spec, "initContainers", where)):
        req = _requests(c, f"{where}initContainers[{i}]", memo)
        if c.get("restartPolicy") == "Always":
            # A sidecar keeps running, so it adds to everything that starts after it.
            sidecars = sidecars + req
            init_peak = init_peak.maximum(sidecars)
        else:
            init_peak = init_peak.maximum(req + sidecars)
    total = (total + sidecars).maximum(init_peak)
    pod_level = _requests(spec, where.rstrip("."), memo) if spec.get("resources") else EMPTY
    if pod_level:
        values = total.as_dict()
        for name in POD_LEVEL_RESOURCES:
            if name in pod_level:
                values[name] = pod_level[name]
        for name, amount in pod_level.items():
            if name.startswith("hugepages-"):
                values[name] = amount
        total = Resources(values)
    overhead = spec.get("overhead")
    if overhead:
        total = total + Resources.parse(overhead, field=f"{where}overhead", memo=memo)
    return total
