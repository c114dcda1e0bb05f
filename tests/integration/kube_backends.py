"""The two API servers the contract suite drives: the in-process fake and the real kube-apiserver.

Each test of tests/integration/test_kube_contract.py runs against both, through the unmodified
``kubernetes`` client, so whatever the fake answers differently from the real server fails a test. What
only the fake can do on cue (a fault queue, a refusing authorizer) is tested in test_fake_apiserver.py.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import kubernetes.client
from kubernetes.client import ApiClient

from tests.fakes.kube_apiserver import FakeApiServer
from tests.k8s.control_plane import ControlPlane

_namespaces = itertools.count(1)


@dataclass
class Backend:
    """An API server for one test: a client, a fresh namespace, and how to stage what the test needs."""

    name: str
    client: ApiClient
    namespace: str
    # Make every resourceVersion handed out so far too old to watch from (410 Gone).
    expire_history: Callable[[], None]
    # Until the named PodDisruptionBudget's status allows exactly this many disruptions.
    settle_budget: Callable[[str, int], None]
    # Serve a namespaced and a cluster-scoped custom resource: (group, version, plural, kind, namespaced).
    serve_custom: Callable[[str, str, str, str, bool], object]


def _custom_resource_definition(
    group: str, version: str, plural: str, kind: str, namespaced: bool
) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced" if namespaced else "Cluster",
            "names": {"plural": plural, "singular": kind.lower(), "kind": kind, "listKind": f"{kind}List"},
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                            },
                        }
                    },
                }
            ],
        },
    }


@contextmanager
def fake_backend() -> Iterator[Backend]:
    with FakeApiServer(bookmark_interval=0.1) as api:
        client = api.api_client()
        try:
            yield Backend(
                name="fake",
                client=client,
                namespace=f"contract-{next(_namespaces)}",
                expire_history=api.compact,
                settle_budget=lambda name, allowed: api.sync_pdb_status(),
                serve_custom=lambda group, version, plural, kind, namespaced: api.register_crd(
                    group, version, plural, kind, namespaced=namespaced
                ),
            )
        finally:
            client.close()
            client.rest_client.pool_manager.clear()
        assert api.server_errors == []


@contextmanager
def real_backend(plane: ControlPlane) -> Iterator[Backend]:
    client = plane.admin_client()
    core = kubernetes.client.CoreV1Api(client)
    namespace = f"contract-{next(_namespaces)}"
    core.create_namespace({"metadata": {"name": namespace}})

    def expire_history() -> None:
        # The API server's watch cache outlives etcd's history: only a restart makes it start again from
        # the compacted revision, as after an upgrade or a crash.
        plane.compact_etcd()
        plane.kill_apiserver()
        plane.start_apiserver()

    def settle_budget(name: str, allowed: int) -> None:
        policy = kubernetes.client.PolicyV1Api(client)
        deadline = time.monotonic() + 30
        while True:
            pdb = policy.read_namespaced_pod_disruption_budget(name, namespace)
            status = pdb.status
            if (
                status is not None
                and status.observed_generation == pdb.metadata.generation
                and status.disruptions_allowed == allowed
            ):
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"PodDisruptionBudget {name} never allowed {allowed}: {status}")
            time.sleep(0.1)

    def serve_custom(group: str, version: str, plural: str, kind: str, namespaced: bool) -> None:
        ext = kubernetes.client.ApiextensionsV1Api(client)
        crd = _custom_resource_definition(group, version, plural, kind, namespaced)
        try:
            ext.create_custom_resource_definition(crd)
        except kubernetes.client.ApiException as err:
            if err.status != 409:
                raise
        deadline = time.monotonic() + 30
        while True:
            got = ext.read_custom_resource_definition(crd["metadata"]["name"])
            if any(c.type == "Established" and c.status == "True" for c in got.status.conditions or []):
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"{crd['metadata']['name']} never established")
            time.sleep(0.1)

    try:
        yield Backend("real", client, namespace, expire_history, settle_budget, serve_custom)
    finally:
        for pod in core.list_namespaced_pod(namespace).items:
            core.delete_namespaced_pod(pod.metadata.name, namespace, grace_period_seconds=0)
        core.delete_namespace(namespace)
        client.close()
