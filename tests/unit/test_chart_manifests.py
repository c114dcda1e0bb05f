"""The chart under charts/tidal: it renders with the real helm, every object is valid Kubernetes, the values
wire what they promise (cloud, identity, configuration, CRDs) and bad values fail with one clear line."""

from __future__ import annotations

import json
import posixpath
import re
import tempfile
from typing import TYPE_CHECKING

import pytest
import yaml

from autoscaler.cli import main as cli
from autoscaler.runtime.config_watch import load_layered
from autoscaler.runtime.status import STATUS_CONFIGMAP
from autoscaler.version import __version__
from tests.fakes.helm_chart import CHART, EXAMPLES, NAMESPACE, REPO, find, helm, render, render_error

if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

    from autoscaler.config.options import Config

KUBERNETES_VERSION = "1.32.0"  # the oldest minor still supported on EKS, GKE and AKS alike
CLOUDS = {"eks": "aws", "gke": "gcp", "aks": "azure", "simulated": "simulated"}
CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition", "PriorityClass"}
# Kinds of the Prometheus Operator: kubernetes-validate has no schema for them.
OPERATOR_KINDS = {"ServiceMonitor", "PrometheusRule"}
EVERYTHING_ON = {
    "kaiPreset": True,
    "extraArgs": ["--dry-run"],
    "monitoring": {
        "serviceMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
        "prometheusRule": {"enabled": True},
        "dashboard": {"enabled": True},
    },
}
CRD_NAMES = {
    "provisioningRequest": "provisioningrequests.autoscaling.x-k8s.io",
    "capacityBuffer": "capacitybuffers.autoscaling.x-k8s.io",
}
# What each case renders: the chart's defaults, each example, and every optional part switched on.
CASES: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {
    "defaults": ({}, ()),
    **{name: ({}, (name,)) for name in EXAMPLES},
    "everything-on": (EVERYTHING_ON, ("eks",)),
}


def config_of(objects: list[dict[str, Any]]) -> Config:
    """The configuration the daemon runs with: the files its --config arguments name, read from the mounted
    ConfigMap and laid over each other in order, as ``tidal run`` does."""
    spec = pod_spec(objects)
    container = spec["containers"][0]
    args = container["args"]
    paths = [args[i + 1] for i, arg in enumerate(args) if arg == "--config"]
    mount = next(m["mountPath"] for m in container["volumeMounts"] if m["name"] == "config")
    volume = next(v for v in spec["volumes"] if v["name"] == "config")
    data = find(objects, "ConfigMap", volume["configMap"]["name"])["data"]
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


def case(name: str) -> list[dict[str, Any]]:
    values, examples = CASES[name]
    return render(values, examples=examples)


def test_the_chart_and_the_image_carry_tidals_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["version"] == chart["appVersion"] == __version__


@pytest.mark.parametrize("examples", [(), *((e,) for e in EXAMPLES)], ids=lambda e: e[0] if e else "defaults")
def test_helm_lint_strict_passes_once_the_image_repository_is_given(examples: tuple[str, ...]) -> None:
    files = [arg for name in examples for arg in ("-f", str(CHART / "examples" / f"{name}.yaml"))]
    done = helm("lint", "--strict", str(CHART), *files, "--set", "image.repository=registry.example.com/t")
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("name", list(CASES))
def test_every_rendered_object_is_valid_against_the_kubernetes_schemas(name: str) -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    problems = []
    objects = [o for o in case(name) if o["kind"] not in OPERATOR_KINDS]
    for obj in objects:
        try:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as err:
            problems.append(f"{obj['kind']} {obj['metadata']['name']}: {str(err).splitlines()[0]}")
    assert problems == []
    assert {o["kind"] for o in objects} >= {"Deployment", "ConfigMap", "ClusterRole", "Role", "Service"}


@pytest.mark.parametrize("name", list(CASES))
def test_namespaced_objects_live_in_the_release_namespace(name: str) -> None:
    misplaced = [
        f"{o['kind']} {o['metadata']['name']}"
        for o in case(name)
        if o["kind"] not in CLUSTER_SCOPED and o["metadata"].get("namespace") != NAMESPACE
    ]
    assert misplaced == []


def test_a_missing_image_repository_fails_with_a_message_naming_the_value() -> None:
    message = render_error(image=False)
    assert "image.repository is required" in message
    assert "--set image.repository=" in message


def test_the_image_tag_defaults_to_the_version_and_the_cloud_and_can_be_pinned() -> None:
    def image(values: dict[str, Any]) -> str:
        return str(pod_spec(render(values))["containers"][0]["image"])

    assert image({}) == f"registry.example.com/tidal-autoscaler:{__version__}-aws"
    assert image({"image": {"tag": "1.2.3-custom"}}) == "registry.example.com/tidal-autoscaler:1.2.3-custom"
    assert 'image.tag is required for config.cloud "mycloud"' in render_error(
        {"config": {"cloud": "mycloud"}}
    )


@pytest.mark.parametrize("example", EXAMPLES)
def test_each_example_configures_its_cloud_with_a_valid_configuration(example: str) -> None:
    config = config_of(render(examples=(example,)))
    assert config.cloud == CLOUDS[example]


def test_the_default_configmap_holds_only_what_the_values_set_and_tidal_fills_in_the_rest() -> None:
    objects = render()
    data = find(objects, "ConfigMap", "tidal-config")["data"]
    assert yaml.safe_load(data["config.yaml"]) == {"leaderElection": {"namespace": NAMESPACE}}
    assert config_of(objects).cloud == "aws"


def test_the_kai_preset_file_is_config_examples_kai_yaml() -> None:
    preset = (REPO / "config" / "examples" / "kai.yaml").read_text(encoding="utf-8")
    copy = (CHART / "files" / "kai.yaml").read_text(encoding="utf-8")
    assert copy == preset, "run: cp config/examples/kai.yaml charts/tidal/files/kai.yaml"


def test_the_kai_preset_keeps_the_clouds_settings_and_adds_the_presets() -> None:
    preset = yaml.safe_load((REPO / "config" / "examples" / "kai.yaml").read_text(encoding="utf-8"))
    eks = config_of(render(examples=("eks",)))
    both_objects = render({"kaiPreset": True}, examples=("eks",))
    both = config_of(both_objects)
    assert (both.cloud, both.region, both.cluster_name) == (eks.cloud, eks.region, eks.cluster_name)
    assert both.providers == eks.providers
    assert both.scheduler_names == tuple(preset["schedulerNames"])
    # The preset only adds: the example's own limit and capacity types are the ones in force.
    assert (both.capacity_types, both.cluster_gpu_limit) == (eks.capacity_types, eks.cluster_gpu_limit)
    regexp = both.pending_pod_reason_regexp
    assert regexp.search("0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")
    assert not regexp.search("OverLimit: research quota has reached the allowable limit of GPUs.")
    args = pod_spec(both_objects)["containers"][0]["args"]
    assert args == ["run", "--config", "/etc/tidal/config.yaml", "--config", "/etc/tidal/kai.yaml"]


def test_extra_args_follow_the_configuration_files() -> None:
    args = pod_spec(render({"extraArgs": ["--dry-run"]}))["containers"][0]["args"]
    assert args == ["run", "--config", "/etc/tidal/config.yaml", "--dry-run"]


@pytest.mark.parametrize(
    ("example", "annotation", "pattern"),
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
def test_each_cloud_example_annotates_the_service_account_for_workload_identity(
    example: str, annotation: str, pattern: str
) -> None:
    objects = render(examples=(example,))
    account = find(objects, "ServiceAccount", pod_spec(objects)["serviceAccountName"])
    assert re.fullmatch(pattern, account["metadata"]["annotations"][annotation])


@pytest.mark.parametrize(
    ("values", "annotations"),
    [
        (
            {"identity": {"aws": {"roleArn": "arn:aws:iam::123456789012:role/tidal"}}},
            {
                "eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/tidal",
                "eks.amazonaws.com/sts-regional-endpoints": "true",
            },
        ),
        (
            {
                "identity": {
                    "aws": {"roleArn": "arn:aws:iam::123456789012:role/tidal", "stsRegionalEndpoints": False}
                }
            },
            {"eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/tidal"},
        ),
        (
            {
                "config": {"cloud": "gcp"},
                "identity": {"gcp": {"serviceAccount": "tidal-autoscaler@proj-1.iam.gserviceaccount.com"}},
            },
            {"iam.gke.io/gcp-service-account": "tidal-autoscaler@proj-1.iam.gserviceaccount.com"},
        ),
        (
            {
                "config": {"cloud": "azure"},
                "identity": {"azure": {"clientId": "1b2c3d4e-0000-4000-8000-00000000abcd"}},
            },
            {"azure.workload.identity/client-id": "1b2c3d4e-0000-4000-8000-00000000abcd"},
        ),
        ({}, None),
    ],
    ids=["irsa", "irsa-global-sts", "gke", "aks", "none"],
)
def test_identity_values_become_exactly_the_service_account_annotations(
    values: dict[str, Any], annotations: dict[str, str] | None
) -> None:
    objects = render(values)
    account = find(objects, "ServiceAccount", pod_spec(objects)["serviceAccountName"])
    assert account["metadata"].get("annotations") == annotations
    labels = find(objects, "Deployment", "tidal")["spec"]["template"]["metadata"]["labels"]
    azure = values.get("identity", {}).get("azure")
    assert ("azure.workload.identity/use" in labels) == bool(azure)
    if azure:
        assert labels["azure.workload.identity/use"] == "true"


def test_an_identity_for_another_cloud_than_the_configured_one_is_refused() -> None:
    message = render_error(
        {"identity": {"gcp": {"serviceAccount": "tidal-autoscaler@p-1.iam.gserviceaccount.com"}}}
    )
    assert 'identity.gcp.serviceAccount is set but config.cloud is "aws"' in message


def test_a_malformed_role_arn_is_refused_by_the_schema_naming_the_value() -> None:
    message = render_error({"identity": {"aws": {"roleArn": "tidal-autoscaler"}}})
    assert "/identity/aws/roleArn" in message


def test_a_misspelt_configuration_option_is_refused_by_the_schema_naming_it() -> None:
    message = render_error({"config": {"clusterGPULimt": 8}})
    assert "/config" in message and "clusterGPULimt" in message


def test_a_configuration_value_of_the_wrong_type_is_refused_by_the_schema_naming_it() -> None:
    assert "/config/scaleDown/enabled" in render_error({"config": {"scaleDown": {"enabled": "often"}}})


@pytest.mark.parametrize("example", ["eks", "gke", "aks"])
def test_an_example_keeps_the_default_pod_apart_from_identity_and_image(example: str) -> None:
    base = find(render(), "Deployment", "tidal")
    mine = find(render(examples=(example,)), "Deployment", "tidal")
    for deployment in (base, mine):
        deployment["spec"]["template"]["metadata"]["labels"].pop("azure.workload.identity/use", None)
        deployment["spec"]["template"]["spec"]["containers"][0].pop("image")
    assert mine == base


@pytest.mark.parametrize(("example", "extra"), [("eks", "aws"), ("gke", "gcp"), ("aks", "azure")])
def test_each_cloud_example_runs_the_image_built_with_only_its_extra(example: str, extra: str) -> None:
    image = pod_spec(render(examples=(example,)))["containers"][0]["image"]
    assert image.endswith(f":{__version__}-{extra}")


def test_the_deployment_runs_two_replicas_that_elect_a_leader() -> None:
    objects = render()
    assert find(objects, "Deployment", "tidal")["spec"]["replicas"] == 2
    assert config_of(objects).leader_election.enabled


def test_more_than_one_replica_without_leader_election_is_refused() -> None:
    message = render_error({"config": {"leaderElection": {"enabled": False}}})
    assert "replicaCount: 2 replicas need config.leaderElection.enabled true" in message
    assert find(
        render({"replicaCount": 1, "config": {"leaderElection": {"enabled": False}}}), "Deployment", "tidal"
    )


def test_the_simulated_cloud_is_refused_with_more_than_one_replica() -> None:
    message = render_error({"config": {"cloud": "simulated"}})
    assert "replicaCount: 2 with config.cloud simulated" in message and "set replicaCount=1" in message


@pytest.mark.parametrize("namespace", [NAMESPACE, "autoscaling"])
def test_the_role_names_the_lease_and_the_status_configmap_where_the_daemon_keeps_them(
    namespace: str,
) -> None:
    objects = render(namespace=namespace)
    election = config_of(objects).leader_election
    role = find(objects, "Role", "tidal")
    named = {(r["resources"][0], n) for r in role["rules"] for n in r.get("resourceNames", ())}
    assert election.namespace == namespace
    assert role["metadata"]["namespace"] == election.namespace
    assert named == {("leases", election.lease_name), ("configmaps", STATUS_CONFIGMAP)}


def test_a_lease_named_in_the_configuration_moves_the_role_with_it() -> None:
    objects = render({"config": {"leaderElection": {"namespace": "kube-system", "leaseName": "autoscaler"}}})
    role = find(objects, "Role", "tidal")
    binding = find(objects, "RoleBinding", "tidal")
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == "kube-system"
    assert {n for r in role["rules"] for n in r.get("resourceNames", ())} == {"autoscaler", STATUS_CONFIGMAP}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "tidal", "namespace": NAMESPACE}]


def test_objects_take_the_release_name_when_it_does_not_say_tidal() -> None:
    objects = render(release="autoscaler")
    deployment = find(objects, "Deployment", "autoscaler-tidal")
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == "autoscaler-tidal"
    assert find(objects, "ConfigMap", "autoscaler-tidal-config")


@pytest.mark.parametrize("name", list(CASES))
def test_no_rule_grants_secrets_or_wildcards(name: str) -> None:
    rules = [r for o in case(name) if o["kind"] in ("Role", "ClusterRole") for r in o["rules"]]
    granted = {x for r in rules for key in ("apiGroups", "resources", "verbs") for x in r[key]}
    assert rules
    assert "*" not in granted
    assert not {x for x in granted if x.split("/")[0] == "secrets"}


@pytest.mark.parametrize("name", list(CASES))
def test_nothing_mounts_or_reads_a_secret(name: str) -> None:
    objects = case(name)
    spec = pod_spec(objects)
    assert [v["name"] for v in spec["volumes"] if "secret" in v] == []
    env = [e for c in spec["containers"] for e in c.get("env", ())]
    assert [e["name"] for e in env if "secretKeyRef" in e.get("valueFrom", {})] == []
    assert [o for o in objects if o["kind"] == "Secret"] == []


def test_the_service_and_the_pdb_select_the_controller_pods() -> None:
    objects = render()
    labels = find(objects, "Deployment", "tidal")["spec"]["template"]["metadata"]["labels"]
    service = find(objects, "Service", "tidal-metrics")["spec"]
    budget = find(objects, "PodDisruptionBudget", "tidal")["spec"]
    assert service["selector"].items() <= labels.items()
    assert budget["selector"]["matchLabels"].items() <= labels.items()
    assert budget["maxUnavailable"] == 1
    assert budget["unhealthyPodEvictionPolicy"] == "AlwaysAllow"


@pytest.mark.parametrize("address", [None, "0.0.0.0:9090"])
def test_the_container_port_is_the_one_the_daemon_serves_metrics_on(address: str | None) -> None:
    objects = render({"config": {"metricsAddress": address}} if address else {})
    port = int(config_of(objects).metrics_address.rpartition(":")[2])
    container = pod_spec(objects)["containers"][0]
    named = {p["name"]: p["containerPort"] for p in container["ports"]}
    service_port = find(objects, "Service", "tidal-metrics")["spec"]["ports"][0]
    assert named[service_port["targetPort"]] == port


def test_the_simulated_node_rules_come_only_with_the_simulated_cloud() -> None:
    def cluster_roles(objects: list[dict[str, Any]]) -> list[str]:
        return sorted(o["metadata"]["name"] for o in objects if o["kind"] == "ClusterRole")

    assert cluster_roles(render()) == ["tidal"]
    assert cluster_roles(render(examples=("simulated",))) == ["tidal", "tidal-simulated-nodes"]
    for example in ("eks", "gke", "aks"):
        assert cluster_roles(render(examples=(example,))) == ["tidal"]


def test_the_simulated_example_reads_a_catalog_the_image_ships() -> None:
    config = config_of(render(examples=("simulated",)))
    catalog = config.providers["simulated"]["catalog"]
    dockerfile = (REPO / "Dockerfile").read_text()
    assert catalog.startswith("/usr/share/tidal/catalogs/")
    assert "COPY config/catalogs /usr/share/tidal/catalogs" in dockerfile
    assert (REPO / "config" / "catalogs" / catalog.rpartition("/")[2]).is_file()


@pytest.mark.parametrize(
    ("values", "installed"),
    [
        ({}, set(CRD_NAMES)),
        ({"crds": {"provisioningRequest": {"install": False}}}, {"capacityBuffer"}),
        ({"crds": {"capacityBuffer": {"install": False}}}, {"provisioningRequest"}),
        ({"crds": {"provisioningRequest": {"install": False}, "capacityBuffer": {"install": False}}}, set()),
    ],
    ids=["both", "no-provisioningrequest", "no-capacitybuffer", "neither"],
)
def test_the_crds_are_installed_unless_a_value_says_another_component_serves_them(
    values: dict[str, Any], installed: set[str]
) -> None:
    crds = {o["metadata"]["name"] for o in render(values) if o["kind"] == "CustomResourceDefinition"}
    assert crds == {CRD_NAMES[name] for name in installed}


def test_the_provisioningrequest_crd_serves_v1_stored_and_v1beta1_with_one_schema() -> None:
    crd = find(render(), "CustomResourceDefinition", CRD_NAMES["provisioningRequest"])
    assert crd["spec"]["group"] == "autoscaling.x-k8s.io" and crd["spec"]["scope"] == "Namespaced"
    versions = {v["name"]: v for v in crd["spec"]["versions"]}
    assert {(n, v["served"], v["storage"]) for n, v in versions.items()} == {
        ("v1", True, True),
        ("v1beta1", True, False),
    }
    # Without a conversion webhook the two versions must accept the same objects.
    assert versions["v1"]["schema"] == versions["v1beta1"]["schema"]
    spec = versions["v1"]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec["required"] == ["podSets", "provisioningClassName"]
    assert all(v["subresources"] == {"status": {}} for v in versions.values())


def test_the_capacitybuffer_crd_serves_v1beta1_with_a_status_subresource() -> None:
    crd = find(render(), "CustomResourceDefinition", CRD_NAMES["capacityBuffer"])
    (version,) = crd["spec"]["versions"]
    assert (crd["spec"]["group"], version["name"], version["storage"]) == (
        "autoscaling.x-k8s.io",
        "v1beta1",
        True,
    )
    assert version["subresources"] == {"status": {}}
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert {"podTemplateRef", "scalableRef", "replicas", "percentage", "limits"} <= set(spec["properties"])


@pytest.mark.parametrize(
    ("keep", "annotations"), [(True, {"helm.sh/resource-policy": "keep"}), (False, None)]
)
def test_the_crds_outlive_helm_uninstall_unless_told_otherwise(
    keep: bool, annotations: dict[str, str] | None
) -> None:
    for crd in (o for o in render({"crds": {"keep": keep}}) if o["kind"] == "CustomResourceDefinition"):
        assert crd["metadata"].get("annotations") == annotations


@pytest.mark.parametrize(
    ("example", "catalog"), [("eks", "aws-us-east-1"), ("gke", "gcp-us-central1"), ("aks", "azure-eastus")]
)
def test_each_cloud_example_plans_the_example_cluster_on_its_cloud_and_still_packs_small_pods(
    example: str, catalog: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    objects = render(examples=(example,))
    config = tmp_path / "config.yaml"
    config.write_text(find(objects, "ConfigMap", "tidal-config")["data"]["config.yaml"])
    argv = ["plan", "--snapshot", str(REPO / "config" / "examples" / "snapshot-kai.yaml")]
    argv += ["--catalog", str(REPO / "config" / "catalogs" / f"{catalog}.csv"), "--config", str(config)]
    assert cli.main([*argv, "--now", "2026-11-20T10:05:00Z", "--output", "json"]) == 0
    launches = json.loads(capsys.readouterr().out)["launches"]
    assert {la["mode"] for la in launches} == {"bin-selection", "bin-packing"}
    assert sum(la["gpus"] for la in launches) <= config_of(objects).cluster_gpu_limit
