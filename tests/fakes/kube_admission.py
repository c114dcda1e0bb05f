"""What the real API server does beyond storage: pod defaulting, eviction, binding, PDB status.

These run against the Store under its (re-entrant) lock so each is atomic, as the real handlers are with
respect to the objects they touch.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from tests.fakes.kube_errors import ApiError, bad_request, conflict, invalid, status_object, success_status
from tests.fakes.kube_resources import ResourceRegistry, ResourceType
from tests.fakes.kube_selectors import selector_from_label_selector_object
from tests.fakes.kube_store import Store, rfc3339

# Added by the DefaultTolerationSeconds admission plugin to every pod without its own.
_DEFAULT_TOLERATIONS = (
    {
        "key": "node.kubernetes.io/not-ready",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
    {
        "key": "node.kubernetes.io/unreachable",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
)
_SYSTEM_PRIORITY = {"system-cluster-critical": 2_000_000_000, "system-node-critical": 2_000_001_000}

PDB_BLOCKED = "Cannot evict pod as it would violate the pod's disruption budget."


def _types(registry: ResourceRegistry) -> tuple[ResourceType, ResourceType]:
    pods = registry.lookup("", "v1", "pods")
    pdbs = registry.lookup("policy", "v1", "poddisruptionbudgets")
    assert pods is not None and pdbs is not None
    return pods, pdbs


# Built-in types whose spec/status are Go structs: the real server always serialises them, if only as {}.
# JSON patches such as `add /spec/taints` rely on the parent existing.
_STRUCT_FIELDS: dict[tuple[str, str], tuple[str, ...]] = {
    ("", "pods"): ("spec", "status"),
    ("", "nodes"): ("spec", "status"),
    ("", "namespaces"): ("spec", "status"),
    ("", "services"): ("spec", "status"),
    ("", "persistentvolumeclaims"): ("spec", "status"),
    ("", "persistentvolumes"): ("spec", "status"),
    ("policy", "poddisruptionbudgets"): ("spec", "status"),
    ("apps", "daemonsets"): ("spec", "status"),
    ("apps", "deployments"): ("spec", "status"),
    ("apps", "replicasets"): ("spec", "status"),
    ("apps", "statefulsets"): ("spec", "status"),
    ("batch", "jobs"): ("spec", "status"),
    ("coordination.k8s.io", "leases"): ("spec",),
}


# Built-in types whose create strategy discards a client-sent status (nodes keep theirs: kubelets send it).
_STATUS_RESET_ON_CREATE = frozenset(
    {
        ("", "pods"),
        ("policy", "poddisruptionbudgets"),
        ("apps", "daemonsets"),
        ("apps", "deployments"),
        ("apps", "replicasets"),
        ("apps", "statefulsets"),
        ("batch", "jobs"),
    }
)


def prepare_for_create(rt: ResourceType, obj: dict[str, Any]) -> None:
    """Drop what a client may not set on create over the API (in place); direct test setup skips this."""
    if rt.storage_key in _STATUS_RESET_ON_CREATE or (rt.custom and rt.has_status):
        obj.pop("status", None)


def default_object(rt: ResourceType, obj: dict[str, Any], store: Store, registry: ResourceRegistry) -> None:
    """Apply the defaults and admission mutations the real server applies on create (in place)."""
    for field in _STRUCT_FIELDS.get(rt.storage_key, ()):
        if not isinstance(obj.get(field), dict):
            obj[field] = {}
    if rt.storage_key == ("", "pods"):
        _default_pod(obj, store, registry)
    elif rt.storage_key == ("", "namespaces"):
        obj.setdefault("status", {}).setdefault("phase", "Active")


def _default_pod(pod: dict[str, Any], store: Store, registry: ResourceRegistry) -> None:
    spec = pod.setdefault("spec", {})
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("serviceAccountName", "default")
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    if "priority" not in spec:
        priority = _priority_of(spec.get("priorityClassName"), store, registry)
        if priority is not None:
            spec["priority"] = priority
    tolerations = spec.setdefault("tolerations", [])
    for default in _DEFAULT_TOLERATIONS:
        if not any(
            t.get("key") == default["key"] and t.get("effect") in (None, "NoExecute") for t in tolerations
        ):
            tolerations.append(dict(default))
    for container in [*spec.get("initContainers", []), *spec.get("containers", [])]:
        resources = container.setdefault("resources", {})
        limits = resources.get("limits") or {}
        requests = resources.get("requests") or {}
        # Upstream defaulting: a limit without a request makes the request equal to the limit.
        for name, value in limits.items():
            requests.setdefault(name, value)
        if requests:
            resources["requests"] = requests
        container.setdefault("terminationMessagePath", "/dev/termination-log")
        container.setdefault("terminationMessagePolicy", "File")
        image = str(container.get("image", ""))
        latest = ":" not in image.rsplit("/", 1)[-1] or image.endswith(":latest")
        container.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
    status = pod.setdefault("status", {})
    status.setdefault("phase", "Pending")
    status.setdefault("qosClass", _qos_class(spec))


def _priority_of(class_name: str | None, store: Store, registry: ResourceRegistry) -> int | None:
    classes = registry.lookup("scheduling.k8s.io", "v1", "priorityclasses")
    if class_name:
        if class_name in _SYSTEM_PRIORITY:
            return _SYSTEM_PRIORITY[class_name]
        found = store.find(classes, None, class_name) if classes else None
        return int(found.get("value", 0)) if found else None
    if classes:
        for pc in store.select(classes).items:
            if pc.get("globalDefault"):
                return int(pc.get("value", 0))
    return 0


def _qos_class(spec: dict[str, Any]) -> str:
    containers = [*spec.get("initContainers", []), *spec.get("containers", [])]
    any_set = False
    guaranteed = bool(containers)
    for container in containers:
        resources = container.get("resources") or {}
        requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
        for name in ("cpu", "memory"):
            any_set = any_set or name in requests or name in limits
            if name not in limits or requests.get(name) != limits.get(name):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def pod_ready(pod: dict[str, Any]) -> bool:
    """The Ready condition is True (what the eviction handler and PDB controller call healthy)."""
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _set_condition(pod: dict[str, Any], condition: dict[str, Any]) -> None:
    conditions = pod.setdefault("status", {}).setdefault("conditions", [])
    conditions[:] = [c for c in conditions if c.get("type") != condition["type"]] + [condition]


def _selects(pdb: dict[str, Any], pod: dict[str, Any]) -> bool:
    selector = selector_from_label_selector_object((pdb.get("spec") or {}).get("selector"))
    return selector is not None and selector.matches((pod.get("metadata") or {}).get("labels"))


def evict(
    store: Store,
    registry: ResourceRegistry,
    namespace: str,
    name: str,
    eviction: dict[str, Any],
    dry_run: bool = False,
) -> tuple[int, dict[str, Any]]:
    """The pods/eviction subresource: PDB check and decrement, then delete. Returns (HTTP code, Status)."""
    pods, pdbs = _types(registry)
    body_name = (eviction.get("metadata") or {}).get("name")
    if body_name and body_name != name:
        raise bad_request("name in URL does not match name in Eviction object")
    delete_options = dict(eviction.get("deleteOptions") or {})
    dry_run = dry_run or bool(delete_options.get("dryRun"))
    with store.lock:
        pod = store.get(pods, namespace, name)
        phase = (pod.get("status") or {}).get("phase")
        # Mirrors canIgnorePDB: pods that are not running (or already going) are deleted without a budget check.
        ignore_pdb = phase in ("Succeeded", "Failed", "Pending") or bool(
            pod["metadata"].get("deletionTimestamp")
        )
        if not ignore_pdb:
            budgets = [pdb for pdb in store.select(pdbs, namespace).items if _selects(pdb, pod)]
            if len(budgets) > 1:
                message = "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
                return 500, status_object(500, message, reason="")
            if budgets and not _unhealthy_pod_may_go(budgets[0], pod):
                _check_and_decrement(store, pdbs, budgets[0], name, dry_run)
        if not dry_run:
            condition = {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "EvictionByEvictionAPI",
                "message": "Eviction API: evicting",
                "lastTransitionTime": rfc3339(store.clock()),
            }
            store.modify(pods, namespace, name, lambda p: _set_condition(p, condition))
        store.delete(pods, namespace, name, delete_options, dry_run)
    return 201, success_status(201)


def _unhealthy_pod_may_go(pdb: dict[str, Any], pod: dict[str, Any]) -> bool:
    # An unready pod does not count towards the budget when the application is healthy without it.
    if pod_ready(pod):
        return False
    spec, status = pdb.get("spec") or {}, pdb.get("status") or {}
    if spec.get("unhealthyPodEvictionPolicy") == "AlwaysAllow":
        return True
    desired = int(status.get("desiredHealthy", 0))
    return desired > 0 and int(status.get("currentHealthy", 0)) >= desired


def _check_and_decrement(
    store: Store, pdbs: ResourceType, pdb: dict[str, Any], pod_name: str, dry_run: bool
) -> None:
    meta, status = pdb["metadata"], pdb.get("status") or {}
    pdb_name = meta["name"]
    # Only enforced when the test (or sync_pdb_status) recorded an observedGeneration: status is hand-made here.
    if "observedGeneration" in status and int(status["observedGeneration"]) < int(meta.get("generation", 1)):
        cause = f"The disruption budget {pdb_name} is still being processed by the server."
        raise ApiError(
            429,
            PDB_BLOCKED,
            details={"causes": [{"reason": "DisruptionBudget", "message": cause}], "retryAfterSeconds": 10},
            retry_after=10,
        )
    allowed = int(status.get("disruptionsAllowed", 0))
    if allowed < 0:
        raise ApiError(
            403, f'poddisruptionbudgets.policy "{pdb_name}" is forbidden: pdb disruptions allowed is negative'
        )
    if allowed == 0:
        cause = (
            f"The disruption budget {pdb_name} needs {int(status.get('desiredHealthy', 0))} healthy pods "
            f"and has {int(status.get('currentHealthy', 0))} currently"
        )
        raise ApiError(
            429, PDB_BLOCKED, details={"causes": [{"reason": "DisruptionBudget", "message": cause}]}
        )
    if dry_run:
        return

    def decrement(obj: dict[str, Any]) -> None:
        new_status = obj.setdefault("status", {})
        new_status["disruptionsAllowed"] = allowed - 1
        new_status.setdefault("disruptedPods", {})[pod_name] = rfc3339(store.clock())

    store.modify(pdbs, meta["namespace"], pdb_name, decrement)


def bind(
    store: Store,
    registry: ResourceRegistry,
    namespace: str,
    name: str,
    binding: dict[str, Any],
    dry_run: bool,
) -> dict[str, Any]:
    """pods/binding (and the `bindings` collection): set spec.nodeName once, as the scheduler does."""
    pods, _ = _types(registry)
    target = binding.get("target") or {}
    node = target.get("name")
    if not node or target.get("kind", "Node") not in ("Node", ""):
        raise invalid("Binding", name, "target: Invalid value: must be a Node with a name")
    with store.lock:
        pod = store.get(pods, namespace, name)
        if pod["metadata"].get("deletionTimestamp"):
            raise conflict("pods/binding", name, f"pod {name} is being deleted, cannot be assigned to a host")
        current = (pod.get("spec") or {}).get("nodeName")
        if current:
            raise conflict("pods/binding", name, f'pod {name} is already assigned to node "{current}"')

        def assign(obj: dict[str, Any]) -> None:
            obj.setdefault("spec", {})["nodeName"] = node
            _set_condition(
                obj,
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": rfc3339(store.clock())},
            )

        store.modify(pods, namespace, name, assign, dry_run)
    return success_status(201)


def _scaled(value: Any, total: int) -> int:
    if isinstance(value, str) and value.endswith("%"):
        return math.ceil(total * int(value[:-1]) / 100)
    return int(value)


def sync_pdb_status(store: Store, registry: ResourceRegistry, namespace: str | None = None) -> None:
    """Recompute PDB status from the pods, as the disruption controller does (call it when tests need it)."""
    pods, pdbs = _types(registry)
    with store.lock:
        for pdb in store.select(pdbs, namespace).items:
            ns = pdb["metadata"]["namespace"]
            spec = pdb.get("spec") or {}
            covered = [
                pod
                for pod in store.select(pods, ns).items
                if _selects(pdb, pod)
                and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
                and not pod["metadata"].get("deletionTimestamp")
            ]
            expected = len(covered)
            healthy = sum(1 for pod in covered if pod_ready(pod))
            if "minAvailable" in spec:
                desired = _scaled(spec["minAvailable"], expected)
            elif "maxUnavailable" in spec:
                desired = max(0, expected - _scaled(spec["maxUnavailable"], expected))
            else:
                desired = expected
            allowed = max(0, healthy - desired)
            disruption_allowed = {
                "type": "DisruptionAllowed",
                "status": "True" if allowed > 0 else "False",
                "reason": "SufficientPods" if allowed > 0 else "InsufficientPods",
                "message": "",
                "observedGeneration": pdb["metadata"].get("generation", 1),
                "lastTransitionTime": rfc3339(store.clock()),
            }
            new_status = {
                "observedGeneration": pdb["metadata"].get("generation", 1),
                "expectedPods": expected,
                "currentHealthy": healthy,
                "desiredHealthy": desired,
                "disruptionsAllowed": allowed,
                "disruptedPods": {},
                "conditions": [disruption_allowed],
            }
            store.modify(pdbs, ns, pdb["metadata"]["name"], _status_setter(new_status))


def _status_setter(status: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    def put(obj: dict[str, Any]) -> None:
        obj["status"] = status

    return put
