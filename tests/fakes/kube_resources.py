"""The resource types the fake API server serves, and the discovery documents describing them."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

STANDARD_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True)
class ResourceType:
    """One served (group, version, plural); objects are stored per (group, plural), shared by versions."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    subresources: frozenset[str] = field(default_factory=frozenset)
    short_names: tuple[str, ...] = ()
    custom: bool = False
    verbs: tuple[str, ...] = STANDARD_VERBS

    @property
    def api_version(self) -> str:
        """`v1` for the core group, `group/version` otherwise."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def storage_key(self) -> tuple[str, str]:
        """Key of the object store; all versions of a resource share it, as in etcd."""
        return (self.group, self.plural)

    @property
    def qualified(self) -> str:
        """`pods`, `podgroups.scheduling.run.ai`: how error messages name the resource."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def list_kind(self) -> str:
        """Kind of a list response."""
        return f"{self.kind}List"

    @property
    def has_status(self) -> bool:
        """True when writes to the main resource must not touch `.status` (status subresource enabled)."""
        return "status" in self.subresources


def _rt(
    group: str,
    version: str,
    plural: str,
    kind: str,
    namespaced: bool,
    subresources: tuple[str, ...] = (),
    short_names: tuple[str, ...] = (),
    verbs: tuple[str, ...] = STANDARD_VERBS,
) -> ResourceType:
    return ResourceType(
        group, version, plural, kind, namespaced, frozenset(subresources), short_names, False, verbs
    )


BUILTIN_RESOURCES: tuple[ResourceType, ...] = (
    _rt("", "v1", "pods", "Pod", True, ("status", "eviction", "binding"), ("po",)),
    _rt("", "v1", "nodes", "Node", False, ("status",), ("no",)),
    _rt("", "v1", "namespaces", "Namespace", False, ("status", "finalize"), ("ns",)),
    _rt("", "v1", "events", "Event", True, (), ("ev",)),
    _rt("", "v1", "configmaps", "ConfigMap", True, (), ("cm",)),
    _rt("", "v1", "secrets", "Secret", True),
    _rt("", "v1", "services", "Service", True, ("status",), ("svc",)),
    _rt("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", True, ("status",), ("pvc",)),
    _rt("", "v1", "persistentvolumes", "PersistentVolume", False, ("status",), ("pv",)),
    _rt("", "v1", "bindings", "Binding", True, verbs=("create",)),
    _rt("", "v1", "podtemplates", "PodTemplate", True, (), ("podtemplate",)),
    _rt("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, ("status",), ("pdb",)),
    _rt("apps", "v1", "daemonsets", "DaemonSet", True, ("status",), ("ds",)),
    _rt("apps", "v1", "deployments", "Deployment", True, ("status",), ("deploy",)),
    _rt("apps", "v1", "replicasets", "ReplicaSet", True, ("status",), ("rs",)),
    _rt("apps", "v1", "statefulsets", "StatefulSet", True, ("status",), ("sts",)),
    _rt("batch", "v1", "jobs", "Job", True, ("status",)),
    _rt("coordination.k8s.io", "v1", "leases", "Lease", True),
    _rt("events.k8s.io", "v1", "events", "Event", True, (), ("ev",)),
    _rt("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False, (), ("pc",)),
    _rt("storage.k8s.io", "v1", "storageclasses", "StorageClass", False, (), ("sc",)),
    # DRA, served by Kubernetes 1.34 and later; unregister these to stand in for an older cluster.
    _rt("resource.k8s.io", "v1", "deviceclasses", "DeviceClass", False),
    _rt("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", True, ("status",)),
    _rt("resource.k8s.io", "v1", "resourceclaimtemplates", "ResourceClaimTemplate", True),
    _rt("resource.k8s.io", "v1", "resourceslices", "ResourceSlice", False),
    _rt(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        False,
        ("status",),
    ),
)

# Subresources that are not plain views of the parent object: their own kind/group in discovery.
_SUBRESOURCE_DISCOVERY: dict[str, tuple[str, str, str, tuple[str, ...]]] = {
    "status": ("", "", "", ("get", "patch", "update")),
    "eviction": ("Eviction", "policy", "v1", ("create",)),
    "binding": ("Binding", "", "", ("create",)),
    "finalize": ("", "", "", ("update",)),
}


class ResourceRegistry:
    """Which resource types exist; custom resources come and go with `register`/`unregister`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._types: dict[tuple[str, str, str], ResourceType] = {}
        for rt in BUILTIN_RESOURCES:
            self._types[(rt.group, rt.version, rt.plural)] = rt

    def register(self, rt: ResourceType) -> None:
        """Serve `rt` from now on (replaces an earlier registration of the same group/version/plural)."""
        with self._lock:
            self._types[(rt.group, rt.version, rt.plural)] = rt

    def unregister(self, group: str, version: str, plural: str) -> None:
        """Stop serving a resource; its requests get 404 again."""
        with self._lock:
            self._types.pop((group, version, plural), None)

    def lookup(self, group: str, version: str, plural: str) -> ResourceType | None:
        """The type served at this path, or None."""
        with self._lock:
            return self._types.get((group, version, plural))

    def all(self) -> list[ResourceType]:
        """Every served type, core first."""
        with self._lock:
            return sorted(
                self._types.values(), key=lambda rt: (rt.group != "", rt.group, rt.version, rt.plural)
            )

    def resolve(self, name: str) -> ResourceType:
        """Find a type by `plural`, `plural.group`, short name or kind, as kubectl does; core wins ties."""
        lowered = name.lower()
        plural, _, group = lowered.partition(".")
        for rt in self.all():
            if group and (rt.plural, rt.group) == (plural, group):
                return rt
        for rt in self.all():
            if not group and (lowered in (rt.plural, rt.kind.lower()) or lowered in rt.short_names):
                return rt
        raise KeyError(f"unknown resource {name!r}")

    def for_kind(self, api_version: str, kind: str) -> ResourceType:
        """The type whose objects have this apiVersion and kind."""
        group, _, version = api_version.rpartition("/")
        for rt in self.all():
            if (rt.group, rt.version, rt.kind) == (group, version, kind):
                return rt
        raise KeyError(f"no resource for apiVersion={api_version!r} kind={kind!r}")

    def group_versions(self) -> dict[str, list[str]]:
        """Group -> served versions, in registration order (the first is the preferred one)."""
        out: dict[str, list[str]] = {}
        with self._lock:
            for group, version, _ in self._types:
                versions = out.setdefault(group, [])
                if version not in versions:
                    versions.append(version)
        return out

    # --- discovery documents -------------------------------------------------------------------------

    def api_versions(self, server_address: str) -> dict[str, Any]:
        """`GET /api`."""
        return {
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
        }

    def api_group(self, group: str) -> dict[str, Any] | None:
        """`GET /apis/{group}`, or None when the group is not served."""
        versions = self.group_versions().get(group)
        if not versions or not group:
            return None
        entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        return {
            "kind": "APIGroup",
            "apiVersion": "v1",
            "name": group,
            "versions": entries,
            "preferredVersion": entries[0],
        }

    def api_group_list(self) -> dict[str, Any]:
        """`GET /apis`."""
        groups = [self.api_group(g) for g in self.group_versions() if g]
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [g for g in groups if g]}

    def api_resource_list(self, group: str, version: str) -> dict[str, Any] | None:
        """`GET /api/v1` or `GET /apis/{group}/{version}`, or None when that group/version is not served."""
        types = [rt for rt in self.all() if (rt.group, rt.version) == (group, version)]
        if not types:
            return None
        resources: list[dict[str, Any]] = []
        for rt in types:
            entry: dict[str, Any] = {
                "name": rt.plural,
                "singularName": rt.kind.lower(),
                "namespaced": rt.namespaced,
                "kind": rt.kind,
                "verbs": list(rt.verbs),
            }
            if rt.short_names:
                entry["shortNames"] = list(rt.short_names)
            resources.append(entry)
            for sub in sorted(rt.subresources):
                kind, sub_group, sub_version, verbs = _SUBRESOURCE_DISCOVERY.get(sub, ("", "", "", ("get",)))
                sub_entry: dict[str, Any] = {
                    "name": f"{rt.plural}/{sub}",
                    "singularName": "",
                    "namespaced": rt.namespaced,
                    "kind": kind or rt.kind,
                    "verbs": list(verbs),
                }
                if sub_group or sub_version:
                    sub_entry.update(group=sub_group, version=sub_version)
                resources.append(sub_entry)
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else version,
            "resources": resources,
        }


def crd_resource_types(crd: dict[str, Any]) -> list[ResourceType]:
    """The resource types a CustomResourceDefinition object asks to serve (one per served version)."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    out = []
    for version in spec.get("versions") or []:
        if not version.get("served", True):
            continue
        subresources = frozenset((version.get("subresources") or {}).keys())
        out.append(
            ResourceType(
                group=spec.get("group", ""),
                version=version["name"],
                plural=names.get("plural", ""),
                kind=names.get("kind", ""),
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                subresources=subresources,
                short_names=tuple(names.get("shortNames") or ()),
                custom=True,
            )
        )
    return out


def crd_object(
    group: str,
    version: str,
    plural: str,
    kind: str,
    namespaced: bool,
    status_subresource: bool = True,
    short_names: tuple[str, ...] = (),
) -> dict[str, Any]:
    """A minimal apiextensions.k8s.io/v1 CustomResourceDefinition for one version."""
    version_entry: dict[str, Any] = {
        "name": version,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
    }
    if status_subresource:
        version_entry["subresources"] = {"status": {}}
    names: dict[str, Any] = {
        "plural": plural,
        "singular": kind.lower(),
        "kind": kind,
        "listKind": f"{kind}List",
    }
    if short_names:
        names["shortNames"] = list(short_names)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "names": names,
            "scope": "Namespaced" if namespaced else "Cluster",
            "versions": [version_entry],
        },
    }
