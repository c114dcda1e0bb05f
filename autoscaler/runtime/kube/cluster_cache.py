"""The watched picture of the cluster the controller reads: pods, nodes, PDBs, DaemonSets, KAI and DRA objects.

KAI Scheduler's PodGroups and Queues are watched only while their CRDs are served: most clusters do not run
KAI, and a watch on a missing resource would only log 404s. DRA's DeviceClasses, ResourceClaims and
ResourceClaimTemplates are watched the same way, only while the API server serves ``resource.k8s.io/v1``
(Kubernetes 1.34 and later). The group versions are probed again every few minutes, so installing (or
removing) KAI, or upgrading the cluster, needs no tidal restart.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import kubernetes.client
import structlog
from kubernetes.client.exceptions import ApiException

from autoscaler.core.dra import DraObjects
from autoscaler.core.model import Snapshot
from autoscaler.core.quantity import QuantityMemo
from autoscaler.runtime.kube import convert, convert_dra, convert_requests
from autoscaler.runtime.kube.client import KubeClient, api_error_message
from autoscaler.runtime.kube.informer import DELETED, Informer, ListFn

__all__ = [
    "DRA_CLAIMS",
    "DRA_CLAIM_TEMPLATES",
    "DRA_DEVICE_CLASSES",
    "DRA_KINDS",
    "KAI_PODGROUPS",
    "KAI_QUEUES",
    "ClusterCache",
    "CustomKind",
]

log = structlog.get_logger(__name__)

Listener = Callable[[str, str, Any, Any], None]
"""``fn(kind, event_type, old, new)``; kind is one of pods, nodes, pdbs, daemonsets, namespaces, podgroups,
queues, deviceclasses, resourceclaims, resourceclaimtemplates."""


@dataclass(frozen=True, slots=True)
class CustomKind:
    """A resource watched only while its group/version is served (a CRD, or a built-in API that is optional).

    ``unless`` names a kind that, while served, is watched instead (an older version of the same resource);
    a kind with ``follows`` is watched while any of those kinds is (PodTemplates, read only for what refers
    to them), and is listed through the core API."""

    kind: str
    group: str
    version: str
    plural: str
    namespaced: bool
    convert: Callable[[Mapping[str, Any]], Any]
    unless: str = ""
    follows: tuple[str, ...] = ()
    # How a built-in kind is listed: (API class, its all-namespaces list method, its namespaced one).
    builtin: tuple[type[Any], str, str] | None = None


KAI_PODGROUPS = CustomKind(
    "podgroups", convert.KAI_GROUP, "v2alpha2", "podgroups", True, convert.podgroup_from_api
)
KAI_QUEUES = CustomKind("queues", convert.KAI_GROUP, "v2", "queues", False, convert.queue_from_api)
DRA_GROUP = "resource.k8s.io"
DRA_DEVICE_CLASSES = CustomKind(
    "deviceclasses", DRA_GROUP, "v1", "deviceclasses", False, convert_dra.deviceclass_from_dict
)
DRA_CLAIMS = CustomKind(
    "resourceclaims", DRA_GROUP, "v1", "resourceclaims", True, convert_dra.resourceclaim_from_dict
)
DRA_CLAIM_TEMPLATES = CustomKind(
    "resourceclaimtemplates",
    DRA_GROUP,
    "v1",
    "resourceclaimtemplates",
    True,
    convert_dra.resourceclaimtemplate_from_dict,
)
DRA_KINDS = (DRA_DEVICE_CLASSES, DRA_CLAIMS, DRA_CLAIM_TEMPLATES)
# ProvisioningRequests at v1, or at v1beta1 where only that is served; CapacityBuffers; and the PodTemplates
# both refer to, watched only while either is.
PROVISIONING_REQUESTS = CustomKind(
    "provisioningrequests",
    convert_requests.AUTOSCALING_GROUP,
    "v1",
    "provisioningrequests",
    True,
    convert_requests.provisioningrequest_from_api,
)
PROVISIONING_REQUESTS_BETA = CustomKind(
    "provisioningrequests-v1beta1",
    convert_requests.AUTOSCALING_GROUP,
    "v1beta1",
    "provisioningrequests",
    True,
    convert_requests.provisioningrequest_from_api,
    unless="provisioningrequests",
)
CAPACITY_BUFFERS = CustomKind(
    "capacitybuffers",
    convert_requests.AUTOSCALING_GROUP,
    "v1beta1",
    "capacitybuffers",
    True,
    convert_requests.capacitybuffer_from_api,
)
POD_TEMPLATES = CustomKind(
    "podtemplates",
    "",
    "v1",
    "podtemplates",
    True,
    convert_requests.podtemplate_from_api,
    follows=("provisioningrequests", "provisioningrequests-v1beta1", "capacitybuffers"),
    builtin=(
        kubernetes.client.CoreV1Api,
        "list_pod_template_for_all_namespaces",
        "list_namespaced_pod_template",
    ),
)
# The workloads a CapacityBuffer's scalableRef names, read only while CapacityBuffers are served.
DEPLOYMENTS = CustomKind(
    "deployments",
    "apps",
    "v1",
    "deployments",
    True,
    convert_requests.deployment_from_api,
    follows=("capacitybuffers",),
    builtin=(kubernetes.client.AppsV1Api, "list_deployment_for_all_namespaces", "list_namespaced_deployment"),
)
STATEFULSETS = CustomKind(
    "statefulsets",
    "apps",
    "v1",
    "statefulsets",
    True,
    convert_requests.statefulset_from_api,
    follows=("capacitybuffers",),
    builtin=(
        kubernetes.client.AppsV1Api,
        "list_stateful_set_for_all_namespaces",
        "list_namespaced_stateful_set",
    ),
)
REQUEST_KINDS = (
    PROVISIONING_REQUESTS,
    PROVISIONING_REQUESTS_BETA,
    CAPACITY_BUFFERS,
    POD_TEMPLATES,
    DEPLOYMENTS,
    STATEFULSETS,
)


class ClusterCache:
    """Informers for everything a Snapshot holds; ``snapshot()`` is an atomic, sorted copy of all of them.

    ``namespace`` limits pods, PDBs, DaemonSets, PodGroups and ResourceClaims (and their templates) to one
    namespace (tests, single-tenant setups);
    with the default None they are watched cluster-wide, which scale-down needs to see every pod on a node.
    """

    def __init__(
        self,
        client: KubeClient,
        *,
        namespace: str | None = None,
        watch_timeout: int = 300,
        page_size: int = 500,
        crd_probe_interval: float = 180.0,
        backoff_base: float = 0.2,
        backoff_max: float = 30.0,
        custom_kinds: tuple[CustomKind, ...] = (KAI_PODGROUPS, KAI_QUEUES, *DRA_KINDS, *REQUEST_KINDS),
    ) -> None:
        self._client = client
        self._namespace = namespace
        self._options: dict[str, Any] = {
            "page_size": page_size,
            "watch_timeout": watch_timeout,
            "backoff_base": backoff_base,
            "backoff_max": backoff_max,
        }
        self._probe_interval = crd_probe_interval
        self._custom_kinds = custom_kinds
        # One lock for every informer: snapshot() then copies all kinds at one instant.
        self._lock = threading.RLock()
        self._listeners: list[Listener] = []
        self._stop = threading.Event()
        self._probed = threading.Event()
        self._probe_thread: threading.Thread | None = None
        self._probes = 0
        core = client.core
        policy = client.api(kubernetes.client.PolicyV1Api)
        apps = client.api(kubernetes.client.AppsV1Api)
        if namespace:
            pods: ListFn = functools.partial(core.list_namespaced_pod, namespace)
            pdbs: ListFn = functools.partial(policy.list_namespaced_pod_disruption_budget, namespace)
            daemonsets: ListFn = functools.partial(apps.list_namespaced_daemon_set, namespace)
        else:
            pods = core.list_pod_for_all_namespaces
            pdbs = policy.list_pod_disruption_budget_for_all_namespaces
            daemonsets = apps.list_daemon_set_for_all_namespaces
        # Quantities parsed once for every watch: the same few hundred recur across the cluster's objects.
        memo = QuantityMemo()
        self._informers: dict[str, Informer[Any]] = {
            "pods": self._informer("pods", pods, functools.partial(convert.pod_from_api, memo=memo)),
            "nodes": self._informer(
                "nodes", core.list_node, functools.partial(convert.node_from_api, memo=memo)
            ),
            "pdbs": self._informer("pdbs", pdbs, convert.pdb_from_api),
            "daemonsets": self._informer(
                "daemonsets", daemonsets, functools.partial(convert.daemonset_from_dict, memo=memo)
            ),
            # Cluster-wide even in one namespace: a pod affinity term may select pods in any other.
            "namespaces": self._informer("namespaces", core.list_namespace, convert.namespace_from_dict),
        }

    def _informer(
        self, kind: str, list_fn: ListFn, conv: Callable[[Mapping[str, Any]], Any]
    ) -> Informer[Any]:
        informer: Informer[Any] = Informer(
            kind, self._client, list_fn, conv, lock=self._lock, **self._options
        )
        informer.add_listener(functools.partial(self._dispatch, kind))
        return informer

    def _custom_list_fn(self, ck: CustomKind) -> ListFn:
        if ck.builtin is not None:
            api, every, namespaced = ck.builtin
            client = self._client.api(api)
            if self._namespace:
                return functools.partial(getattr(client, namespaced), self._namespace)
            listed: ListFn = getattr(client, every)
            return listed
        custom = self._client.api(kubernetes.client.CustomObjectsApi)
        if not ck.namespaced:
            return functools.partial(custom.list_cluster_custom_object, ck.group, ck.version, ck.plural)
        if self._namespace:
            return functools.partial(
                custom.list_namespaced_custom_object, ck.group, ck.version, self._namespace, ck.plural
            )
        return functools.partial(
            custom.list_custom_object_for_all_namespaces, ck.group, ck.version, ck.plural
        )

    # --- lifecycle -----------------------------------------------------------------------------------------

    def start(self) -> None:
        """Start every informer and the CRD probe (idempotent)."""
        if self._probe_thread is not None:
            return
        self._stop.clear()
        for informer in list(self._informers.values()):
            informer.start()
        self._probe_thread = threading.Thread(target=self._probe_loop, name="crd-probe", daemon=True)
        self._probe_thread.start()

    def stop(self) -> None:
        """Stop the probe and every informer."""
        self._stop.set()
        if self._probe_thread is not None:
            self._probe_thread.join(5.0)
            self._probe_thread = None
        with self._lock:
            informers = list(self._informers.values())
        for informer in informers:
            informer.stop()

    def has_synced(self) -> bool:
        """Every watched kind has been listed once (and the CRDs probed once)."""
        with self._lock:
            informers = list(self._informers.values())
        return self._probed.is_set() and all(i.has_synced() for i in informers)

    def unsynced(self) -> list[str]:
        """The kinds not listed yet, each with why its last attempt failed (``pods (HTTP 403: …)``)."""
        with self._lock:
            informers = dict(self._informers)
        out = [
            f"{kind} ({informer.last_error})" if informer.last_error else kind
            for kind, informer in sorted(informers.items())
            if not informer.has_synced()
        ]
        if not self._probed.is_set():
            out.append("custom resource discovery")
        return out

    def wait_for_sync(self, timeout: float) -> bool:
        """Block until :meth:`has_synced`, at most ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        if not self._probed.wait(timeout):
            return False
        while True:
            with self._lock:
                informers = list(self._informers.values())
            for informer in informers:
                if not informer.wait_for_sync(max(0.0, deadline - time.monotonic())):
                    return False
            if self.has_synced():  # a CRD may have appeared meanwhile: wait for its informer too
                return True
            if time.monotonic() >= deadline:
                return False

    # --- reading -------------------------------------------------------------------------------------------

    def add_listener(self, fn: Listener) -> None:
        """Call ``fn(kind, event_type, old, new)`` on the informer thread after each cache change."""
        self._listeners.append(fn)

    def snapshot(self) -> Snapshot:
        """A consistent copy of every kind, each sorted by (namespace, name) so runs are deterministic.

        A kind that has not changed since the last snapshot hands over the same tuple: with 100,000 pods,
        copying and sorting them again at every reconcile cost more than deciding what to do with them."""
        with self._lock:
            return Snapshot(
                pods=self._items("pods"),
                nodes=self._items("nodes"),
                pdbs=self._items("pdbs"),
                daemonsets=self._items("daemonsets"),
                podgroups=self._items("podgroups"),
                queues=self._items("queues"),
                namespaces=dict(self._items("namespaces")),
                dra=self._dra(),
                provisioning_requests=(
                    self._items(PROVISIONING_REQUESTS.kind) + self._items(PROVISIONING_REQUESTS_BETA.kind)
                ),
                capacity_buffers=self._items(CAPACITY_BUFFERS.kind),
                pod_templates=self._items(POD_TEMPLATES.kind),
                workloads=(*self._items(DEPLOYMENTS.kind), *self._items(STATEFULSETS.kind)),
            )

    def dra_objects(self) -> DraObjects:
        """The DRA objects, copied at one instant with each other (empty while ``resource.k8s.io/v1`` is not
        served), sorted by (namespace, name)."""
        with self._lock:
            return self._dra()

    def _dra(self) -> DraObjects:
        return DraObjects(
            device_classes=self._items(DRA_DEVICE_CLASSES.kind),
            claims=self._items(DRA_CLAIMS.kind),
            claim_templates=self._items(DRA_CLAIM_TEMPLATES.kind),
            served=all(ck in self._custom_kinds and ck.kind in self._informers for ck in DRA_KINDS),
        )

    def _items(self, kind: str) -> tuple[Any, ...]:
        informer = self._informers.get(kind)
        return informer.sorted_items() if informer is not None else ()

    def watched_kinds(self) -> list[str]:
        """Kinds currently watched (the KAI ones only while their CRDs exist)."""
        with self._lock:
            return sorted(self._informers)

    def stats(self) -> dict[str, dict[str, int]]:
        """Per kind: objects, lists, relists, watches, watch_restarts, watch_errors, decode_errors, synced."""
        with self._lock:
            informers = dict(self._informers)
            result = {kind: informer.stats() for kind, informer in informers.items()}
            result["crd_probe"] = {"probes": self._probes}
            return result

    # --- internals -------------------------------------------------------------------------------------------

    def _dispatch(self, kind: str, etype: str, old: Any, new: Any) -> None:
        for fn in list(self._listeners):
            try:
                fn(kind, etype, old, new)
            except Exception:
                log.exception("cluster cache listener failed", kind=kind, event_type=etype)

    def _probe_loop(self) -> None:
        while not self._stop.is_set():
            self.probe_custom_kinds()
            self._probed.set()
            self._stop.wait(self._probe_interval)

    def _served(self, ck: CustomKind, discovered: dict[tuple[str, str], Any]) -> bool | None:
        """Whether the API server serves the custom kind; None when the probe itself failed.

        ``discovered`` holds this round's discovery documents, so kinds of one group/version cost one request.
        """
        custom = self._client.api(kubernetes.client.CustomObjectsApi)
        try:
            key = (ck.group, ck.version)
            if key not in discovered:
                try:
                    discovered[key] = self._client.call(custom.get_api_resources, ck.group, ck.version)
                except Exception as exc:  # the same answer for every kind of this group/version
                    discovered[key] = exc
            body = discovered[key]
            if isinstance(body, Exception):
                raise body
        except ApiException as exc:
            if exc.status == 404:
                return False
            log.warning(
                "custom resource probe failed",
                kind=ck.kind,
                group_version=f"{ck.group}/{ck.version}",
                status=exc.status,
                error=api_error_message(exc),
            )
            return None
        except Exception as exc:  # connection trouble: keep the current state, try again next round
            log.warning("custom resource probe failed", kind=ck.kind, error=type(exc).__name__)
            return None
        return any(r.get("name") == ck.plural for r in (body or {}).get("resources") or ())

    def probe_custom_kinds(self) -> None:
        """Start informers for custom kinds that became served, stop those that went away."""
        self._probes += 1
        discovered: dict[tuple[str, str], Any] = {}
        served = {ck.kind: self._served(ck, discovered) for ck in self._custom_kinds if not ck.follows}
        for ck in self._custom_kinds:
            if ck.unless and served.get(ck.kind) and served.get(ck.unless):
                served[ck.kind] = False  # the newer version is watched instead
        for ck in self._custom_kinds:
            if ck.follows:
                states = [served.get(k) for k in ck.follows]
                served[ck.kind] = True if any(states) else (None if None in states else False)
        if self._stop.is_set():
            return
        started: list[Informer[Any]] = []
        removed: list[tuple[CustomKind, Informer[Any]]] = []
        # Swap all kinds in one step, so has_synced() never sees half of a probe round.
        with self._lock:
            for ck in self._custom_kinds:
                running = self._informers.get(ck.kind)
                if served[ck.kind] and running is None:
                    informer = self._informer(ck.kind, self._custom_list_fn(ck), ck.convert)
                    self._informers[ck.kind] = informer
                    started.append(informer)
                elif served[ck.kind] is False and running is not None:
                    del self._informers[ck.kind]
                    removed.append((ck, running))
        for informer in started:
            informer.start()
            log.info("watching custom resource", kind=informer.kind)
        for ck, informer in removed:
            informer.stop()
            for item in informer.items():
                self._dispatch(ck.kind, DELETED, item, None)
            log.info("custom resource gone", kind=ck.kind, group_version=f"{ck.group}/{ck.version}")
