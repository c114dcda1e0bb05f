"""The kustomize base and overlays under deploy/: they render, every object is valid Kubernetes, and each
overlay wires what it promises (cloud, identity, configuration) without weakening the base."""

from __future__ import annotations

import json
import posixpath
import re
import tempfile
import tomllib
from typing import TYPE_CHECKING

import pytest
import yaml

from autoscaler.cli import main as cli
from autoscaler.runtime.config_watch import load_layered
from autoscaler.runtime.status import STATUS_CONFIGMAP
from tests.fakes.kustomize import KUBECTL, REPO, find, render

if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

    from autoscaler.config.options import Config

pytestmark = pytest.mark.skipif(
    KUBECTL is None, reason="kubectl (with kustomize) is needed to render deploy/"
)

KUBERNETES_VERSION = "1.32.0"  # the oldest minor still supported on EKS, GKE and AKS alike
# The KAI preset is a Component: it is rendered the way it is meant to be used, on a cloud overlay.
KAI_ON_EKS = "eks+kai"
DIRECTORIES = [
    "deploy/base",
    *(f"deploy/overlays/{o}" for o in ("eks", "gke", "aks", KAI_ON_EKS, "simulated")),
]
CLOUDS = {"eks": "aws", "gke": "gcp", "aks": "azure", KAI_ON_EKS: "aws", "simulated": "simulated"}
NAMESPACE = "tidal-system"
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding"}


def config_of(objects: list[dict[str, Any]]) -> Config:
    """The configuration the daemon runs with: the files its --config arguments name, read from the mounted
    tidal-config ConfigMap and laid over each other in order, as ``tidal run`` does."""
    spec = pod_spec(objects)
    container = spec["containers"][0]
    args = container["args"]
    paths = [args[i + 1] for i, arg in enumerate(args) if arg == "--config"]
    mount = next(m["mountPath"] for m in container["volumeMounts"] if m["name"] == "config")
    data = find(objects, "ConfigMap", "tidal-config")["data"]
    where = tempfile.mkdtemp(prefix="tidal-config-")
    files = []
    for path in paths:
        directory, key = posixpath.split(path)
        assert directory == mount, f"{path} is not in the ConfigMap mounted at {mount}"
        local = f"{where}/{key}"
        with open(local, "w", encoding="utf-8") as handle:
            handle.write(data[key])
        files.append(local)
    return load_layered(files)


def pod_spec(objects: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = find(objects, "Deployment", "tidal")["spec"]["template"]["spec"]
    return spec


@pytest.mark.parametrize("directory", DIRECTORIES)
def test_every_rendered_object_is_valid_against_the_kubernetes_schemas(directory: str) -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    problems = []
    for obj in render(directory):
        try:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as err:
            problems.append(f"{obj['kind']} {obj['metadata']['name']}: {str(err).splitlines()[0]}")
    assert problems == []


@pytest.mark.parametrize("directory", DIRECTORIES)
def test_namespaced_objects_live_in_tidal_system(directory: str) -> None:
    misplaced = [
        f"{o['kind']} {o['metadata']['name']}"
        for o in render(directory)
        if o["kind"] not in CLUSTER_SCOPED and o["metadata"].get("namespace") != NAMESPACE
    ]
    assert misplaced == []


def test_the_base_configmap_is_config_default_yaml() -> None:
    default = (REPO / "config" / "default.yaml").read_text(encoding="utf-8")
    copy = (REPO / "deploy" / "base" / "config.yaml").read_text(encoding="utf-8")
    assert copy == default, "run: cp config/default.yaml deploy/base/config.yaml"
    assert find(render("deploy/base"), "ConfigMap", "tidal-config")["data"] == {"config.yaml": default}


@pytest.mark.parametrize("overlay", list(CLOUDS))
def test_each_overlay_configures_its_cloud_with_a_valid_configuration(overlay: str) -> None:
    config = config_of(render(f"deploy/overlays/{overlay}"))
    assert config.cloud == CLOUDS[overlay]


def test_the_kai_component_carries_the_kai_preset_and_is_never_applied_alone() -> None:
    preset = (REPO / "config" / "examples" / "kai.yaml").read_text(encoding="utf-8")
    copy = (REPO / "deploy" / "overlays" / "kai" / "kai.yaml").read_text(encoding="utf-8")
    assert copy == preset, "run: cp config/examples/kai.yaml deploy/overlays/kai/kai.yaml"
    kustomization = yaml.safe_load((REPO / "deploy" / "overlays" / "kai" / "kustomization.yaml").read_text())
    assert kustomization["kind"] == "Component"


def test_the_kai_preset_on_a_cloud_overlay_keeps_the_clouds_settings_and_adds_the_presets() -> None:
    preset = yaml.safe_load((REPO / "config" / "examples" / "kai.yaml").read_text(encoding="utf-8"))
    eks, both = config_of(render("deploy/overlays/eks")), config_of(render(f"deploy/overlays/{KAI_ON_EKS}"))
    assert (both.cloud, both.region, both.cluster_name) == (eks.cloud, eks.region, eks.cluster_name)
    assert both.providers == eks.providers
    assert both.scheduler_names == tuple(preset["schedulerNames"])
    # The preset only adds: the overlay's own limit and capacity types are the ones in force.
    assert (both.capacity_types, both.cluster_gpu_limit) == (eks.capacity_types, eks.cluster_gpu_limit)
    regexp = both.pending_pod_reason_regexp
    assert regexp.search("0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")
    assert not regexp.search("OverLimit: research quota has reached the allowable limit of GPUs.")
    args = pod_spec(render(f"deploy/overlays/{KAI_ON_EKS}"))["containers"][0]["args"]
    assert args == ["run", "--config", "/etc/tidal/config.yaml", "--config", "/etc/tidal/kai.yaml"]


@pytest.mark.parametrize(
    ("overlay", "annotation", "pattern"),
    [
        ("eks", "eks.amazonaws.com/role-arn", r"arn:aws:iam::\d{12}:role/[\w+=,.@-]+"),
        (
            "gke",
            "iam.gke.io/gcp-service-account",
            r"[a-z][-a-z0-9]{4,28}[a-z0-9]@[-a-z0-9]+\.iam\.gserviceaccount\.com",
        ),
        ("aks", "azure.workload.identity/client-id", r"[0-9a-f]{8}-([0-9a-f]{4}-){3}[0-9a-f]{12}"),
    ],
)
def test_each_cloud_overlay_annotates_the_service_account_for_workload_identity(
    overlay: str, annotation: str, pattern: str
) -> None:
    objects = render(f"deploy/overlays/{overlay}")
    account = find(objects, "ServiceAccount", pod_spec(objects)["serviceAccountName"])
    assert re.fullmatch(pattern, account["metadata"]["annotations"][annotation])


def test_the_aks_overlay_opts_the_pod_into_workload_identity() -> None:
    template = find(render("deploy/overlays/aks"), "Deployment", "tidal")["spec"]["template"]
    assert template["metadata"]["labels"]["azure.workload.identity/use"] == "true"


def test_the_base_carries_no_cloud_identity() -> None:
    account = find(render("deploy/base"), "ServiceAccount", "tidal")
    assert not account["metadata"].get("annotations")


@pytest.mark.parametrize("overlay", ["eks", "gke", "aks", KAI_ON_EKS])
def test_an_overlay_keeps_the_base_pod_apart_from_identity_image_and_configuration_files(
    overlay: str,
) -> None:
    base = find(render("deploy/base"), "Deployment", "tidal")
    mine = find(render(f"deploy/overlays/{overlay}"), "Deployment", "tidal")
    for deployment in (base, mine):
        deployment["spec"]["template"]["metadata"]["labels"].pop("azure.workload.identity/use", None)
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        container.pop("image")
        args = container["args"]
        assert args[:3] == ["run", "--config", "/etc/tidal/config.yaml"]
        del args[3:]  # more --config files layered over the first (the KAI preset)
    assert mine == base


@pytest.mark.parametrize(("overlay", "extra"), [("eks", "aws"), ("gke", "gcp"), ("aks", "azure")])
def test_each_cloud_overlay_runs_the_image_built_with_only_its_extra(overlay: str, extra: str) -> None:
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    image = pod_spec(render(f"deploy/overlays/{overlay}"))["containers"][0]["image"]
    assert extra in extras
    assert image.endswith(f"-{extra}")


def test_the_deployment_runs_two_replicas_that_elect_a_leader() -> None:
    objects = render("deploy/base")
    assert find(objects, "Deployment", "tidal")["spec"]["replicas"] == 2
    assert config_of(objects).leader_election.enabled


def test_the_role_names_the_lease_and_the_status_configmap_the_daemon_uses() -> None:
    objects = render("deploy/base")
    election = config_of(objects).leader_election
    role = find(objects, "Role", "tidal")
    named = {(r["resources"][0], n) for r in role["rules"] for n in r.get("resourceNames", ())}
    assert role["metadata"]["namespace"] == election.namespace
    assert named == {("leases", election.lease_name), ("configmaps", STATUS_CONFIGMAP)}


@pytest.mark.parametrize("directory", DIRECTORIES)
def test_no_rule_grants_secrets_or_wildcards(directory: str) -> None:
    rules = [r for o in render(directory) if o["kind"] in ("Role", "ClusterRole") for r in o["rules"]]
    granted = {x for r in rules for key in ("apiGroups", "resources", "verbs") for x in r[key]}
    assert rules
    assert "*" not in granted
    assert not {x for x in granted if x.split("/")[0] == "secrets"}


@pytest.mark.parametrize("directory", DIRECTORIES)
def test_nothing_mounts_or_reads_a_secret(directory: str) -> None:
    spec = pod_spec(render(directory))
    assert [v["name"] for v in spec["volumes"] if "secret" in v] == []
    env = [e for c in spec["containers"] for e in c.get("env", ())]
    assert [e["name"] for e in env if "secretKeyRef" in e.get("valueFrom", {})] == []
    assert [o for o in render(directory) if o["kind"] == "Secret"] == []


def test_the_service_and_the_pdb_select_the_controller_pods() -> None:
    objects = render("deploy/base")
    labels = find(objects, "Deployment", "tidal")["spec"]["template"]["metadata"]["labels"]
    service = find(objects, "Service", "tidal-metrics")["spec"]
    budget = find(objects, "PodDisruptionBudget", "tidal")["spec"]
    assert service["selector"].items() <= labels.items()
    assert budget["selector"]["matchLabels"].items() <= labels.items()
    assert budget["maxUnavailable"] == 1


def test_the_service_exposes_the_port_the_daemon_serves_metrics_on() -> None:
    objects = render("deploy/base")
    port = int(config_of(objects).metrics_address.rpartition(":")[2])
    container = pod_spec(objects)["containers"][0]
    named = {p["name"]: p["containerPort"] for p in container["ports"]}
    service_port = find(objects, "Service", "tidal-metrics")["spec"]["ports"][0]
    assert named[service_port["targetPort"]] == port


def test_the_simulated_node_rules_exist_only_in_the_simulated_overlay() -> None:
    def simulated_roles(directory: str) -> list[str]:
        return [o["metadata"]["name"] for o in render(directory) if o["kind"] == "ClusterRole"]

    assert simulated_roles("deploy/base") == ["tidal"]
    assert sorted(simulated_roles("deploy/overlays/simulated")) == ["tidal", "tidal-simulated-nodes"]
    for overlay in ("eks", "gke", "aks", KAI_ON_EKS):
        assert simulated_roles(f"deploy/overlays/{overlay}") == ["tidal"]


def test_the_simulated_overlay_reads_a_catalog_the_image_ships() -> None:
    config = config_of(render("deploy/overlays/simulated"))
    catalog = config.providers["simulated"]["catalog"]
    dockerfile = (REPO / "Dockerfile").read_text()
    assert catalog.startswith("/usr/share/tidal/catalogs/")
    assert "COPY config/catalogs /usr/share/tidal/catalogs" in dockerfile
    assert (REPO / "config" / "catalogs" / catalog.rpartition("/")[2]).is_file()


@pytest.mark.parametrize(
    ("overlay", "catalog"), [("eks", "aws-us-east-1"), ("gke", "gcp-us-central1"), ("aks", "azure-eastus")]
)
def test_each_cloud_overlay_plans_the_example_cluster_on_its_cloud_and_still_packs_small_pods(
    overlay: str, catalog: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        find(render(f"deploy/overlays/{overlay}"), "ConfigMap", "tidal-config")["data"]["config.yaml"]
    )
    argv = ["plan", "--snapshot", str(REPO / "config" / "examples" / "snapshot-kai.yaml")]
    argv += ["--catalog", str(REPO / "config" / "catalogs" / f"{catalog}.csv"), "--config", str(config)]
    assert cli.main([*argv, "--now", "2026-11-20T10:05:00Z", "--output", "json"]) == 0
    launches = json.loads(capsys.readouterr().out)["launches"]
    assert {la["mode"] for la in launches} == {"bin-selection", "bin-packing"}
    assert (
        sum(la["gpus"] for la in launches)
        <= config_of(render(f"deploy/overlays/{overlay}")).cluster_gpu_limit
    )
