"""The controller pod the chart renders is hardened and wired the way the daemon needs it."""

from __future__ import annotations

import posixpath
from typing import TYPE_CHECKING

import pytest

from autoscaler.core.model import LABEL_MANAGED
from tests.fakes.helm_chart import find, render, render_error

if TYPE_CHECKING:
    from typing import Any


@pytest.fixture(scope="module")
def objects() -> list[dict[str, Any]]:
    return render()


@pytest.fixture(scope="module")
def pod(objects: list[dict[str, Any]]) -> dict[str, Any]:
    template: dict[str, Any] = find(objects, "Deployment", "tidal")["spec"]["template"]
    return template


@pytest.fixture(scope="module")
def container(pod: dict[str, Any]) -> dict[str, Any]:
    only: dict[str, Any]
    (only,) = pod["spec"]["containers"]
    return only


def test_the_pod_runs_as_a_non_root_user(pod: dict[str, Any], container: dict[str, Any]) -> None:
    security = pod["spec"]["securityContext"]
    assert security["runAsNonRoot"] is True
    assert security["runAsUser"] > 0 and security["runAsGroup"] > 0
    assert container["securityContext"]["runAsNonRoot"] is True
    assert "runAsUser" not in container["securityContext"]  # the pod's UID, the image's USER


def test_the_container_cannot_write_its_root_filesystem_escalate_or_keep_capabilities(
    container: dict[str, Any],
) -> None:
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["privileged"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}


def test_seccomp_is_the_runtime_default(pod: dict[str, Any], container: dict[str, Any]) -> None:
    assert pod["spec"]["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}


def test_cpu_and_memory_have_requests_within_limits(container: dict[str, Any]) -> None:
    from autoscaler.core.quantity import parse_quantity

    resources = container["resources"]
    for name in ("cpu", "memory"):
        request, limit = resources["requests"][name], resources["limits"][name]
        assert parse_quantity(request) <= parse_quantity(limit), name


def test_liveness_and_readiness_probe_healthz_and_readyz_on_the_metrics_port(
    container: dict[str, Any],
) -> None:
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert [p["name"] for p in container["ports"]] == ["metrics"]


def test_a_startup_probe_covers_the_cache_sync_before_liveness_starts(container: dict[str, Any]) -> None:
    # daemon.start() waits up to 120 s for the watch caches; liveness must not restart the pod meanwhile.
    startup = container["startupProbe"]
    assert startup["httpGet"]["path"] == "/readyz"
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 120


def test_replicas_spread_across_zones(pod: dict[str, Any]) -> None:
    labels = pod["metadata"]["labels"]
    by_key = {c["topologyKey"]: c for c in pod["spec"]["topologySpreadConstraints"]}
    zone = by_key["topology.kubernetes.io/zone"]
    assert zone["maxSkew"] == 1
    assert zone["labelSelector"]["matchLabels"].items() <= labels.items()


def test_the_pod_never_runs_on_a_node_tidal_manages(pod: dict[str, Any]) -> None:
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    for term in terms["nodeSelectorTerms"]:
        assert {"key": LABEL_MANAGED, "operator": "DoesNotExist"} in term["matchExpressions"]


def test_the_configuration_file_is_the_whole_configmap_mounted_as_a_directory(
    objects: list[dict[str, Any]], pod: dict[str, Any], container: dict[str, Any]
) -> None:
    args = container["args"]
    assert args[:1] == ["run"]
    config_path = args[args.index("--config") + 1]
    directory, filename = posixpath.split(config_path)
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == directory]
    assert "subPath" not in mount and "subPathExpr" not in mount  # subPath mounts never see updates
    (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == mount["name"]]
    assert "items" not in volume["configMap"]
    configmap = find(objects, "ConfigMap", volume["configMap"]["name"])
    assert filename in configmap["data"]


def test_the_configmap_name_has_no_content_hash_so_edits_reach_the_running_pods(
    objects: list[dict[str, Any]], pod: dict[str, Any]
) -> None:
    names = [v["configMap"]["name"] for v in pod["spec"]["volumes"] if "configMap" in v]
    assert names == ["tidal-config"]
    assert find(objects, "ConfigMap", "tidal-config")


def test_the_pod_knows_its_own_name_namespace_and_uid(container: dict[str, Any]) -> None:
    env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") for e in container["env"]}
    assert env["POD_NAME"] == "metadata.name"
    assert env["POD_NAMESPACE"] == "metadata.namespace"
    assert env["POD_UID"] == "metadata.uid"


def test_writable_paths_are_only_the_tmp_emptydir(pod: dict[str, Any], container: dict[str, Any]) -> None:
    writable = [m["mountPath"] for m in container["volumeMounts"] if not m.get("readOnly")]
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert writable == ["/tmp"]
    (tmp,) = [m for m in container["volumeMounts"] if m["mountPath"] == "/tmp"]
    assert "sizeLimit" in volumes[tmp["name"]]["emptyDir"]


def test_the_pod_is_system_cluster_critical_so_a_full_cluster_cannot_evict_or_starve_it(
    pod: dict[str, Any],
) -> None:
    assert pod["spec"]["priorityClassName"] == "system-cluster-critical"


def test_a_quota_in_the_namespace_admits_the_critical_pods_where_the_cluster_asks_for_one(
    objects: list[dict[str, Any]], pod: dict[str, Any]
) -> None:
    quota = find(objects, "ResourceQuota", "tidal-critical-pods")["spec"]
    (scope,) = quota["scopeSelector"]["matchExpressions"]
    assert (scope["scopeName"], scope["operator"]) == ("PriorityClass", "In")
    assert pod["spec"]["priorityClassName"] in scope["values"]
    replicas = find(objects, "Deployment", "tidal")["spec"]["replicas"]
    assert int(quota["hard"]["pods"]) >= 2 * replicas  # every replica, and as many again while rolling out


def test_a_priority_class_of_its_own_is_created_when_asked_and_needs_no_quota() -> None:
    objects = render({"priorityClass": {"name": "tidal-critical", "create": True, "value": 900000}})
    created = find(objects, "PriorityClass", "tidal-critical")
    assert (created["value"], created["globalDefault"]) == (900000, False)
    assert find(objects, "Deployment", "tidal")["spec"]["template"]["spec"]["priorityClassName"] == (
        "tidal-critical"
    )
    assert [o for o in objects if o["kind"] == "ResourceQuota"] == []


def test_replicas_spread_across_nodes_too_and_the_spread_can_be_turned_off(pod: dict[str, Any]) -> None:
    keys = [c["topologyKey"] for c in pod["spec"]["topologySpreadConstraints"]]
    assert keys == ["topology.kubernetes.io/zone", "kubernetes.io/hostname"]
    off = find(render({"topologySpread": {"enabled": False}}), "Deployment", "tidal")
    assert "topologySpreadConstraints" not in off["spec"]["template"]["spec"]


def test_the_pod_budget_can_be_left_out() -> None:
    objects = render({"podDisruptionBudget": {"enabled": False}})
    assert [o for o in objects if o["kind"] == "PodDisruptionBudget"] == []


def test_creating_a_class_with_a_system_name_is_refused() -> None:
    message = render_error({"priorityClass": {"create": True}})
    assert 'priorityClass.name: "system-cluster-critical" with priorityClass.create' in message
