"""`helm install` of charts/tidal on the real control plane, then tidal itself under the chart's ServiceAccount.

The chart is installed with the real helm v4 into a real kube-apiserver v1.36.2 (its validation, admission and
CRD schema compilation included). No kubelet runs the chart's pods, so tidal runs as its pod would, in a
process of its own: the chart's ConfigMap as its configuration, a bound token of the chart's ServiceAccount
(from the TokenRequest API, as the projected volume holds it) as its credentials, `run --once`. Every request
it makes is authorised by the chart's RBAC and nothing else.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes.client
import kubernetes.config
import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from tests.fakes.helm_chart import CHART, REPO, tools
from tests.k8s.control_plane import ControlPlane, environment_without_proxies, free_port

pytestmark = pytest.mark.slow

NAMESPACE = "tidal-helm"
# Its own name, so its cluster-wide objects (ClusterRoles, bindings) are not those other tests of the session
# create for tidal.
RELEASE = "tidal-chart"
WORKLOADS = "helm-research"
BUFFERS = "helm-buffers"
SECOND = "helm-second"
GROUP = "autoscaling.x-k8s.io"
CRDS = ("provisioningrequests.autoscaling.x-k8s.io", "capacitybuffers.autoscaling.x-k8s.io")
CATALOG = REPO / "config" / "catalogs" / "aws-us-east-1.csv"


@dataclass
class Release:
    """The installed release: how to reach the cluster as admin, and helm's own folders."""

    control_plane: ControlPlane
    env: dict[str, str]
    folder: Path

    def helm(self, *args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [str(helm_binary()), *args, "--kubeconfig", str(self.control_plane.kubeconfig)],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
            env=self.env,
        )
        return done

    def admin(self) -> kubernetes.client.ApiClient:
        return self.control_plane.admin_client()


def helm_binary() -> Path:
    return tools() / "helm"


@pytest.fixture(scope="module")
def release(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Release]:
    """charts/tidal installed as `tidal-chart` in tidal-helm, with the simulated example's values."""
    folder = tmp_path_factory.mktemp("helm")
    # helm keeps its caches and settings under these; a test must not touch the user's own.
    env = {
        **environment_without_proxies(),
        "HELM_CACHE_HOME": str(folder / "cache"),
        "HELM_CONFIG_HOME": str(folder / "config"),
        "HELM_DATA_HOME": str(folder / "data"),
    }
    installed = Release(control_plane, env, folder)
    with installed.admin() as api:
        # The chart installs the CRDs itself: wait out those another module of the session deleted as it ended.
        extensions = kubernetes.client.ApiextensionsV1Api(api)
        wait_until(
            "no CRD of autoscaling.x-k8s.io left by another test",
            lambda: (
                not {c.metadata.name for c in extensions.list_custom_resource_definition().items} & set(CRDS)
            ),
        )
        # As docs/install.md has it: the namespace enforces the "restricted" Pod Security Standard.
        labels = {"pod-security.kubernetes.io/enforce": "restricted"}
        kubernetes.client.CoreV1Api(api).create_namespace({"metadata": {"name": NAMESPACE, "labels": labels}})
    done = installed.helm(
        "install",
        RELEASE,
        str(CHART),
        "--namespace",
        NAMESPACE,
        "--create-namespace",
        "-f",
        str(CHART / "examples" / "simulated.yaml"),
        "--set",
        "image.repository=registry.example.com/tidal-autoscaler",
        # The image's catalog path, here the repository's copy of it.
        "--set",
        f"config.simulated.catalog={CATALOG}",
    )
    assert done.returncode == 0, done.stderr
    yield installed
    installed.helm("uninstall", RELEASE, "--namespace", NAMESPACE)
    # The control plane is shared with the session's other tests: no pending pod or CRD of ours stays (the
    # CRDs outlive the release by design).
    with installed.admin() as api:
        core = kubernetes.client.CoreV1Api(api)
        for namespace in (WORKLOADS, BUFFERS, SECOND, NAMESPACE):
            try:
                core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
                core.delete_namespace(namespace)
            except ApiException as err:
                if err.status != 404:
                    raise
        for name in CRDS:
            kubernetes.client.ApiextensionsV1Api(api).delete_custom_resource_definition(name)


def wait_until(what: str, check: Any, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:.0f}s")
        time.sleep(0.2)


def crd_established(api: kubernetes.client.ApiClient, name: str) -> bool:
    crd = kubernetes.client.ApiextensionsV1Api(api).read_custom_resource_definition(name)
    return any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or ())


def gpu_pod(name: str) -> dict[str, Any]:
    """A pod no node holds (there is none), which the real scheduler marks unschedulable."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": WORKLOADS},
        "spec": {
            "containers": [
                {
                    "name": "train",
                    "image": "registry.example.com/train:1",
                    "resources": {
                        "limits": {"nvidia.com/gpu": "1"},
                        "requests": {"cpu": "2", "memory": "8Gi"},
                    },
                }
            ],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        },
    }


def unschedulable(core: kubernetes.client.CoreV1Api, name: str) -> bool:
    pod = core.read_namespaced_pod(name, WORKLOADS)
    return any(
        c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
        for c in pod.status.conditions or ()
    )


def test_helm_install_creates_the_charts_objects_on_the_real_api_server(release: Release) -> None:
    listed = release.helm("list", "--namespace", NAMESPACE, "--output", "yaml")
    (entry,) = yaml.safe_load(listed.stdout)
    assert (entry["name"], entry["status"]) == (RELEASE, "deployed")
    with release.admin() as api:
        apps, core = kubernetes.client.AppsV1Api(api), kubernetes.client.CoreV1Api(api)
        deployment = apps.read_namespaced_deployment(RELEASE, NAMESPACE)
        assert deployment.spec.replicas == 1  # the simulated example's
        assert deployment.spec.template.spec.service_account_name == RELEASE
        assert core.read_namespaced_service_account(RELEASE, NAMESPACE)
        config = yaml.safe_load(
            core.read_namespaced_config_map(f"{RELEASE}-config", NAMESPACE).data["config.yaml"]
        )
        assert config["cloud"] == "simulated" and config["leaderElection"]["namespace"] == NAMESPACE
        for name in CRDS:
            wait_until(f"CRD {name} established", lambda name=name: crd_established(api, name))


def test_the_charts_pod_is_admitted_as_restricted_and_system_cluster_critical(release: Release) -> None:
    # The ReplicaSet controller creates the pod only if Pod Security admission (restricted) and the priority
    # admission (a system class outside kube-system, with the chart's quota) both let it in.
    selector = f"app.kubernetes.io/instance={RELEASE}"
    with release.admin() as api:
        core = kubernetes.client.CoreV1Api(api)
        pods = wait_until(
            "the Deployment's pod", lambda: core.list_namespaced_pod(NAMESPACE, label_selector=selector).items
        )
        assert [p.spec.priority_class_name for p in pods] == ["system-cluster-critical"]
        assert pods[0].spec.priority == 2000000000
        quota = core.read_namespaced_resource_quota(f"{RELEASE}-critical-pods", NAMESPACE)
        assert quota.status.used == {"pods": "1"}


def test_tidal_runs_once_under_the_charts_service_account_without_a_403(
    release: Release, control_plane: ControlPlane, tmp_path: Path
) -> None:
    with release.admin() as api:
        core = kubernetes.client.CoreV1Api(api)
        core.create_namespace({"metadata": {"name": WORKLOADS}})
        wait_until("default ServiceAccount", lambda: core.list_namespaced_service_account(WORKLOADS).items)
        core.create_namespaced_pod(WORKLOADS, gpu_pod("train-0"))
        wait_until("train-0 unschedulable", lambda: unschedulable(core, "train-0"))
        chart_config = core.read_namespaced_config_map(f"{RELEASE}-config", NAMESPACE).data["config.yaml"]
    # The ConfigMap as the pod mounts it; only the listen address differs, since this process shares the
    # host's network where the pod would have its own.
    (tmp_path / "config.yaml").write_text(chart_config)
    (tmp_path / "here.yaml").write_text(f"metricsAddress: 127.0.0.1:{free_port()}\nlogFormat: json\n")
    kubeconfig = control_plane.service_account_kubeconfig(NAMESPACE, RELEASE, tmp_path / "kubeconfig")
    argv = [sys.executable, "-m", "autoscaler", "run", "--once", "--kubeconfig", str(kubeconfig)]
    argv += ["--config", str(tmp_path / "config.yaml"), "--config", str(tmp_path / "here.yaml")]
    env = {**release.env, "POD_NAME": "tidal-0", "POD_NAMESPACE": NAMESPACE, "PYTHONUNBUFFERED": "1"}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=180, env=env, cwd=REPO, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert not re.search(r"\b403\b|forbidden", output, flags=re.I), output
    with release.admin() as api:
        core = kubernetes.client.CoreV1Api(api)
        # The Role: the Lease created, then released on exit (an update), and the status written, all in
        # the release namespace.
        lease = kubernetes.client.CoordinationV1Api(api).read_namespaced_lease("tidal", NAMESPACE)
        assert (lease.spec.holder_identity, lease.spec.lease_duration_seconds) == (None, 1)
        assert core.read_namespaced_config_map("tidal-status", NAMESPACE).data
        # The ClusterRole: the pending pod was read and told what tidal did for it.
        events = core.list_namespaced_event(WORKLOADS, field_selector="involvedObject.name=train-0").items
        assert "TriggeredScaleUp" in {e.reason for e in events}, [(e.reason, e.message) for e in events]


def provisioning_request(version: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{version}",
        "kind": "ProvisioningRequest",
        "metadata": {"name": name, "namespace": WORKLOADS},
        "spec": {
            "provisioningClassName": "check-capacity.autoscaling.x-k8s.io",
            "podSets": [{"count": 4, "podTemplateRef": {"name": "trainer"}}],
        },
    }


def test_the_crds_accept_cluster_autoscaler_objects_and_tidal_may_read_them_and_patch_their_status(
    release: Release, control_plane: ControlPlane, tmp_path: Path
) -> None:
    namespace = BUFFERS
    with release.admin() as api:
        core = kubernetes.client.CoreV1Api(api)
        custom = kubernetes.client.CustomObjectsApi(api)
        core.create_namespace({"metadata": {"name": namespace}})
        # The pods the requests and the buffer stand for.
        core.create_namespaced_pod_template(
            namespace,
            {
                "metadata": {"name": "trainer"},
                "template": {"spec": gpu_pod("trainer")["spec"]},
            },
        )
        wait_until("CRDs established", lambda: crd_established(api, "capacitybuffers.autoscaling.x-k8s.io"))
        for version in ("v1", "v1beta1"):
            request = provisioning_request(version, f"train-{version}")
            request["metadata"]["namespace"] = namespace
            custom.create_namespaced_custom_object(GROUP, version, namespace, "provisioningrequests", request)
        buffer = {
            "apiVersion": f"{GROUP}/v1beta1",
            "kind": "CapacityBuffer",
            "metadata": {"name": "warm", "namespace": namespace},
            "spec": {"podTemplateRef": {"name": "trainer"}, "replicas": 2},
        }
        created = custom.create_namespaced_custom_object(
            GROUP, "v1beta1", namespace, "capacitybuffers", buffer
        )
        assert created["spec"]["provisioningStrategy"] == "buffer.x-k8s.io/active-capacity"  # the default
        # The schema's own rules hold: a ProvisioningRequest's spec never changes, and a buffer from a pod
        # template says how many chunks.
        with pytest.raises(ApiException) as immutable:
            custom.patch_namespaced_custom_object(
                GROUP, "v1", namespace, "provisioningrequests", "train-v1",
                {"spec": {"podSets": [{"count": 8, "podTemplateRef": {"name": "trainer"}}]}},
            )  # fmt: skip
        assert immutable.value.status == 422 and "immutable" in immutable.value.body
        with pytest.raises(ApiException) as shapeless:
            custom.create_namespaced_custom_object(
                GROUP, "v1beta1", namespace, "capacitybuffers",
                {**buffer, "metadata": {"name": "bare", "namespace": namespace}, "spec": {"podTemplateRef": {"name": "t"}}},
            )  # fmt: skip
        assert shapeless.value.status == 422
    kubeconfig = control_plane.service_account_kubeconfig(NAMESPACE, RELEASE, tmp_path / "kubeconfig")
    with kubernetes.config.new_client_from_config(config_file=str(kubeconfig)) as api:
        custom = kubernetes.client.CustomObjectsApi(api)
        listed = custom.list_cluster_custom_object(GROUP, "v1", "provisioningrequests")["items"]
        assert {i["metadata"]["name"] for i in listed} >= {"train-v1", "train-v1beta1"}
        # Answered through the status subresource, as tidal does: a merge patch of its conditions.
        condition = {
            "type": "Provisioned",
            "status": "False",
            "reason": "Pending",
            "message": "waiting for capacity",
            "lastTransitionTime": "2026-11-27T09:00:00Z",
        }
        patched = custom.patch_namespaced_custom_object_status(
            GROUP,
            "v1",
            namespace,
            "provisioningrequests",
            "train-v1",
            {"status": {"conditions": [condition]}},
        )
        assert patched["status"]["conditions"] == [condition]
        assert custom.list_cluster_custom_object(GROUP, "v1beta1", "capacitybuffers")["items"]
        templates = kubernetes.client.CoreV1Api(api).list_namespaced_pod_template(namespace).items
        assert [t.metadata.name for t in templates] == ["trainer"]
        assert kubernetes.client.AppsV1Api(api).list_namespaced_stateful_set(namespace).items == []
        # Reading is all: tidal never creates, edits or deletes them.
        with pytest.raises(ApiException) as refused:
            custom.delete_namespaced_custom_object(GROUP, "v1", namespace, "provisioningrequests", "train-v1")
        assert refused.value.status == 403


def test_a_second_release_leaves_the_crds_to_the_first_and_uninstall_keeps_them(release: Release) -> None:
    namespace = SECOND
    done = release.helm(
        "install", "second", str(CHART), "--namespace", namespace, "--create-namespace",
        "--set", "image.repository=registry.example.com/tidal-autoscaler",
        "--set", "crds.provisioningRequest.install=false", "--set", "crds.capacityBuffer.install=false",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    with release.admin() as api:
        assert kubernetes.client.AppsV1Api(api).read_namespaced_deployment("second-tidal", namespace)
    assert release.helm("uninstall", "second", "--namespace", namespace).returncode == 0
    with release.admin() as api:
        for name in CRDS:
            assert crd_established(api, name)
