"""ProvisioningRequests and CapacityBuffers on the real kube-apiserver v1.36.2: tidal's CRDs install and
validate, and the daemon (cloud: simulated, under tidal's own ClusterRole) answers them through the status
subresource and launches the nodes they ask for."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from autoscaler.config.options import load_config
from autoscaler.runtime.daemon import Daemon
from autoscaler.runtime.kube.client import make_api_client
from providers.simulated import SimulatedProvider
from providers.simulated.node import NodeRegistrar
from tests.e2e.harness import base_config, gpu_pod
from tests.fakes.helm_chart import render
from tests.k8s.control_plane import ControlPlane

pytestmark = pytest.mark.slow

GROUP = "autoscaling.x-k8s.io"
ATOMIC = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
CHECK = "check-capacity.autoscaling.x-k8s.io"


@pytest.fixture(scope="module")
def installed(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """tidal's CRDs, namespace, service account and RBAC on the API server, as the chart renders them; the
    service account's kubeconfig. The CRDs go when the module ends: the control plane is the session's."""
    chart = render()
    with control_plane.admin_client() as api:
        ext = kubernetes.client.ApiextensionsV1Api(api)
        for crd in (o for o in chart if o["kind"] == "CustomResourceDefinition"):
            try:
                ext.create_custom_resource_definition(crd)
            except ApiException as err:
                if err.status != 409:
                    raise
        core = kubernetes.client.CoreV1Api(api)
        rbac = kubernetes.client.RbacAuthorizationV1Api(api)
        calls: list[Callable[[], object]] = [
            lambda: core.create_namespace({"metadata": {"name": "tidal-system"}}),
            lambda: core.create_namespaced_service_account("tidal-system", {"metadata": {"name": "tidal"}}),
        ]
        creators: dict[str, Callable[[dict[str, Any]], object]] = {
            "ClusterRole": rbac.create_cluster_role,
            "ClusterRoleBinding": rbac.create_cluster_role_binding,
            "Role": lambda d: rbac.create_namespaced_role("tidal-system", d),
            "RoleBinding": lambda d: rbac.create_namespaced_role_binding("tidal-system", d),
        }
        for doc in (o for o in chart if o["kind"] in creators):
            calls.append(functools.partial(creators[doc["kind"]], doc))
        for call in calls:
            try:
                call()
            except ApiException as err:
                if err.status != 409:
                    raise
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            crds = ext.list_custom_resource_definition().items
            established = {
                c.metadata.name
                for c in crds
                if any(s.type == "Established" and s.status == "True" for s in (c.status.conditions or []))
            }
            if {
                "provisioningrequests.autoscaling.x-k8s.io",
                "capacitybuffers.autoscaling.x-k8s.io",
            } <= established:
                break
            time.sleep(0.2)
    folder = tmp_path_factory.mktemp("tidal-sa")
    yield control_plane.service_account_kubeconfig("tidal-system", "tidal", folder / "kubeconfig")
    with control_plane.admin_client() as api:
        ext = kubernetes.client.ApiextensionsV1Api(api)
        for crd in (o for o in chart if o["kind"] == "CustomResourceDefinition"):
            ext.delete_custom_resource_definition(crd["metadata"]["name"])


@contextmanager
def tidal(
    control_plane: ControlPlane, kubeconfig: Path, folder: Path, **config: Any
) -> Iterator[Callable[[], None]]:
    """The daemon as ``tidal run`` builds it, acting as tidal's service account, with a simulated cloud whose
    kubelets register Nodes as cluster admin; yields one step (the cloud moves on, tidal reconciles)."""
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(base_config(**config)))
    admin = control_plane.admin_client()
    provider = SimulatedProvider(load_config(path), kube=NodeRegistrar(admin))
    daemon = Daemon(
        str(path),
        make_api_client(kubeconfig=str(kubeconfig)),
        provider,
        identity="tidal-k8s",
        metrics_address="127.0.0.1:0",
    )
    daemon.start(serve=False, sync_timeout=30)

    def step() -> None:
        provider.advance()
        time.sleep(0.2)  # the informers see the latest writes
        daemon.reconcile()

    try:
        yield step
    finally:
        daemon.stop()
        for instance in provider.instances():
            provider.terminate(instance)
        core = kubernetes.client.CoreV1Api(admin)
        for node in core.list_node(label_selector="tidal.dev/managed=true").items:
            core.delete_node(node.metadata.name)  # the next test starts without these nodes
        admin.close()


def _namespace(api: kubernetes.client.ApiClient, name: str) -> None:
    kubernetes.client.CoreV1Api(api).create_namespace({"metadata": {"name": name}})


def _template(api: kubernetes.client.ApiClient, namespace: str, name: str, gpus: int = 1) -> None:
    spec = gpu_pod(name, namespace=namespace, gpus=gpus)["spec"]
    body = {"metadata": {"name": name}, "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}
    kubernetes.client.CoreV1Api(api).create_namespaced_pod_template(namespace, body)


def _request(
    api: kubernetes.client.ApiClient,
    namespace: str,
    name: str,
    cls: str,
    template: str,
    count: int,
    version: str = "v1",
) -> None:
    body = {
        "apiVersion": f"{GROUP}/{version}",
        "kind": "ProvisioningRequest",
        "metadata": {"name": name},
        "spec": {
            "provisioningClassName": cls,
            "podSets": [{"podTemplateRef": {"name": template}, "count": count}],
        },
    }
    kubernetes.client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, version, namespace, "provisioningrequests", body
    )


def _conditions(
    api: kubernetes.client.ApiClient, namespace: str, plural: str, name: str, version: str
) -> dict[str, Any]:
    obj = kubernetes.client.CustomObjectsApi(api).get_namespaced_custom_object(
        GROUP, version, namespace, plural, name
    )
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}


def _managed_gpu_nodes(api: kubernetes.client.ApiClient) -> list[Any]:
    nodes = kubernetes.client.CoreV1Api(api).list_node(label_selector="tidal.dev/managed=true").items
    return [n for n in nodes if int((n.metadata.labels or {}).get("tidal.dev/gpu-count", "0")) > 0]


def _until(step: Callable[[], None], done: Callable[[], bool], timeout: float = 40.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        step()
        if done():
            return
    raise AssertionError(f"not reached within {timeout}s")


def test_the_crds_refuse_a_buffer_with_both_a_template_and_a_workload(
    control_plane: ControlPlane, installed: Path
) -> None:
    with control_plane.admin_client() as api:
        _namespace(api, "cb-invalid")
        body = {
            "apiVersion": f"{GROUP}/v1beta1",
            "kind": "CapacityBuffer",
            "metadata": {"name": "both"},
            "spec": {
                "podTemplateRef": {"name": "x"},
                "scalableRef": {"kind": "Deployment", "name": "y"},
                "replicas": 1,
            },
        }
        with pytest.raises(ApiException) as refused:
            kubernetes.client.CustomObjectsApi(api).create_namespaced_custom_object(
                GROUP, "v1beta1", "cb-invalid", "capacitybuffers", body
            )
    assert refused.value.status == 422
    assert "either PodTemplateRef or ScalableRef" in refused.value.body


def test_an_atomic_request_is_answered_provisioned_and_its_nodes_register(
    control_plane: ControlPlane, installed: Path, tmp_path: Path
) -> None:
    with control_plane.admin_client() as api:
        _namespace(api, "team-atomic")
        _template(api, "team-atomic", "trainer")
        _request(api, "team-atomic", "job-a-prov-1", ATOMIC, "trainer", 2)
        with tidal(control_plane, installed, tmp_path) as step:

            def provisioned() -> bool:
                c = _conditions(api, "team-atomic", "provisioningrequests", "job-a-prov-1", "v1")
                return "Provisioned" in c and len(_managed_gpu_nodes(api)) >= 2

            _until(step, provisioned)
            conditions = _conditions(api, "team-atomic", "provisioningrequests", "job-a-prov-1", "v1")
            assert (conditions["Accepted"]["status"], conditions["Accepted"]["reason"]) == (
                "True",
                "Accepted",
            )
            assert (conditions["Provisioned"]["status"], conditions["Provisioned"]["reason"]) == (
                "True",
                "CapacityIsProvisioned",
            )
            assert len(_managed_gpu_nodes(api)) == 2
            for _ in range(3):  # booked: nothing more is launched for it
                step()
            assert len(_managed_gpu_nodes(api)) == 2


def test_a_v1beta1_capacity_check_without_room_is_answered_not_found_and_launches_nothing(
    control_plane: ControlPlane, installed: Path, tmp_path: Path
) -> None:
    with control_plane.admin_client() as api:
        _namespace(api, "team-check")
        _template(api, "team-check", "big", gpus=8)
        _request(api, "team-check", "job-b-check-1", CHECK, "big", 1, version="v1beta1")
        with tidal(control_plane, installed, tmp_path) as step:

            def answered() -> bool:
                return "Provisioned" in _conditions(
                    api, "team-check", "provisioningrequests", "job-b-check-1", "v1beta1"
                )

            _until(step, answered)
            assert _managed_gpu_nodes(api) == []
        conditions = _conditions(api, "team-check", "provisioningrequests", "job-b-check-1", "v1beta1")
        assert (conditions["Provisioned"]["status"], conditions["Provisioned"]["reason"]) == (
            "False",
            "CapacityIsNotFound",
        )


def test_a_capacity_buffer_gets_a_warm_node_and_its_status(
    control_plane: ControlPlane, installed: Path, tmp_path: Path
) -> None:
    with control_plane.admin_client() as api:
        _namespace(api, "team-warm")
        _template(api, "team-warm", "chunk")
        body = {
            "apiVersion": f"{GROUP}/v1beta1",
            "kind": "CapacityBuffer",
            "metadata": {"name": "warm-gpus"},
            "spec": {"podTemplateRef": {"name": "chunk"}, "replicas": 1},
        }
        custom = kubernetes.client.CustomObjectsApi(api)
        custom.create_namespaced_custom_object(GROUP, "v1beta1", "team-warm", "capacitybuffers", body)
        # A Deployment scaled to zero, and a buffer of half its replicas: at least one chunk of its pods.
        spec = gpu_pod("serve", namespace="team-warm")["spec"]
        kubernetes.client.AppsV1Api(api).create_namespaced_deployment(
            "team-warm",
            {
                "metadata": {"name": "serve"},
                "spec": {
                    "replicas": 0,
                    "selector": {"matchLabels": {"app": "serve"}},
                    "template": {"metadata": {"labels": {"app": "serve"}}, "spec": spec},
                },
            },
        )
        by_workload = {
            "apiVersion": f"{GROUP}/v1beta1",
            "kind": "CapacityBuffer",
            "metadata": {"name": "warm-serve"},
            "spec": {
                "scalableRef": {"apiGroup": "apps", "kind": "Deployment", "name": "serve"},
                "percentage": 50,
            },
        }
        custom.create_namespaced_custom_object(GROUP, "v1beta1", "team-warm", "capacitybuffers", by_workload)
        with tidal(control_plane, installed, tmp_path) as step:

            def warm() -> bool:
                states = [
                    _conditions(api, "team-warm", "capacitybuffers", name, "v1beta1").get("Provisioning", {})
                    for name in ("warm-gpus", "warm-serve")
                ]
                provisioning = [s.get("status") for s in states]
                return provisioning == ["True", "True"] and len(_managed_gpu_nodes(api)) == 2

            _until(step, warm)
            buffer = custom.get_namespaced_custom_object(
                GROUP, "v1beta1", "team-warm", "capacitybuffers", "warm-gpus"
            )
        assert buffer["status"]["replicas"] == 1
        assert buffer["status"]["podTemplateRef"] == {"name": "chunk"}
        assert buffer["status"]["provisioningStrategy"] == "buffer.x-k8s.io/active-capacity"
        ready = {c["type"]: c["status"] for c in buffer["status"]["conditions"]}
        assert ready == {"ReadyForProvisioning": "True", "Provisioning": "True"}
        serve = custom.get_namespaced_custom_object(
            GROUP, "v1beta1", "team-warm", "capacitybuffers", "warm-serve"
        )
        assert serve["status"]["replicas"] == 1
