"""The changes tidal makes to the cluster: cordon, evict, delete nodes, label, events, the status ConfigMap.

Expected outcomes (a PDB saying "not now", an object already gone) come back as results; anything else raises
:class:`KubeApiError` with one line. In dry-run every mutation only logs what it would do, except tidal's own
informational objects, which are how a dry run tells people what would happen: Events, and the status
ConfigMap (marked ``dryRun: "true"``).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import structlog
from kubernetes.client.exceptions import ApiException

from autoscaler.core.model import TAINT_DISRUPTED, Pod
from autoscaler.runtime.kube.client import KubeApiError, KubeClient, api_error_message

__all__ = ["ANNOTATION_CORDONED", "ClusterActions", "EvictionResult", "dies_with_node"]

# Set when tidal (not an admin) made a node unschedulable, so uncordon never undoes someone else's cordon.
ANNOTATION_CORDONED = "tidal.dev/cordoned"
_PATCH_ATTEMPTS = 5
# 409: a resourceVersion precondition failed; 422: a JSON-patch "test" op failed. Both mean "re-read".
_STALE = (409, 422)


class EvictionResult(enum.Enum):
    """How an eviction ended."""

    EVICTED = "evicted"  # the API accepted it; the pod is terminating
    BLOCKED = "blocked"  # HTTP 429: a PodDisruptionBudget forbids it right now (never forced)
    GONE = "gone"  # HTTP 404: the pod no longer exists
    FAILED = "failed"  # anything else; the reason is logged


MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
_FRESH_PAGE = 500


def dies_with_node(obj: Mapping[str, Any]) -> bool:
    """Whether a pod, as the API server returned it, would be lost with its node: anything but a mirror pod,
    a DaemonSet's pod or one that finished. Read from the raw object and leniently: a pod with a field tidal
    does not understand (or an owner it cannot read) counts as one that would be lost."""
    meta = obj.get("metadata")
    status = obj.get("status")
    if not isinstance(meta, Mapping):
        return True
    if isinstance(status, Mapping) and status.get("phase") in ("Succeeded", "Failed"):
        return False
    annotations = meta.get("annotations")
    if isinstance(annotations, Mapping) and MIRROR_ANNOTATION in annotations:
        return False
    owners = meta.get("ownerReferences")
    if isinstance(owners, list):
        for ref in owners:
            if isinstance(ref, Mapping) and ref.get("controller") is True and ref.get("kind") == "DaemonSet":
                return False
    return True


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _pointer(key: str) -> str:
    """A map key as a JSON-pointer segment (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


class ClusterActions:
    """Mutations of the cluster, all through the client's rate limiter."""

    def __init__(
        self,
        client: KubeClient,
        *,
        dry_run: bool = False,
        component: str = "tidal",
        log: Any = None,
    ) -> None:
        self._client = client
        self.dry_run = dry_run
        self.component = component
        self._log = log if log is not None else structlog.get_logger(__name__)
        self._core = client.core

    # --- helpers -------------------------------------------------------------------------------------------

    def _call(self, operation: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return self._client.call(fn, *args, **kwargs)
        except ApiException as exc:
            raise KubeApiError(operation, int(exc.status or 0), api_error_message(exc)) from None

    def _would(self, action: str, **fields: Any) -> None:
        self._log.info("would " + action, dry_run=True, **fields)

    # --- nodes ---------------------------------------------------------------------------------------------

    def cordon(self, node_name: str, *, taint_key: str = TAINT_DISRUPTED) -> None:
        """Make the node unschedulable and add the ``taint_key:NoSchedule`` taint; a no-op when both hold.

        Taints are an atomic list, so the write is a JSON patch guarded by a resourceVersion test: a taint
        another controller adds at the same moment makes our patch fail and be redone, not vanish.
        """
        if self.dry_run:
            self._would("cordon node", node=node_name, taint=taint_key)
            return
        self._update_node(
            f"cordon node {node_name}", node_name, lambda node: self._cordon_ops(node, taint_key)
        )
        self._log.info("node cordoned", node=node_name, taint=taint_key)

    def uncordon(self, node_name: str, *, taint_key: str = TAINT_DISRUPTED) -> None:
        """Remove tidal's taint, and make the node schedulable again only if tidal made it unschedulable."""
        if self.dry_run:
            self._would("uncordon node", node=node_name, taint=taint_key)
            return
        self._update_node(
            f"uncordon node {node_name}", node_name, lambda node: self._uncordon_ops(node, taint_key)
        )
        self._log.info("node uncordoned", node=node_name, taint=taint_key)

    @staticmethod
    def _cordon_ops(node: Mapping[str, Any], taint_key: str) -> list[dict[str, Any]]:
        spec = node.get("spec") or {}
        annotations = (node.get("metadata") or {}).get("annotations")
        taints = list(spec.get("taints") or [])
        ops: list[dict[str, Any]] = []
        if not any(t.get("key") == taint_key and t.get("effect") == "NoSchedule" for t in taints):
            taints.append({"key": taint_key, "effect": "NoSchedule"})
            ops.append({"op": "add", "path": "/spec/taints", "value": taints})
        if not spec.get("unschedulable"):
            ops.append({"op": "add", "path": "/spec/unschedulable", "value": True})
            if annotations is None:
                ops.append(
                    {"op": "add", "path": "/metadata/annotations", "value": {ANNOTATION_CORDONED: "true"}}
                )
            else:
                path = f"/metadata/annotations/{_pointer(ANNOTATION_CORDONED)}"
                ops.append({"op": "add", "path": path, "value": "true"})
        return ops

    @staticmethod
    def _uncordon_ops(node: Mapping[str, Any], taint_key: str) -> list[dict[str, Any]]:
        spec = node.get("spec") or {}
        annotations = (node.get("metadata") or {}).get("annotations") or {}
        taints = list(spec.get("taints") or [])
        kept = [t for t in taints if not (t.get("key") == taint_key and t.get("effect") == "NoSchedule")]
        ops: list[dict[str, Any]] = []
        if len(kept) != len(taints):
            ops.append({"op": "add", "path": "/spec/taints", "value": kept})
        if ANNOTATION_CORDONED in annotations:
            ops.append({"op": "remove", "path": f"/metadata/annotations/{_pointer(ANNOTATION_CORDONED)}"})
            if spec.get("unschedulable"):
                ops.append({"op": "add", "path": "/spec/unschedulable", "value": False})
        return ops

    def _update_node(
        self, operation: str, name: str, ops_for: Callable[[Mapping[str, Any]], list[dict[str, Any]]]
    ) -> None:
        for _ in range(_PATCH_ATTEMPTS):
            node = self._call(operation, self._core.read_node, name)
            ops = ops_for(node)
            if not ops:
                return
            rv = node["metadata"]["resourceVersion"]
            body = [{"op": "test", "path": "/metadata/resourceVersion", "value": rv}, *ops]
            try:
                self._client.call(self._core.patch_node, name, body)
                return
            except ApiException as exc:
                if exc.status not in _STALE:
                    raise KubeApiError(operation, int(exc.status or 0), api_error_message(exc)) from None
        raise KubeApiError(operation, 409, f"node kept changing during {_PATCH_ATTEMPTS} attempts")

    def delete_node(self, name: str) -> bool:
        """Delete the Node object; False when it was already gone (or in dry-run)."""
        if self.dry_run:
            self._would("delete node", node=name)
            return False
        try:
            self._client.call(self._core.delete_node, name)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise KubeApiError(f"delete node {name}", int(exc.status or 0), api_error_message(exc)) from None
        self._log.info("node deleted", node=name)
        return True

    def node_for(self, provider_id: str) -> str | None:
        """The name of the Node whose ``spec.providerID`` is ``provider_id``, read from the API server itself
        (not the cache), or None. A full list: only asked before terminating an instance the cache shows
        without a Node."""
        token = ""
        while True:
            kwargs: dict[str, Any] = {"limit": _FRESH_PAGE}
            if token:
                kwargs["_continue"] = token
            body = self._call("list nodes", self._core.list_node, **kwargs)
            body = body if isinstance(body, Mapping) else {}
            for obj in body.get("items") or ():
                spec = obj.get("spec") if isinstance(obj, Mapping) else None
                if isinstance(spec, Mapping) and spec.get("providerID") == provider_id:
                    return str((obj.get("metadata") or {}).get("name") or "")
            token = str((body.get("metadata") or {}).get("continue") or "")
            if not token:
                return None

    def annotate_node(self, name: str, annotations: Mapping[str, str | None]) -> None:
        """Set node annotations; a None value removes that annotation."""
        self._merge_node_metadata(name, "annotations", annotations)

    def label_node(self, name: str, labels: Mapping[str, str | None]) -> None:
        """Set node labels; a None value removes that label."""
        self._merge_node_metadata(name, "labels", labels)

    def _merge_node_metadata(self, name: str, field: str, values: Mapping[str, str | None]) -> None:
        if not values:
            return
        if self.dry_run:
            self._would(f"set node {field}", node=name, **{field: dict(values)})
            return
        self._call(
            f"set {field} on node {name}",
            self._core.patch_node,
            name,
            {"metadata": {field: dict(values)}},
            _content_type="application/merge-patch+json",
        )

    # --- pods ----------------------------------------------------------------------------------------------

    def annotate_pod(self, namespace: str, name: str, annotations: Mapping[str, str | None]) -> None:
        """Set pod annotations (a merge patch of metadata only); a None value removes that annotation."""
        if not annotations:
            return
        if self.dry_run:
            self._would("set pod annotations", namespace=namespace, pod=name, annotations=dict(annotations))
            return
        self._call(
            f"set annotations on pod {namespace}/{name}",
            self._core.patch_namespaced_pod,
            name,
            namespace,
            {"metadata": {"annotations": dict(annotations)}},
            _content_type="application/merge-patch+json",
        )

    def workload_on(self, node_name: str) -> list[str]:
        """``namespace/name`` of every pod the API server has bound to ``node_name`` that would be lost with
        it (all but DaemonSet, mirror and finished pods), read from the server itself, not the informer cache:
        the last look before a Node is deleted must see a pod the scheduler bound a moment ago. Raises
        :class:`KubeApiError` when the server cannot say (the Node must then stay)."""
        keys: list[str] = []
        token = ""
        while True:
            kwargs: dict[str, Any] = {"field_selector": f"spec.nodeName={node_name}", "limit": _FRESH_PAGE}
            if token:
                kwargs["_continue"] = token
            body = self._call(
                f"list pods on node {node_name}", self._core.list_pod_for_all_namespaces, **kwargs
            )
            body = body if isinstance(body, Mapping) else {}
            for obj in body.get("items") or ():
                if isinstance(obj, Mapping) and dies_with_node(obj):
                    meta = obj.get("metadata") or {}
                    keys.append(f"{meta.get('namespace') or 'default'}/{meta.get('name') or '?'}")
            token = str((body.get("metadata") or {}).get("continue") or "")
            if not token:
                return sorted(keys)

    def evict(self, namespace: str, name: str, *, grace_period_seconds: int | None = None) -> EvictionResult:
        """Ask the Eviction API to remove a pod, honouring PodDisruptionBudgets (429 is BLOCKED, never forced).

        In dry-run the eviction is sent with ``dryRun=All``: the API server checks the budgets and changes
        nothing, so a dry run reports the evictions a PDB would block.
        """
        extra: dict[str, Any] = {}
        if self.dry_run:
            self._would("evict pod", namespace=namespace, pod=name, grace_period_seconds=grace_period_seconds)
            extra["dry_run"] = "All"
        body: dict[str, Any] = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        }
        if grace_period_seconds is not None:
            body["deleteOptions"] = {"gracePeriodSeconds": grace_period_seconds}
        try:
            self._client.call(self._core.create_namespaced_pod_eviction, name, namespace, body, **extra)
        except ApiException as exc:
            if exc.status == 429:
                self._log.info(
                    "eviction blocked", namespace=namespace, pod=name, reason=api_error_message(exc)
                )
                return EvictionResult.BLOCKED
            if exc.status == 404:
                return EvictionResult.GONE
            self._log.warning(
                "eviction failed",
                namespace=namespace,
                pod=name,
                status=exc.status,
                error=api_error_message(exc),
            )
            return EvictionResult.FAILED
        except Exception as exc:  # connection trouble is an outcome of this pod's drain, not a crash
            self._log.warning("eviction failed", namespace=namespace, pod=name, error=type(exc).__name__)
            return EvictionResult.FAILED
        if not self.dry_run:
            self._log.info("pod evicted", namespace=namespace, pod=name)
        return EvictionResult.EVICTED

    # --- events --------------------------------------------------------------------------------------------

    def pod_event(self, pod: Pod, *, reason: str, message: str, event_type: str = "Normal") -> None:
        """Record a core/v1 Event on a pod; failures are logged, never raised."""
        involved = {"kind": "Pod", "apiVersion": "v1", "namespace": pod.namespace, "name": pod.name}
        if pod.uid:
            involved["uid"] = pod.uid
        self._event(pod.namespace, pod.name, involved, reason, message, event_type)

    def node_event(
        self, node_name: str, *, reason: str, message: str, event_type: str = "Normal", uid: str = ""
    ) -> None:
        """Record a core/v1 Event on a node (in ``default``, where kubectl looks); never raises."""
        involved = {"kind": "Node", "apiVersion": "v1", "name": node_name}
        if uid:
            involved["uid"] = uid
        self._event("default", node_name, involved, reason, message, event_type)

    def _event(
        self,
        namespace: str,
        name: str,
        involved: dict[str, str],
        reason: str,
        message: str,
        event_type: str,
    ) -> None:
        now = _now()
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{name}.", "namespace": namespace},
            "involvedObject": involved,
            "reason": reason,
            "message": message[:1024],  # the API server rejects longer messages
            "type": event_type,
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self._client.call(self._core.create_namespaced_event, namespace, body)
        except Exception as exc:  # an event is a courtesy: losing one must never stop an action
            status = getattr(exc, "status", None)
            self._log.warning(
                "event not recorded",
                kind=involved["kind"],
                name=name,
                reason=reason,
                status=status,
                error=api_error_message(exc) if isinstance(exc, ApiException) else type(exc).__name__,
            )

    # --- ConfigMaps ----------------------------------------------------------------------------------------

    def write_status(self, namespace: str, name: str, data: Mapping[str, str]) -> None:
        """Create or replace the ConfigMap ``namespace/name`` (the ``tidal-status``) with ``data`` and a
        ``dryRun`` key, "true" when this replica only reports; written in dry-run too, like Events."""
        data = {**data, "dryRun": "true" if self.dry_run else "false"}
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {"app.kubernetes.io/managed-by": "tidal"},
            },
            "data": dict(data),
        }
        operation = f"write configmap {namespace}/{name}"
        # Replace first: after the first write, every later one is a replace.
        for _ in range(_PATCH_ATTEMPTS):
            try:
                self._client.call(self._core.replace_namespaced_config_map, name, namespace, body)
                return
            except ApiException as exc:
                if exc.status != 404:
                    raise KubeApiError(operation, int(exc.status or 0), api_error_message(exc)) from None
            try:
                self._client.call(self._core.create_namespaced_config_map, namespace, body)
                return
            except ApiException as exc:
                if exc.status != 409:  # 409: another writer created it between our two calls
                    raise KubeApiError(operation, int(exc.status or 0), api_error_message(exc)) from None
        raise KubeApiError(operation, 409, "created and deleted concurrently, gave up")

    def read_configmap(self, namespace: str, name: str) -> dict[str, str] | None:
        """The ConfigMap's ``data``, or None when it does not exist."""
        try:
            body = self._client.call(self._core.read_namespaced_config_map, name, namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise KubeApiError(
                f"read configmap {namespace}/{name}", int(exc.status or 0), api_error_message(exc)
            ) from None
        return {str(k): str(v) for k, v in (body.get("data") or {}).items()}
