"""One test's view of the real control plane: its namespace, the objects it made, the simulated cloud.

tidal's own objects (namespace ``tidal-system``, ServiceAccount, ClusterRole, Role and their bindings) are
rendered from the Helm chart exactly as it installs them, with the simulated cloud's rule that lets its
stand-in kubelets write Nodes: what tidal is allowed to do in these tests is what it is allowed to do when
installed.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import kubernetes.client
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient

from autoscaler.config.options import config_from_mapping
from autoscaler.core.offering import Instance
from providers.simulated import SimulatedProvider
from tests.fakes.helm_chart import identity_and_rbac

ROOT = Path(__file__).resolve().parents[2]
TIDAL_NAMESPACE = "tidal-system"


def tidal_manifests() -> list[dict[str, Any]]:
    """tidal's namespace (enforcing the restricted Pod Security Standard, as docs/install.md labels it) and
    the ServiceAccount and RBAC the chart renders for the simulated cloud."""
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": TIDAL_NAMESPACE,
            "labels": {"pod-security.kubernetes.io/enforce": "restricted"},
        },
    }
    return [namespace, *identity_and_rbac(examples=("simulated",), namespace=TIDAL_NAMESPACE)]


class Objects:
    """Create, read and delete any kind, built-in or custom, through discovery."""

    def __init__(self, api: kubernetes.client.ApiClient) -> None:
        self.dynamic = DynamicClient(api)

    def resource(self, api_version: str, kind: str) -> Any:
        return self.dynamic.resources.get(api_version=api_version, kind=kind)

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create the object, or replace it when it exists already."""
        res = self.resource(obj["apiVersion"], obj["kind"])
        namespace = obj["metadata"].get("namespace") if res.namespaced else None
        try:
            created = res.create(body=obj, namespace=namespace)
        except ApiException as err:
            if err.status != 409:
                raise
            current = res.get(name=obj["metadata"]["name"], namespace=namespace)
            body = {
                **obj,
                "metadata": {**obj["metadata"], "resourceVersion": current.metadata.resourceVersion},
            }
            created = res.replace(body=body, namespace=namespace)
        out: dict[str, Any] = created.to_dict()
        return out

    def get(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> dict[str, Any] | None:
        try:
            out: dict[str, Any] = (
                self.resource(api_version, kind).get(name=name, namespace=namespace).to_dict()
            )
            return out
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    def list(
        self, api_version: str, kind: str, namespace: str | None = None, **kw: Any
    ) -> list[dict[str, Any]]:
        items = self.resource(api_version, kind).get(namespace=namespace, **kw).to_dict()["items"]
        return list(items)

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> None:
        try:
            self.resource(api_version, kind).delete(name=name, namespace=namespace)
        except ApiException as err:
            if err.status != 404:
                raise


def install_tidal_rbac(objects: Objects) -> None:
    """tidal's namespace, ServiceAccount and RBAC, from the chart."""
    for obj in tidal_manifests():
        objects.apply(obj)


def wait_for_crds(objects: Objects, names: Iterable[str], timeout: float = 30.0) -> None:
    """Until each CustomResourceDefinition is Established, so the API server serves its kind."""
    deadline = time.monotonic() + timeout
    pending = set(names)
    while pending:
        for name in sorted(pending):
            crd = objects.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", name)
            conditions = (crd or {}).get("status", {}).get("conditions") or []
            if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                pending.discard(name)
        if pending and time.monotonic() > deadline:
            raise AssertionError(f"CRDs not established within {timeout:.0f}s: {sorted(pending)}")
        time.sleep(0.1)
    # Discovery is cached by the dynamic client: forget it so the new kinds are found.
    objects.dynamic = DynamicClient(objects.dynamic.client)


class SimulatedCloud:
    """The test's window onto the cloud tidal launches into: the same ``stateFile``, read from outside."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.provider = SimulatedProvider(
            config_from_mapping(
                {**config, "simulated": {**config["simulated"], "registerNodes": False}}, source="test"
            )
        )

    def instances(self) -> list[Instance]:
        return self.provider.instances()

    def live(self) -> list[Instance]:
        return [i for i in self.instances() if i.state.value != "terminated"]

    def launched(self) -> list[Instance]:
        """Every instance ever launched, terminated ones too."""
        return self.instances()

    def gpus_up(self) -> int:
        return sum(i.gpu_count for i in self.live())
