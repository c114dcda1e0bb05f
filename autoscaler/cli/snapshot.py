"""Cluster snapshots from files: Kubernetes List documents in YAML or JSON (``kubectl get … -o yaml``)."""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from autoscaler.core.dra import DraObjects
from autoscaler.core.model import Snapshot
from autoscaler.core.quantity import QuantityMemo
from autoscaler.runtime.kube.convert import (
    ConversionError,
    daemonset_from_dict,
    namespace_from_dict,
    node_from_dict,
    pdb_from_dict,
    pod_from_dict,
    podgroup_from_dict,
    queue_from_dict,
)
from autoscaler.runtime.kube.convert_dra import (
    deviceclass_from_dict,
    resourceclaim_from_dict,
    resourceclaimtemplate_from_dict,
)
from autoscaler.runtime.kube.convert_requests import (
    capacitybuffer_from_dict,
    deployment_from_api,
    podtemplate_from_dict,
    provisioningrequest_from_dict,
    statefulset_from_api,
)

_CONVERTERS: dict[str, tuple[str, Callable[..., Any]]] = {
    "Pod": ("pods", pod_from_dict),
    "Node": ("nodes", node_from_dict),
    "PodDisruptionBudget": ("pdbs", pdb_from_dict),
    "DaemonSet": ("daemonsets", daemonset_from_dict),
    "PodGroup": ("podgroups", podgroup_from_dict),
    "Queue": ("queues", queue_from_dict),
    "PodTemplate": ("pod_templates", podtemplate_from_dict),
    "ProvisioningRequest": ("provisioning_requests", provisioningrequest_from_dict),
    "CapacityBuffer": ("capacity_buffers", capacitybuffer_from_dict),
    # Read for a CapacityBuffer's scalableRef: replicas and the template's pod.
    "Deployment": ("deployments", deployment_from_api),
    "StatefulSet": ("statefulsets", statefulset_from_api),
}
# The kinds whose converter reads resource quantities, through the builder's memo.
_READS_QUANTITIES = frozenset({"Pod", "Node", "DaemonSet", "PodTemplate", "Deployment", "StatefulSet"})
# DRA objects are kept apart (SnapshotBuilder.dra) until the Snapshot has fields for them.
_DRA_VERSION = "resource.k8s.io/v1"
_DRA_CONVERTERS: dict[str, tuple[str, Callable[..., Any]]] = {
    "DeviceClass": ("device_classes", deviceclass_from_dict),
    "ResourceClaim": ("claims", resourceclaim_from_dict),
    "ResourceClaimTemplate": ("claim_templates", resourceclaimtemplate_from_dict),
}


class SnapshotError(ValueError):
    """A snapshot file that cannot be used; the message names the file, position and field."""


@dataclass(slots=True)
class SnapshotBuilder:
    """Collects objects from several documents into one :class:`Snapshot`.

    An object is known by kind, namespace and name: when the same one comes twice (two ``--snapshot`` files
    taken a minute apart, or ``kubectl get pods,all``), the later copy replaces the earlier one and is
    counted in ``duplicates``, so nothing is planned for twice.
    """

    parts: dict[str, dict[tuple[str, str], Any]] = field(
        default_factory=lambda: {k: {} for k, _ in _CONVERTERS.values()}
    )
    # DeviceClasses, ResourceClaims and ResourceClaimTemplates, by DraObjects field (read by build_dra()).
    dra: dict[str, dict[tuple[str, str], Any]] = field(
        default_factory=lambda: {k: {} for k, _ in _DRA_CONVERTERS.values()}
    )
    skipped: Counter[str] = field(default_factory=Counter)
    duplicates: Counter[str] = field(default_factory=Counter)
    # Quantities read once for all the objects added (thousands of pods repeat a few hundred).
    quantities: QuantityMemo = field(default_factory=QuantityMemo)
    namespaces: dict[str, Mapping[str, str]] = field(default_factory=dict)

    def add(self, obj: Mapping[str, Any], where: str) -> None:
        if not isinstance(obj, Mapping):
            raise SnapshotError(f"{where}: expected a Kubernetes object, got {type(obj).__name__}")
        kind = obj.get("kind")
        if not isinstance(kind, str) or not kind:
            raise SnapshotError(f"{where}: object has no kind")
        if kind == "List" or (kind.endswith("List") and "items" in obj):
            items = obj.get("items") or []
            if not isinstance(items, list):
                raise SnapshotError(f"{where}: items is not a list")
            for i, item in enumerate(items):
                self.add(item, f"{where}: items[{i}]")
            return
        if kind == "Namespace":
            try:
                name, labels = namespace_from_dict(obj)
            except ConversionError as err:
                raise SnapshotError(f"{where}: {err}") from None
            if name in self.namespaces:
                self.duplicates[kind] += 1
            self.namespaces[name] = labels
            return
        if kind not in _CONVERTERS and kind not in _DRA_CONVERTERS:
            self.skipped[kind] += 1
            return
        meta = obj.get("metadata")
        if not isinstance(meta, Mapping) or not meta.get("name"):
            raise SnapshotError(f"{where}: {kind} has no metadata.name")
        if kind in _DRA_CONVERTERS and obj.get("apiVersion") != _DRA_VERSION:
            # Earlier versions (v1beta1, v1beta2) shape requests differently; reading them as v1 would misread.
            raise SnapshotError(
                f"{where}: {kind} {meta.get('name')}: apiVersion {obj.get('apiVersion')!r} is not read "
                f"(export it as {_DRA_VERSION}, served from Kubernetes 1.34)"
            )
        target, convert = _CONVERTERS[kind] if kind in _CONVERTERS else _DRA_CONVERTERS[kind]
        try:
            value: Any = convert(obj, self.quantities) if kind in _READS_QUANTITIES else convert(obj)
        except ConversionError as err:
            raise SnapshotError(f"{where}: {err}") from None
        objects = self.parts[target] if kind in _CONVERTERS else self.dra[target]
        key = (getattr(value, "namespace", ""), value.name)
        if key in objects:
            self.duplicates[kind] += 1
            del objects[key]  # the later copy takes the earlier one's place at the end
        objects[key] = value

    @property
    def count(self) -> int:
        """Objects of the kinds tidal reads (after duplicates were merged)."""
        return (
            sum(len(v) for v in self.parts.values())
            + sum(len(v) for v in self.dra.values())
            + len(self.namespaces)
        )

    def build(self) -> Snapshot:
        """The Snapshot of every object added."""
        return Snapshot(
            pods=tuple(self.parts["pods"].values()),
            nodes=tuple(self.parts["nodes"].values()),
            pdbs=tuple(self.parts["pdbs"].values()),
            daemonsets=tuple(self.parts["daemonsets"].values()),
            podgroups=tuple(self.parts["podgroups"].values()),
            queues=tuple(self.parts["queues"].values()),
            namespaces=dict(self.namespaces),
            dra=self.build_dra(),
            provisioning_requests=tuple(self.parts["provisioning_requests"].values()),
            capacity_buffers=tuple(self.parts["capacity_buffers"].values()),
            pod_templates=tuple(self.parts["pod_templates"].values()),
            workloads=(*self.parts["deployments"].values(), *self.parts["statefulsets"].values()),
        )

    def build_dra(self) -> DraObjects:
        """The DRA objects added, each kind sorted by (namespace, name); ``served`` when there was any, since a
        cluster's export holds DeviceClasses whenever a DRA driver is installed."""
        kinds = {k: tuple(v[key] for key in sorted(v)) for k, v in self.dra.items()}
        return DraObjects(**kinds, served=any(kinds.values()))


def _documents(text: str, name: str) -> Iterable[Any]:
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        try:
            yield json.loads(text)
        except json.JSONDecodeError as err:
            raise SnapshotError(f"{name}:{err.lineno}:{err.colno}: invalid JSON: {err.msg}") from None
        except RecursionError:
            raise SnapshotError(f"{name}: invalid JSON: nested too deeply") from None
        return
    # PyYAML only for a YAML snapshot: a JSON one (kubectl -o json) is read without it.
    from autoscaler.cli.snapshot_yaml import yaml_documents

    yield from yaml_documents(text, name)


@dataclass(frozen=True, slots=True)
class LoadedSnapshot:
    """What ``--snapshot`` files held: the snapshot, and what was left out of it."""

    snapshot: Snapshot
    skipped: Counter[str]  # objects of kinds tidal does not read, by kind
    duplicates: Counter[str]  # objects seen again (the later copy kept), by kind
    objects: int  # objects in the snapshot
    dra: DraObjects = field(default_factory=lambda: DraObjects(served=False))  # not yet in the Snapshot
    # The documents as parsed, kept as long as what was read from them: a command that ends its process
    # without freeing what it built (tidal plan) leaves them to the OS too, rather than freeing a 10,000-pod
    # document object by object as soon as it is read.
    documents: tuple[Any, ...] = ()


STDIN = (
    "-"  # ``--snapshot -``: read the snapshot from standard input (``kubectl get ... -o yaml | tidal plan``)
)


def _read(path: str | os.PathLike[str], stdin: TextIO | None) -> tuple[str, str]:
    """A snapshot file's name, as messages give it, and its text; ``-`` is standard input."""
    if os.fspath(path) == STDIN:
        source = stdin if stdin is not None else sys.stdin
        try:
            return "<stdin>", source.read().removeprefix("\ufeff")
        except UnicodeDecodeError:
            raise SnapshotError("<stdin>: not text") from None
    p = Path(path)
    try:
        return str(p), p.read_text(encoding="utf-8-sig")
    except OSError as err:
        raise SnapshotError(f"{p}: {err.strerror or err}") from None
    except UnicodeDecodeError:
        raise SnapshotError(f"{p}: not a text file") from None


def read_snapshots(paths: Iterable[str | os.PathLike[str]], stdin: TextIO | None = None) -> LoadedSnapshot:
    """Read snapshot files (in order: a later file's copy of an object wins) into one Snapshot; a path ``-``
    is ``stdin`` (default: the process's standard input), which can be read once."""
    builder = SnapshotBuilder()
    names = [os.fspath(p) for p in paths]
    if names.count(STDIN) > 1:
        raise SnapshotError("--snapshot -: standard input is given more than once; it can be read only once")
    documents = []
    for path in names:
        name, text = _read(path, stdin)
        for n, doc in enumerate(_documents(text, name)):
            if doc is None:
                continue
            builder.add(doc, f"{name}: document {n + 1}" if n else name)
            documents.append(doc)
    return LoadedSnapshot(
        builder.build(),
        builder.skipped,
        builder.duplicates,
        builder.count,
        builder.build_dra(),
        tuple(documents),
    )


def load_snapshot(paths: Iterable[str | os.PathLike[str]]) -> tuple[Snapshot, Counter[str]]:
    """Read snapshot files into one Snapshot, with the count of skipped objects by kind."""
    loaded = read_snapshots(paths)
    return loaded.snapshot, loaded.skipped
