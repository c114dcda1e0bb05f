"""ClusterActions: what tidal writes to the cluster, checked through the fake API server's state and log."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from structlog.testing import capture_logs

from autoscaler.core.model import TAINT_DISRUPTED
from autoscaler.runtime.kube.actions import ANNOTATION_CORDONED, ClusterActions, EvictionResult
from autoscaler.runtime.kube.client import KubeApiError, KubeClient, make_api_client
from autoscaler.runtime.kube.convert import pod_from_dict
from tests.builders import node, pod
from tests.fakes.kube_apiserver import FakeApiServer, RecordedRequest

MUTATING = ("POST", "PUT", "PATCH", "DELETE")
FOREIGN_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        yield server


@pytest.fixture
def client(api: FakeApiServer) -> Iterator[KubeClient]:
    kube = make_api_client(host=api.url, qps=0)
    yield kube
    kube.close()


@pytest.fixture
def actions(client: KubeClient) -> ClusterActions:
    return ClusterActions(client, component="tidal-test")


def ready_pod(name: str, app: str = "web", node_name: str = "cpu-a") -> dict[str, Any]:
    obj = pod(name, node_name=node_name, phase="Running", labels={"app": app})
    obj["status"]["conditions"] = [
        {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-20T10:00:00Z"}
    ]
    return obj


def mutations(api: FakeApiServer) -> list[RecordedRequest]:
    return [r for r in list(api.requests) if r.method in MUTATING]


def taints(api: FakeApiServer, name: str) -> list[dict[str, Any]]:
    found = api.get("nodes", None, name)
    assert found is not None
    return list(found["spec"].get("taints") or [])


def test_cordon_adds_the_taint_and_unschedulable_once(api: FakeApiServer, actions: ClusterActions) -> None:
    api.create(node("gpu-a", gpu=4, taints=[FOREIGN_TAINT]))

    actions.cordon("gpu-a")
    actions.cordon("gpu-a")

    found = api.get("nodes", None, "gpu-a")
    assert found is not None and found["spec"]["unschedulable"] is True
    assert taints(api, "gpu-a") == [FOREIGN_TAINT, {"key": TAINT_DISRUPTED, "effect": "NoSchedule"}]
    assert found["metadata"]["annotations"][ANNOTATION_CORDONED] == "true"
    patches = [r for r in mutations(api) if r.path == "/api/v1/nodes/gpu-a"]
    assert [r.method for r in patches] == ["PATCH"]  # the second cordon found nothing to do


def test_cordon_does_not_clobber_a_taint_written_concurrently(
    api: FakeApiServer, actions: ClusterActions
) -> None:
    api.create(node("cpu-a"))
    raced: list[bool] = []

    def other_controller(request: RecordedRequest) -> None:
        # Another controller taints the node between our read and our patch.
        if request.method == "PATCH" and not raced:
            raced.append(True)
            api.patch(
                "nodes",
                None,
                "cpu-a",
                [{"op": "add", "path": "/spec/taints", "value": [FOREIGN_TAINT]}],
                "json",
            )

    api.on_request = other_controller
    actions.cordon("cpu-a")

    assert taints(api, "cpu-a") == [FOREIGN_TAINT, {"key": TAINT_DISRUPTED, "effect": "NoSchedule"}]
    assert [r.method for r in mutations(api)] == [
        "PATCH",
        "PATCH",
    ]  # the first failed its resourceVersion test


def test_uncordon_removes_only_what_tidal_added(api: FakeApiServer, actions: ClusterActions) -> None:
    api.create(node("gpu-a", taints=[FOREIGN_TAINT]))
    api.create(node("cpu-b", unschedulable=True))  # cordoned by an admin

    for name in ("gpu-a", "cpu-b"):
        actions.cordon(name)
        actions.uncordon(name)

    gpu_a, cpu_b = api.get("nodes", None, "gpu-a"), api.get("nodes", None, "cpu-b")
    assert gpu_a is not None and cpu_b is not None
    assert taints(api, "gpu-a") == [FOREIGN_TAINT] and gpu_a["spec"]["unschedulable"] is False
    assert ANNOTATION_CORDONED not in gpu_a["metadata"]["annotations"]
    assert taints(api, "cpu-b") == [] and cpu_b["spec"]["unschedulable"] is True


def test_cordon_of_a_missing_node_raises_one_line(actions: ClusterActions) -> None:
    with pytest.raises(KubeApiError) as caught:
        actions.cordon("ghost")
    assert caught.value.status == 404
    assert "\n" not in str(caught.value) and str(caught.value).startswith("cordon node ghost: HTTP 404")


def test_evict_reports_evicted_blocked_and_gone(api: FakeApiServer, actions: ClusterActions) -> None:
    api.create(ready_pod("web-0"))
    api.create(ready_pod("db-0", app="db"))
    api.create(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "db", "namespace": "default"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}},
        }
    )
    api.sync_pdb_status()
    budget = api.get("pdb", "default", "db")
    assert budget is not None and budget["status"]["disruptionsAllowed"] == 0

    assert actions.evict("default", "web-0", grace_period_seconds=5) is EvictionResult.EVICTED
    assert actions.evict("default", "db-0") is EvictionResult.BLOCKED
    assert actions.evict("default", "nope") is EvictionResult.GONE

    web = api.get("pods", "default", "web-0")
    assert web is None or web["metadata"].get("deletionTimestamp")
    assert api.get("pods", "default", "db-0") is not None


def test_evict_reports_other_failures_without_raising(api: FakeApiServer, actions: ClusterActions) -> None:
    api.create(ready_pod("web-0"))
    api.faults.push(500, verbs=["POST"], resource="pods/eviction")

    assert actions.evict("default", "web-0") is EvictionResult.FAILED
    assert api.get("pods", "default", "web-0") is not None


def test_delete_node_treats_not_found_as_done(api: FakeApiServer, actions: ClusterActions) -> None:
    api.create(node("cpu-a"))

    assert actions.delete_node("cpu-a") is True
    assert api.get("nodes", None, "cpu-a") is None
    assert actions.delete_node("cpu-a") is False


def test_annotate_and_label_set_and_remove_keys(api: FakeApiServer, actions: ClusterActions) -> None:
    api.create(node("cpu-a", annotations={"tidal.dev/idle-since": "2026-11-20T10:00:00Z"}))

    actions.annotate_node("cpu-a", {"tidal.dev/idle-since": None, "tidal.dev/drain-reason": "underutilized"})
    actions.label_node("cpu-a", {"tidal.dev/managed": "true", "kubernetes.io/os": None})

    found = api.get("nodes", None, "cpu-a")
    assert found is not None
    assert found["metadata"]["annotations"] == {"tidal.dev/drain-reason": "underutilized"}
    assert found["metadata"]["labels"]["tidal.dev/managed"] == "true"
    assert "kubernetes.io/os" not in found["metadata"]["labels"]


def test_events_record_the_involved_object_and_source(api: FakeApiServer, actions: ClusterActions) -> None:
    created = api.create(pod("train-0", namespace="ml", gpu=1))
    model = pod_from_dict(created)

    actions.pod_event(model, reason="TriggeredScaleUp", message="launching g5.xlarge for 1 pod")
    actions.node_event(
        "gpu-a", reason="ScaleDown", message="node empty for 10m", event_type="Warning", uid="u-1"
    )

    (pod_event,) = api.list("events", "ml")
    assert pod_event["metadata"]["name"].startswith("train-0.")
    assert pod_event["involvedObject"] == {
        "kind": "Pod",
        "apiVersion": "v1",
        "namespace": "ml",
        "name": "train-0",
        "uid": created["metadata"]["uid"],
    }
    assert pod_event["source"] == {"component": "tidal-test"} and pod_event["count"] == 1
    assert pod_event["type"] == "Normal" and pod_event["reason"] == "TriggeredScaleUp"
    assert pod_event["firstTimestamp"] == pod_event["lastTimestamp"]
    (node_event,) = api.list("events", "default")
    assert node_event["involvedObject"]["kind"] == "Node" and node_event["type"] == "Warning"


def test_event_failures_are_logged_not_raised(api: FakeApiServer, actions: ClusterActions) -> None:
    fault = api.faults.push(500, verbs=["POST"], resource="events")

    with capture_logs() as logs:
        actions.node_event("gpu-a", reason="ScaleDown", message="x")

    assert fault.hits == 1
    assert api.list("events") == []
    [warning] = [e for e in logs if e["event"] == "event not recorded"]
    assert warning["log_level"] == "warning"
    assert (warning["kind"], warning["name"], warning["reason"], warning["status"]) == (
        "Node",
        "gpu-a",
        "ScaleDown",
        500,
    )


def test_write_status_creates_then_replaces(api: FakeApiServer, actions: ClusterActions) -> None:
    assert actions.read_configmap("tidal-system", "tidal-status") is None

    actions.write_status("tidal-system", "tidal-status", {"pendingPods": "3", "plan": "launch 1 g5.xlarge"})
    actions.write_status("tidal-system", "tidal-status", {"pendingPods": "0"})

    assert actions.read_configmap("tidal-system", "tidal-status") == {"pendingPods": "0", "dryRun": "false"}
    writes = [r.method for r in mutations(api) if "configmaps" in r.path]
    assert writes == ["PUT", "POST", "PUT"]  # replace (404), create, replace


def test_dry_run_mutates_nothing_but_still_writes_events_and_the_status(
    api: FakeApiServer, client: KubeClient
) -> None:
    api.create(node("cpu-a", annotations={"a": "b"}))
    created = api.create(ready_pod("web-0"))
    before = {"node": api.get("nodes", None, "cpu-a"), "pod": api.get("pods", "default", "web-0")}
    dry = ClusterActions(client, dry_run=True)

    dry.cordon("cpu-a")
    dry.uncordon("cpu-a")
    dry.annotate_node("cpu-a", {"a": None})
    dry.label_node("cpu-a", {"tidal.dev/managed": "true"})
    assert dry.evict("default", "web-0") is EvictionResult.EVICTED  # server-side dryRun: budgets checked only
    assert dry.delete_node("cpu-a") is False
    dry.write_status("tidal-system", "tidal-status", {"k": "v"})
    dry.pod_event(pod_from_dict(created), reason="WouldEvict", message="dry run: would evict")

    assert {"node": api.get("nodes", None, "cpu-a"), "pod": api.get("pods", "default", "web-0")} == before
    # tidal's own informational objects are written, the status marked as a dry run's.
    status = api.get("configmaps", "tidal-system", "tidal-status")
    assert status is not None
    assert status["data"] == {"k": "v", "dryRun": "true"}
    writes = [(r.method, r.path, r.query.get("dryRun")) for r in mutations(api)]
    assert writes == [
        ("POST", "/api/v1/namespaces/default/pods/web-0/eviction", "All"),
        ("PUT", "/api/v1/namespaces/tidal-system/configmaps/tidal-status", None),
        ("POST", "/api/v1/namespaces/tidal-system/configmaps", None),
        ("POST", "/api/v1/namespaces/default/events", None),
    ]
    assert [e["reason"] for e in api.list("events")] == ["WouldEvict"]


def test_unexpected_api_errors_raise_kube_api_error(api: FakeApiServer, actions: ClusterActions) -> None:
    api.create(node("cpu-a"))
    api.authorizer = lambda verb, group, resource, sub, ns: verb != "patch"

    with pytest.raises(KubeApiError) as caught:
        actions.label_node("cpu-a", {"x": "y"})
    assert caught.value.status == 403 and caught.value.operation == "set labels on node cpu-a"
    assert "cannot patch resource" in str(caught.value)


def test_workload_on_reads_the_node_s_pods_from_the_api_server_not_a_cache(
    api: FakeApiServer, actions: ClusterActions
) -> None:
    api.create(ready_pod("web-0", node_name="cpu-a"))
    api.create(ready_pod("web-1", node_name="cpu-b"))
    api.create(pod("logs-a", node_name="cpu-a", phase="Running", owner_kind="DaemonSet", message=None))
    mirror = pod("etcd-cpu-a", node_name="cpu-a", phase="Running", owner_kind="Node", message=None)
    mirror["metadata"]["annotations"] = {"kubernetes.io/config.mirror": "abc"}
    api.create(mirror)
    api.create(pod("job-done", node_name="cpu-a", phase="Succeeded", owner_kind="Job", message=None))
    newer = ready_pod("batch-0", node_name="cpu-a")
    newer["spec"]["tolerations"] = [{"key": "example.com/slots", "operator": "Lt", "value": "4"}]
    api.create(newer)

    assert actions.workload_on("cpu-a") == ["default/batch-0", "default/web-0"]
    [listed] = [r for r in api.requests if r.method == "GET" and r.path == "/api/v1/pods"]
    assert listed.query["fieldSelector"] == "spec.nodeName=cpu-a"


def test_workload_on_raises_when_the_api_server_cannot_answer(
    api: FakeApiServer, actions: ClusterActions
) -> None:
    api.faults.push(503, count=10, verbs=["list"], resource="pods")
    with pytest.raises(KubeApiError, match="list pods on node cpu-a"):
        actions.workload_on("cpu-a")
