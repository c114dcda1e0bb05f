"""An in-process fake Kubernetes API server for the unmodified `kubernetes` Python client.

    with FakeApiServer() as api:
        core = kubernetes.client.CoreV1Api(kubernetes.client.ApiClient(api.client_configuration()))
        api.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
        core.list_node()

This module is the test-facing object: lifecycle, client configuration, direct store access, faults, request
log and authoriser. HTTP handling lives in kube_http, storage semantics in kube_store, server-side logic
(defaults, eviction, binding) in kube_admission. TESTING.md says why the fake exists and what it promises.
"""

from __future__ import annotations

import builtins
import copy
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Self

import kubernetes.client

from tests.fakes import kube_admission
from tests.fakes.kube_errors import not_found
from tests.fakes.kube_faults import FaultQueue
from tests.fakes.kube_http import KubeHttpServer, KubeRequestHandler, RecordedRequest
from tests.fakes.kube_patch import JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH
from tests.fakes.kube_resources import ResourceRegistry, ResourceType, crd_object, crd_resource_types
from tests.fakes.kube_selectors import make_matcher
from tests.fakes.kube_store import DELETED, Store, WatchEvent

__all__ = ["Authorizer", "FakeApiServer", "RecordedRequest"]

Authorizer = Callable[[str, str, str, str, str], bool]
"""(verb, group, resource, subresource, namespace) -> allowed; "" stands for none/core/cluster scope."""

_PATCH_TYPES = {"merge": MERGE_PATCH, "strategic": STRATEGIC_MERGE_PATCH, "json": JSON_PATCH}
_CRDS = ("apiextensions.k8s.io", "customresourcedefinitions")


class FakeApiServer:
    """A Kubernetes API server stand-in on 127.0.0.1:<free port>, good enough for client-level tests."""

    def __init__(
        self,
        *,
        bookmark_interval: float = 1.0,
        history_limit: int = 10_000,
        default_watch_timeout: float = 300.0,
        clock: Callable[[], float] = time.time,
        user: str = "system:serviceaccount:tidal-system:tidal",
        namespaces: Iterable[str] | None = None,
    ) -> None:
        """`bookmark_interval`: seconds between BOOKMARK events on watches that allow them.
        `history_limit`: watch events kept for resuming watches (older resourceVersions get 410).
        `default_watch_timeout`: how long a watch without timeoutSeconds stays open.
        `clock`: epoch seconds for timestamps. `user`: the name in Forbidden messages.
        `namespaces`: when given, the API server's NamespaceLifecycle admission: these Namespaces exist,
        and creating a namespaced object anywhere else is 404 `namespaces "x" not found` (by default every
        namespace is taken as existing).
        """
        self.bookmark_interval = bookmark_interval
        self.default_watch_timeout = default_watch_timeout
        self.user = user
        self.registry = ResourceRegistry()
        self.store = Store(clock=clock, history_limit=history_limit)
        self.store.listeners.append(self._on_crd_event)
        self.faults = FaultQueue()
        self.requests: list[RecordedRequest] = []
        self.on_request: Callable[[RecordedRequest], None] | None = None
        self.authorizer: Authorizer | None = None
        self.server_errors: list[BaseException] = []
        self._server: KubeHttpServer | None = None
        self._thread: threading.Thread | None = None
        self.enforce_namespaces = namespaces is not None
        for name in namespaces or ():
            self.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})

    # --- lifecycle -------------------------------------------------------------------------------------

    def start(self) -> Self:
        """Start serving in a daemon thread (idempotent)."""
        if self._server is None:
            self.store.closed = False
            handler = type("BoundHandler", (KubeRequestHandler,), {"fake": self})
            self._server = KubeHttpServer(("127.0.0.1", 0), handler)
            self._thread = threading.Thread(
                target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-kube-apiserver"
            )
            self._thread.daemon = True
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, end open watches and close every client connection."""
        server, self._server = self._server, None
        if server is None:
            return
        self.store.close()
        server.shutdown()
        server.close_all_connections()
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """Base URL, e.g. http://127.0.0.1:43121."""
        if self._server is None:
            raise RuntimeError("FakeApiServer is not running")
        return f"http://127.0.0.1:{self._server.server_port}"

    def client_configuration(self) -> kubernetes.client.Configuration:
        """A client Configuration pointing at this server (no auth, no TLS)."""
        return kubernetes.client.Configuration(host=self.url)

    def api_client(self) -> kubernetes.client.ApiClient:
        """A fresh ApiClient for this server. Its `close()` leaves urllib3 connections open until GC;
        `rest_client.pool_manager.clear()` closes them."""
        return kubernetes.client.ApiClient(self.client_configuration())

    # --- direct store access for test setup and assertions ---------------------------------------------

    @property
    def resource_version(self) -> str:
        """The latest resourceVersion handed out."""
        return str(self.store.resource_version)

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create an object from its apiVersion/kind with the API's defaulting, but keeping any status given
        (an API create resets it for pods, PDBs, workloads and custom resources): handy for test setup."""
        rt = self.registry.for_kind(obj.get("apiVersion", ""), obj.get("kind", ""))
        namespace = (obj.get("metadata") or {}).get("namespace")
        return copy.deepcopy(self.admit_and_create(rt, obj, namespace, dry_run=False))

    def get(self, resource: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        """The object, or None. `resource`: "pods", "podgroups.scheduling.run.ai", "pdb"...; namespace None
        for cluster-scoped resources."""
        found = self.store.find(self.registry.resolve(resource), namespace, name)
        return copy.deepcopy(found) if found is not None else None

    def list(
        self,
        resource: str,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[dict[str, Any]]:
        """Objects of a resource (all namespaces when namespace is None), optionally selected."""
        rt = self.registry.resolve(resource)
        match = make_matcher(rt, label_selector, field_selector)
        return copy.deepcopy(self.store.select(rt, namespace, match).items)

    def update(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Replace a whole object, status included; a metadata.resourceVersion in `obj` must be current."""
        rt = self.registry.for_kind(obj.get("apiVersion", ""), obj.get("kind", ""))
        meta = obj.get("metadata") or {}
        return copy.deepcopy(
            self.store.update(rt, meta.get("namespace"), meta.get("name", ""), obj, whole=True)
        )

    def patch(
        self, resource: str, namespace: str | None, name: str, patch: Any, patch_type: str = "merge"
    ) -> dict[str, Any]:
        """Patch the main resource ("merge", "strategic" or "json"); status is protected as over HTTP."""
        rt = self.registry.resolve(resource)
        return copy.deepcopy(self.store.patch(rt, namespace, name, patch, _PATCH_TYPES[patch_type]))

    def patch_status(
        self,
        resource: str,
        namespace: str | None,
        name: str,
        status: dict[str, Any],
        patch_type: str | None = None,
    ) -> dict[str, Any]:
        """Patch `.status` as a kubelet or controller would: strategic merge for built-in types (conditions
        merge by type), merge patch for custom resources; `patch_type` overrides ("merge", "strategic")."""
        rt = self.registry.resolve(resource)
        content_type = _PATCH_TYPES[patch_type or ("merge" if rt.custom else "strategic")]
        sub = "status" if rt.has_status else None
        return copy.deepcopy(self.store.patch(rt, namespace, name, {"status": status}, content_type, sub))

    def delete(
        self, resource: str, namespace: str | None, name: str, *, grace_period_seconds: int | None = None
    ) -> dict[str, Any] | None:
        """Delete as the API does; returns the object when finalizers keep it, None once it is gone."""
        rt = self.registry.resolve(resource)
        options = {} if grace_period_seconds is None else {"gracePeriodSeconds": grace_period_seconds}
        obj, removed = self.store.delete(rt, namespace, name, options)
        return None if removed else copy.deepcopy(obj)

    def drop_watches(self) -> None:
        """End every open watch stream, as an API server restart or a load balancer cutting idle connections
        does; clients reconnect from their last resourceVersion (and relist after a :meth:`compact`)."""
        self.store.drop_watches()

    def compact(self) -> None:
        """Drop the watch history: watches and continue tokens from older resourceVersions get 410."""
        self.store.compact()

    def sync_pdb_status(self, namespace: str | None = None) -> None:
        """Recompute PodDisruptionBudget status from pods, as the disruption controller would."""
        kube_admission.sync_pdb_status(self.store, self.registry, namespace)

    def register_crd(
        self,
        group: str,
        version: str,
        plural: str,
        kind: str,
        namespaced: bool = True,
        *,
        status_subresource: bool = True,
        short_names: tuple[str, ...] = (),
    ) -> ResourceType:
        """Install a CustomResourceDefinition (adding `version` to an existing one) and serve it."""
        crds = self.registry.resolve("customresourcedefinitions")
        wanted = crd_object(group, version, plural, kind, namespaced, status_subresource, short_names)
        existing = self.store.find(crds, None, wanted["metadata"]["name"])
        if existing is None:
            self.store.create(crds, wanted)
        else:
            served = [v for v in existing["spec"]["versions"] if v["name"] != version]
            new_version = wanted["spec"]["versions"][0] | {"storage": False}

            def add_version(crd: dict[str, Any]) -> None:
                crd["spec"]["versions"] = [*served, new_version]

            self.store.modify(crds, None, wanted["metadata"]["name"], add_version)
        rt = self.registry.lookup(group, version, plural)
        assert rt is not None
        return rt

    def unserve(self, group: str, version: str) -> builtins.list[ResourceType]:
        """Stop serving every built-in resource of a group/version, as a cluster without that API (an older
        Kubernetes, a disabled feature); returns the types, for `registry.register` to serve them again."""
        gone = [rt for rt in self.registry.all() if (rt.group, rt.version) == (group, version)]
        for rt in gone:
            self.registry.unregister(rt.group, rt.version, rt.plural)
        return gone

    # --- internals shared by HTTP handlers and direct access -------------------------------------------

    def admit_and_create(
        self, rt: ResourceType, body: dict[str, Any], namespace: str | None, dry_run: bool = False
    ) -> dict[str, Any]:
        """Create through admission (defaults) and storage: the one path for HTTP and direct creates.
        Returns the stored object itself; do not mutate it."""
        obj = copy.deepcopy(body)
        if self.enforce_namespaces and rt.namespaced:
            # NamespaceLifecycle: nothing is created in a namespace that does not exist.
            where = namespace or (obj.get("metadata") or {}).get("namespace") or "default"
            if self.store.find(self.registry.resolve("namespaces"), None, where) is None:
                raise not_found("namespaces", where)
        kube_admission.default_object(rt, obj, self.store, self.registry)
        return self.store.create(rt, obj, namespace, dry_run)

    def _on_crd_event(self, event: WatchEvent) -> None:
        # Runs under the store lock: keep the served resource types in step with CRD objects.
        if event.storage_key != _CRDS:
            return
        old_types = crd_resource_types(event.old) if event.old else []
        new_types = [] if event.type == DELETED else crd_resource_types(event.obj)
        for rt in old_types:
            if rt not in new_types:
                self.registry.unregister(rt.group, rt.version, rt.plural)
        for rt in new_types:
            self.registry.register(rt)
        if event.type == DELETED:
            for rt in crd_resource_types(event.obj):
                self.registry.unregister(rt.group, rt.version, rt.plural)
                self.store.drop(rt.storage_key)
