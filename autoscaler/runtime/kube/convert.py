"""Kubernetes JSON (as dicts) → the decision core's model.

Both the offline snapshot loader and the informers decode raw JSON straight into these values; generated
``V1Pod`` objects are never built (they are slow and not needed). Every error names the object, the field
path (``spec.tolerations[0]``) and the value. The checks that make this so are ``type(x) is dict`` tests on
the way and, for anything rarer, a path added in the ``except`` branch: decoding 100,000 pods stays cheap.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

from autoscaler.core.annotations import preemptibility
from autoscaler.core.gpu.share import (
    GPU_FRACTION,
    GPU_FRACTION_NUM_DEVICES,
    GPU_MEMORY,
    NVFRACTIONS_PREFIX,
    GpuShare,
    GpuShareError,
    gpu_share,
)
from autoscaler.core.model import (
    Condition,
    DaemonSet,
    DisruptionBudget,
    Node,
    NodeCondition,
    OwnerRef,
    Pod,
    PodGroup,
    Queue,
    QueueLimits,
    Taint,
)
from autoscaler.core.pod_maker import make_pod
from autoscaler.core.quantity import QuantityError, QuantityMemo
from autoscaler.core.resources import Resources
from autoscaler.runtime.kube.convert_dra import pod_claims_of
from autoscaler.runtime.kube.fields import (
    ConversionError,
    FieldError,
    boolean,
    field_map,
    field_maps,
    got,
    guard,
    integer,
    object_name,
    parse_time,
    parse_timestamp,
    str_map,
    string,
)
from autoscaler.runtime.kube.scheduling import (
    INT32_MAX,
    TAINT_EFFECTS,
    host_ports,
    label_selector,
    pod_affinity_terms,
    pod_requests,
    required_affinity,
    spread_constraints,
    tolerations,
)

T = TypeVar("T")

__all__ = [
    "ConversionError",
    "daemonset_from_dict",
    "namespace_from_dict",
    "node_from_api",
    "node_from_dict",
    "parse_time",
    "pdb_from_api",
    "pdb_from_dict",
    "pod_from_api",
    "pod_from_dict",
    "podgroup_from_api",
    "podgroup_from_dict",
    "queue_from_api",
    "queue_from_dict",
]


def _log() -> Any:
    """The logger of the rare objects read only in part."""
    # Imported on first use, not with this module: structlog loads rich, a tenth of `tidal plan`'s start-up.
    import structlog

    return structlog.get_logger("tidal.kube")


MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
KAI_GROUP = "scheduling.run.ai"
SHARE_ANNOTATIONS = (GPU_FRACTION, GPU_MEMORY, GPU_FRACTION_NUM_DEVICES)


# --- objects ------------------------------------------------------------------------------------------


def owner(meta: Mapping[str, Any], memo: QuantityMemo | None = None) -> OwnerRef | None:
    refs = field_maps(meta, "ownerReferences", "metadata.")
    if not refs:
        return None
    for chosen in refs:
        if chosen.get("controller"):
            break
    else:
        chosen = refs[0]
    kind, name, controller = chosen.get("kind", ""), chosen.get("name", ""), chosen.get("controller")
    # Replicas name the same owner: one OwnerRef for all of them (read plain strings only, as a key).
    key = ("owner", kind, name, controller) if type(kind) is str and type(name) is str else None
    if memo is not None and key is not None:
        found = memo.made.get(key)
        if found is not None:
            return cast(OwnerRef, found)
    made = OwnerRef(kind=str(kind), name=str(name), controller=bool(controller))
    if memo is not None and key is not None and type(controller) in (bool, type(None)):
        memo.keep_made(key, made)
    return made


def _scheduled(status: Mapping[str, Any], memo: QuantityMemo | None = None) -> Condition | None:
    scheduled = None
    for i, cond in enumerate(field_maps(status, "conditions", "status.")):
        if cond.get("type") == "PodScheduled":
            state, reason, message = cond.get("status", ""), cond.get("reason"), cond.get("message")
            when = cond.get("lastTransitionTime")
            # Pods left pending together carry the same condition: one Condition for all of them, made from
            # plain strings only (anything else is read, and refused, as it comes).
            key = None
            if (
                memo is not None
                and type(state) is str
                and (type(message) is str or message is None)
                and (type(reason) is str or reason is None)
                and (type(when) is str or when is None)
            ):
                key = ("PodScheduled", state, reason, message, when)
                found = memo.made.get(key)
                if found is not None:
                    scheduled = cast(Condition, found)
                    continue
            scheduled = Condition(
                status=str(state),
                reason=str(reason or ""),
                message=str(message or ""),
                last_transition=parse_timestamp(when, f"status.conditions[{i}].lastTransitionTime"),
            )
            if memo is not None and key is not None:
                memo.keep_made(key, scheduled)
    return scheduled


def _local_storage(spec: Mapping[str, Any]) -> bool:
    """A volume whose data lives on the node's disk (emptyDir not in memory, hostPath)."""
    for i, v in enumerate(field_maps(spec, "volumes", "spec.")):
        if "hostPath" in v:
            return True
        if "emptyDir" in v:
            empty_dir = v["emptyDir"]
            if empty_dir is None:
                return True
            if not isinstance(empty_dir, Mapping):
                raise FieldError(f"spec.volumes[{i}].emptyDir", f"expected a map, got {got(empty_dir)}")
            if empty_dir.get("medium") != "Memory":
                return True
    return False


def _share(
    spec: Mapping[str, Any], annotations: Mapping[str, str], requests: Resources
) -> tuple[GpuShare | None, str]:
    """The KAI GPU share the annotations ask for, or why KAI would refuse them (kept on the pod: the API
    server accepts any annotation, so the pod is reported, never dropped)."""
    if not annotations:
        return None, ""  # most pods: nothing to look through
    if not any(k in annotations for k in SHARE_ANNOTATIONS) and not any(
        k.startswith(NVFRACTIONS_PREFIX) for k in annotations
    ):
        return None, ""
    containers = [str(c.get("name") or "") for c in field_maps(spec, "containers", "spec.")]
    init = [str(c.get("name") or "") for c in field_maps(spec, "initContainers", "spec.")]
    try:
        share = gpu_share(annotations, containers, init_containers=init, requests_whole_gpu=requests.gpus > 0)
    except GpuShareError as err:
        return None, str(err)
    return share, ""


def _pod(obj: Mapping[str, Any], memo: QuantityMemo | None = None) -> Pod:
    # Each field is taken as it is when it has the shape the API server gives it, and handed to its checked
    # reader (which names the field in its error) otherwise: 100,000 pods are read at every relist.
    meta, spec, status = obj.get("metadata"), obj.get("spec"), obj.get("status")
    if type(meta) is not dict:
        meta = field_map(obj, "metadata")
    if type(spec) is not dict:
        spec = field_map(obj, "spec")
    if type(status) is not dict:
        status = field_map(obj, "status")
    namespace = meta.get("namespace")
    if type(namespace) is not str or not namespace:
        namespace = string(meta, "namespace", "default", "metadata.")
    annotations = str_map(meta, "annotations", "metadata.") if "annotations" in meta else {}
    labels = str_map(meta, "labels", "metadata.") if "labels" in meta else {}
    priority = spec.get("priority", 0)
    if type(priority) is not int:
        priority = integer(spec, "priority", 0, "spec.")
    grace = spec.get("terminationGracePeriodSeconds", 30)
    if type(grace) is not int:
        grace = integer(spec, "terminationGracePeriodSeconds", 30, "spec.")
    phase = status.get("phase")
    if type(phase) is not str or not phase:
        phase = string(status, "phase", "Pending", "status.")
    requests = pod_requests(spec, memo=memo)
    share, share_error = _share(spec, annotations, requests)
    # The sections most pods leave out are read only when present (each reader returns the same empty value
    # for an absent one): of 100,000 pods, a few have affinity, spread constraints, gates or claims.
    affinity = "affinity" in spec
    return make_pod(
        namespace=namespace,
        name=object_name(meta),
        uid=str(meta.get("uid") or ""),
        created=parse_timestamp(meta.get("creationTimestamp"), "metadata.creationTimestamp") or 0.0,
        labels=labels,
        annotations=annotations,
        scheduler_name=str(spec.get("schedulerName") or "default-scheduler"),
        node_name=str(spec.get("nodeName") or ""),
        phase=phase,
        scheduling_gates=(
            tuple(str(g.get("name", "")) for g in field_maps(spec, "schedulingGates", "spec."))
            if "schedulingGates" in spec
            else ()
        ),
        scheduled=_scheduled(status, memo),
        requests=requests,
        node_selector=str_map(spec, "nodeSelector", "spec.") if "nodeSelector" in spec else {},
        affinity=required_affinity(spec) if affinity else (),
        tolerations=tolerations(spec) if "tolerations" in spec else (),
        pod_affinity=pod_affinity_terms(spec, "podAffinity", namespace, labels) if affinity else (),
        pod_anti_affinity=pod_affinity_terms(spec, "podAntiAffinity", namespace, labels) if affinity else (),
        spread=spread_constraints(spec, labels) if "topologySpreadConstraints" in spec else (),
        host_ports=host_ports(spec),
        owner=owner(meta, memo),
        priority=priority,
        local_storage=_local_storage(spec) if "volumes" in spec else False,
        mirror=MIRROR_ANNOTATION in annotations,
        terminating=meta.get("deletionTimestamp") is not None,
        grace_period_s=grace,
        gpu_share=share,
        gpu_share_error=share_error,
        claims=pod_claims_of(obj) if "resourceClaims" in spec else (),
    )


def pod_from_dict(obj: Mapping[str, Any], memo: QuantityMemo | None = None) -> Pod:
    """A ``v1.Pod`` JSON object (``memo``: the decoder's quantities, kept across the objects it reads)."""
    return guard(obj, _pod, memo)


def _try(read: Callable[[], T], default: T) -> T:
    try:
        return read()
    except (FieldError, QuantityError, ValueError, TypeError, AttributeError, KeyError):
        return default


def _partial_pod(obj: Mapping[str, Any], why: str, memo: QuantityMemo | None) -> Pod:
    """What can be read of a pod the API server accepted but tidal cannot fully understand: enough to know
    where it runs and whom it belongs to, marked so that every decision leaves it (and its node) alone."""
    meta = field_map(obj, "metadata")
    empty: Mapping[str, Any] = {}
    spec = _try(lambda: field_map(obj, "spec"), empty)
    status = _try(lambda: field_map(obj, "status"), empty)
    node_name = _try(lambda: string(spec, "nodeName"), "")
    return Pod(
        namespace=_try(lambda: string(meta, "namespace", "default"), "default"),
        name=object_name(meta),
        uid=str(meta.get("uid") or ""),
        labels=_try(lambda: str_map(meta, "labels"), {}),
        annotations=_try(lambda: str_map(meta, "annotations"), {}),
        node_name=node_name,
        phase=_try(lambda: string(status, "phase", "Pending"), "Running" if node_name else "Pending"),
        requests=_try(lambda: pod_requests(spec, memo=memo), Resources()),
        owner=_try(lambda: owner(meta), None),
        terminating=meta.get("deletionTimestamp") is not None,
        unreadable=why,
    )


def pod_from_api(obj: Mapping[str, Any], memo: QuantityMemo | None = None) -> Pod:
    """A pod from the API server: what it accepted is never dropped. A field tidal cannot read keeps the pod,
    marked ``unreadable`` with the reason (``tidal plan`` reads files strictly instead)."""
    try:
        return pod_from_dict(obj, memo)
    except ConversionError as err:
        why = _field_of(err)
    return guard(obj, lambda o: _partial_pod(o, why, memo))


def _partial_node(obj: Mapping[str, Any], why: str, memo: QuantityMemo | None) -> Node:
    meta = field_map(obj, "metadata")
    empty: Mapping[str, Any] = {}
    spec = _try(lambda: field_map(obj, "spec"), empty)
    status = _try(lambda: field_map(obj, "status"), empty)
    return Node(
        name=object_name(meta),
        uid=str(meta.get("uid") or ""),
        labels=_try(lambda: str_map(meta, "labels"), {}),
        annotations=_try(lambda: str_map(meta, "annotations"), {}),
        capacity=_try(lambda: Resources.parse(status.get("capacity"), memo=memo), Resources()),
        allocatable=_try(lambda: Resources.parse(status.get("allocatable"), memo=memo), Resources()),
        provider_id=_try(lambda: string(spec, "providerID"), ""),
        unschedulable=True,  # nothing may be planned onto it
        deleting=meta.get("deletionTimestamp") is not None,
        unreadable=why,
    )


def node_from_api(obj: Mapping[str, Any], memo: QuantityMemo | None = None) -> Node:
    """A Node from the API server, kept (marked ``unreadable``) when tidal cannot read all of it."""
    try:
        return node_from_dict(obj, memo)
    except ConversionError as err:
        why = _field_of(err)
    return guard(obj, lambda o: _partial_node(o, why, memo))


def _field_of(err: ConversionError) -> str:
    """The error without the object's name in front (the object is named wherever the reason is shown)."""
    text = str(err)
    return text.split(": ", 1)[1] if ": " in text else text


def _taint(t: Mapping[str, Any]) -> Taint:
    key = t.get("key")
    if type(key) is not str or not key:
        raise FieldError("key", "missing" if not key else f"expected a string, got {got(key)}")
    # Unlike a toleration's, a taint's effect is required: reading a missing one as NoSchedule would guess.
    effect = t.get("effect")
    if not effect:
        raise FieldError("effect", "missing")
    if effect not in TAINT_EFFECTS:
        raise FieldError("effect", f"{got(effect)} is not one of {', '.join(TAINT_EFFECTS)}")
    return Taint(key, string(t, "value"), effect)


def _taints(spec: Mapping[str, Any]) -> tuple[Taint, ...]:
    out = []
    first: dict[tuple[str, str], int] = {}
    for i, t in enumerate(field_maps(spec, "taints", "spec.")):
        try:
            taint = _taint(t)
        except FieldError as err:
            raise err.under(f"spec.taints[{i}]") from None
        # The API server keeps one taint per key and effect, so a second cannot have come from a real node.
        seen = first.setdefault((taint.key, taint.effect), i)
        if seen != i:
            raise FieldError(
                f"spec.taints[{i}]",
                f"{got(taint.key)} with effect {taint.effect} is already spec.taints[{seen}] "
                "(taints must be unique by key and effect)",
            )
        out.append(taint)
    return tuple(out)


def _node(obj: Mapping[str, Any], memo: QuantityMemo | None = None) -> Node:
    meta = field_map(obj, "metadata")
    spec = field_map(obj, "spec")
    status = field_map(obj, "status")
    ready = False
    ready_since = None
    conditions = []
    for i, cond in enumerate(field_maps(status, "conditions", "status.")):
        since = parse_timestamp(cond.get("lastTransitionTime"), f"status.conditions[{i}].lastTransitionTime")
        # Every condition is kept: a health checker's (GPU lost, XID errors) can make the node unhealthy.
        conditions.append(NodeCondition(str(cond.get("type") or ""), str(cond.get("status") or ""), since))
        if cond.get("type") == "Ready":
            ready = cond.get("status") == "True"
            ready_since = since if ready else None
    return Node(
        name=object_name(meta),
        uid=str(meta.get("uid") or ""),
        created=parse_timestamp(meta.get("creationTimestamp"), "metadata.creationTimestamp") or 0.0,
        labels=str_map(meta, "labels", "metadata."),
        annotations=str_map(meta, "annotations", "metadata."),
        taints=_taints(spec),
        capacity=Resources.parse(status.get("capacity"), field="status.capacity", memo=memo),
        allocatable=Resources.parse(status.get("allocatable"), field="status.allocatable", memo=memo),
        provider_id=string(spec, "providerID", "", "spec."),
        unschedulable=boolean(spec, "unschedulable", "spec."),
        ready=ready,
        ready_since=ready_since,
        deleting=meta.get("deletionTimestamp") is not None,
        conditions=tuple(conditions),
    )


def node_from_dict(obj: Mapping[str, Any], memo: QuantityMemo | None = None) -> Node:
    """A ``v1.Node`` JSON object (``memo``: the decoder's quantities)."""
    return guard(obj, lambda o: _node(o, memo))


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
        raise FieldError(field, f"{got(value)} is not an integer or a percentage (e.g. '5%')")
    if int(value[:-1]) > 100:
        raise FieldError(field, f"{got(value)} is more than 100%")


def _pdb(obj: Mapping[str, Any]) -> DisruptionBudget:
    meta = field_map(obj, "metadata")
    spec = field_map(obj, "spec")
    # Which of the two would bound evictions is not defined, so the API server accepts only one.
    if spec.get("minAvailable") is not None and spec.get("maxUnavailable") is not None:
        raise FieldError("spec", "minAvailable and maxUnavailable cannot both be set")
    _int_or_percent(spec, "minAvailable")
    _int_or_percent(spec, "maxUnavailable")
    return DisruptionBudget(
        namespace=string(meta, "namespace", "default", "metadata."),
        name=object_name(meta),
        selector=label_selector(spec.get("selector"), "spec.selector"),
        disruptions_allowed=integer(field_map(obj, "status"), "disruptionsAllowed", 0, "status."),
    )


def pdb_from_dict(obj: Mapping[str, Any]) -> DisruptionBudget:
    """A ``policy/v1`` PodDisruptionBudget."""
    return guard(obj, _pdb)


def _named(obj: Mapping[str, Any], namespaced: bool = True) -> tuple[str, str]:
    """The namespace and name of an object read as far as they can be (every object the API server serves
    has a name)."""
    meta = field_map(obj, "metadata")
    namespace = _try(lambda: string(meta, "namespace", "default"), "default") if namespaced else ""
    return namespace, object_name(meta)


def _kept(
    obj: Mapping[str, Any],
    read: Callable[[Mapping[str, Any]], T],
    partial: Callable[[str, str, str], T],
    kind: str,
    treated_as: str,
    namespaced: bool = True,
) -> T:
    """``read(obj)``, or, when tidal cannot read all of it, ``partial(namespace, name, why)``: an object the API
    server accepted is kept, marked with the field that stopped it, and logged with how it is treated."""
    try:
        return read(obj)
    except ConversionError as err:
        why = _field_of(err)
    namespace, name = guard(obj, lambda o: _named(o, namespaced))
    _log().warning(
        f"{kind}_unreadable", namespace=namespace or None, name=name, error=why, treated_as=treated_as
    )
    return partial(namespace, name, why)


def pdb_from_api(obj: Mapping[str, Any]) -> DisruptionBudget:
    """A PodDisruptionBudget from the API server. One tidal cannot read all of is kept as protecting every pod
    of its namespace, with the reason, never dropped: evicting what it may protect is what it exists to stop."""
    return _kept(
        obj,
        pdb_from_dict,
        lambda ns, name, why: DisruptionBudget(ns, name, selector=(), disruptions_allowed=0, unreadable=why),
        "pdb",
        "protects every pod",
    )


def _daemonset(obj: Mapping[str, Any], memo: QuantityMemo | None = None) -> DaemonSet:
    meta = field_map(obj, "metadata")
    template = field_map(field_map(obj, "spec"), "template", "spec.")
    where = "spec.template.spec."
    template_spec = field_map(template, "spec", "spec.template.")
    return DaemonSet(
        namespace=string(meta, "namespace", "default", "metadata."),
        name=object_name(meta),
        requests=pod_requests(template_spec, where, memo),
        node_selector=str_map(template_spec, "nodeSelector", where),
        affinity=required_affinity(template_spec, where),
        tolerations=tolerations(template_spec, where),
    )


def daemonset_from_dict(obj: Mapping[str, Any], memo: QuantityMemo | None = None) -> DaemonSet:
    """An ``apps/v1`` DaemonSet (its pod template is what every new node will run; ``memo``: the decoder's
    quantities)."""
    return guard(obj, lambda o: _daemonset(o, memo))


def _podgroup(obj: Mapping[str, Any]) -> PodGroup:
    meta = field_map(obj, "metadata")
    spec = field_map(obj, "spec")
    min_member = integer(spec, "minMember", 1, "spec.") or 1
    if min_member < 1:
        raise FieldError("spec.minMember", f"{min_member} is below 1")
    if min_member > INT32_MAX:  # the CRD declares int32, so the API server refuses a larger one
        raise FieldError("spec.minMember", f"{min_member} is above {INT32_MAX}")
    return PodGroup(
        namespace=string(meta, "namespace", "default", "metadata."),
        name=object_name(meta),
        min_member=min_member,
        queue=str(spec.get("queue") or ""),
        preemptibility=preemptibility(spec.get("preemptibility")),
    )


def podgroup_from_dict(obj: Mapping[str, Any]) -> PodGroup:
    """A KAI PodGroup."""
    return guard(obj, _podgroup)


def podgroup_from_api(obj: Mapping[str, Any]) -> PodGroup:
    """A KAI PodGroup from the API server. One tidal cannot read all of is kept, with the reason: its pods get
    no node (how many make the gang, and in which queue, is unknown), and each says why."""
    return _kept(
        obj,
        podgroup_from_dict,
        lambda ns, name, why: PodGroup(ns, name, unreadable=why),
        "podgroup",
        "its pods wait",
    )


def _limit(gpu: Mapping[str, Any], key: str) -> float | None:
    """A KAI queue quota or limit: a number of GPUs, fractions included as KAI counts them (0.5 is half a
    GPU), or -1 for none (``None``); other negatives are errors."""
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
        raise FieldError(f"spec.resources.gpu.{key}", f"expected a number of GPUs, got {got(value)}")
    if number == -1:
        return None
    if number < 0:
        # -1 is KAI's one word for "no limit"; reading -2 as unlimited too would lift a limit that is a typo.
        raise FieldError(
            f"spec.resources.gpu.{key}", f"{got(value)} is below 0 and not -1 (which means no limit)"
        )
    return int(number) if number.is_integer() else number


def _weight(gpu: Mapping[str, Any]) -> float:
    """A KAI queue's ``overQuotaWeight``: any number at or above 0, as KAI's CRD types it (``0.5`` is half a
    share); absent, 1."""
    value = gpu.get("overQuotaWeight")
    if value is None:
        return 1
    try:
        number = float(value) if not isinstance(value, bool) else float("nan")
    except (TypeError, ValueError):
        number = float("nan")
    if not 0 <= number < float("inf"):
        raise FieldError(
            "spec.resources.gpu.overQuotaWeight", f"expected a number at or above 0, got {got(value)}"
        )
    return number


def _queue(obj: Mapping[str, Any]) -> Queue:
    meta = field_map(obj, "metadata")
    spec = field_map(obj, "spec")
    gpu = field_map(field_map(spec, "resources", "spec."), "gpu", "spec.resources.")
    return Queue(
        name=object_name(meta),
        parent=str(spec.get("parentQueue") or ""),
        gpu=QueueLimits(
            quota=_limit(gpu, "quota"),
            limit=_limit(gpu, "limit"),
            over_quota_weight=_weight(gpu),
        ),
        priority=integer(spec, "priority", 0, "spec."),
    )


def queue_from_dict(obj: Mapping[str, Any]) -> Queue:
    """A KAI Queue."""
    return guard(obj, _queue)


def queue_from_api(obj: Mapping[str, Any]) -> Queue:
    """A KAI Queue from the API server. One tidal cannot read all of is kept, with the reason: its limit is
    unknown, so no GPU pod of it, or of a queue under it, gets a node, and each says why."""

    def partial(_: str, name: str, why: str) -> Queue:
        # Its parent, if that can be read, so that the queues under it stay under it.
        parent = _try(lambda: string(field_map(obj, "spec"), "parentQueue"), "")
        return Queue(name, parent=parent, unreadable=why)

    return _kept(obj, queue_from_dict, partial, "queue", "its GPU pods wait", namespaced=False)


def _namespace(obj: Mapping[str, Any]) -> tuple[str, Mapping[str, str]]:
    meta = field_map(obj, "metadata")
    name = object_name(meta)
    # The API server labels every namespace with its own name; a namespaceSelector may select on it.
    return name, {**str_map(meta, "labels", "metadata."), "kubernetes.io/metadata.name": name}


def namespace_from_dict(obj: Mapping[str, Any]) -> tuple[str, Mapping[str, str]]:
    """A ``v1.Namespace``: its name and labels (what a pod affinity term's namespaceSelector reads)."""
    return guard(obj, _namespace)
