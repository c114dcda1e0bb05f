"""The fake API server, driven through the unmodified `kubernetes` client: one behaviour per test."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest
from kubernetes.client import ApiClient, ApiException, Configuration

from tests.fakes.kube_apiserver import FakeApiServer

WATCH = {"timeout_seconds": 2, "_request_timeout": 10}
NS = "default"


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with FakeApiServer(bookmark_interval=0.1) as server:
        yield server
        assert server.server_errors == []


def close(api_client: ApiClient) -> None:
    # ApiClient.close() only stops its thread pool; the urllib3 connections stay open until GC.
    api_client.close()
    api_client.rest_client.pool_manager.clear()


@pytest.fixture
def client(api: FakeApiServer) -> Iterator[ApiClient]:
    api_client = api.api_client()
    yield api_client
    close(api_client)


@pytest.fixture
def core(client: ApiClient) -> kubernetes.client.CoreV1Api:
    return kubernetes.client.CoreV1Api(client)


def pod(name: str, labels: dict[str, str] | None = None, namespace: str = NS, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}], **spec},
    }


def running_pod(name: str, labels: dict[str, str]) -> dict[str, Any]:
    body = pod(name, labels, nodeName="node-a")
    body["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    return body


def status_of(exc: ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(exc.body)
    return body


def test_create_get_and_list_pods_with_selectors(
    api: FakeApiServer, core: kubernetes.client.CoreV1Api
) -> None:
    web = pod("", {"app": "web", "tier": "a"})
    web["metadata"] = {"generateName": "web-", "labels": {"app": "web", "tier": "a"}}
    created = core.create_namespaced_pod(NS, web)
    core.create_namespaced_pod(NS, pod("db", {"app": "db", "tier": "b", "gpu": "true"}, nodeName="node-a"))
    core.create_namespaced_pod("other", pod("batch", {"app": "batch"}, namespace="other"))

    assert created.metadata.name.startswith("web-") and len(created.metadata.name) == len("web-") + 5
    assert created.metadata.uid and created.metadata.creation_timestamp is not None
    assert created.status.phase == "Pending" and created.spec.scheduler_name == "default-scheduler"
    db = core.read_namespaced_pod("db", NS)
    assert int(db.metadata.resource_version) > int(created.metadata.resource_version)

    def names(**kwargs: Any) -> set[str]:
        return {p.metadata.name for p in core.list_namespaced_pod(NS, **kwargs).items}

    assert names(label_selector="app=web") == {created.metadata.name}
    assert names(label_selector="app==db,tier in (a, b)") == {"db"}
    assert names(label_selector="tier notin (a),!gpu") == set()
    assert names(label_selector="app!=web,gpu") == {"db"}
    assert names(field_selector="spec.nodeName=") == {created.metadata.name}
    assert names(field_selector="spec.nodeName!=,status.phase=Pending") == {"db"}
    assert names(field_selector=f"metadata.name={created.metadata.name}") == {created.metadata.name}
    everywhere = core.list_pod_for_all_namespaces(field_selector="metadata.namespace=other")
    assert [p.metadata.name for p in everywhere.items] == ["batch"]

    with pytest.raises(ApiException) as bad:
        core.list_namespaced_pod(NS, field_selector="spec.containers=x")
    assert bad.value.status == 400
    with pytest.raises(ApiException) as duplicate:
        core.create_namespaced_pod(NS, pod("db"))
    assert (duplicate.value.status, status_of(duplicate.value)["reason"]) == (409, "AlreadyExists")
    with pytest.raises(ApiException) as missing:
        core.read_namespaced_pod("nope", NS)
    assert status_of(missing.value) | {"details": None} == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'pods "nope" not found',
        "reason": "NotFound",
        "code": 404,
        "details": None,
    }


def test_list_pages_with_limit_and_continue(api: FakeApiServer, core: kubernetes.client.CoreV1Api) -> None:
    for i in range(7):
        api.create(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"cm-{i}", "namespace": NS}}
        )

    first = core.list_namespaced_config_map(NS, limit=3)
    assert [c.metadata.name for c in first.items] == ["cm-0", "cm-1", "cm-2"]
    assert first.metadata.remaining_item_count == 4
    second = core.list_namespaced_config_map(NS, limit=3, _continue=first.metadata._continue)
    third = core.list_namespaced_config_map(NS, limit=3, _continue=second.metadata._continue)

    assert [c.metadata.name for c in second.items + third.items] == [f"cm-{i}" for i in range(3, 7)]
    assert third.metadata._continue is None
    assert first.metadata.resource_version == second.metadata.resource_version == api.resource_version


def test_watch_from_resource_version_replays_later_changes(
    api: FakeApiServer, core: kubernetes.client.CoreV1Api
) -> None:
    api.create(pod("before"))
    start = core.list_namespaced_pod(NS).metadata.resource_version
    core.create_namespaced_pod(NS, pod("p1"))
    core.patch_namespaced_pod("p1", NS, {"metadata": {"labels": {"seen": "yes"}}})
    core.delete_namespaced_pod("p1", NS)

    watch = kubernetes.watch.Watch()
    events = []
    for event in watch.stream(core.list_namespaced_pod, NS, resource_version=start, **WATCH):
        events.append((event["type"], event["object"].metadata.name))
        if len(events) == 3:
            watch.stop()

    assert events == [("ADDED", "p1"), ("MODIFIED", "p1"), ("DELETED", "p1")]


def test_watch_with_selector_sees_objects_leave_the_selection(
    api: FakeApiServer, core: kubernetes.client.CoreV1Api
) -> None:
    api.create(pod("p1", {"queue": "a"}))
    start = api.resource_version
    api.patch("pods", NS, "p1", {"metadata": {"labels": {"queue": "b"}}})

    watch = kubernetes.watch.Watch()
    stream = watch.stream(
        core.list_namespaced_pod, NS, label_selector="queue=a", resource_version=start, **WATCH
    )
    event = next(stream)
    watch.stop()

    assert (event["type"], event["object"].metadata.labels) == ("DELETED", {"queue": "b"})


def test_watch_from_compacted_resource_version_gets_410(
    api: FakeApiServer, core: kubernetes.client.CoreV1Api
) -> None:
    old = api.create(pod("p1"))["metadata"]["resourceVersion"]
    api.create(pod("p2"))
    api.compact()

    with pytest.raises(ApiException) as gone:
        list(kubernetes.watch.Watch().stream(core.list_namespaced_pod, NS, resource_version=old, **WATCH))

    assert gone.value.status == 410
    assert "Expired" in str(gone.value.reason)


def test_watch_sends_bookmarks_and_honours_timeout(
    api: FakeApiServer, core: kubernetes.client.CoreV1Api
) -> None:
    api.create(pod("p1"))
    started = time.monotonic()

    events = list(
        kubernetes.watch.Watch().stream(
            core.list_namespaced_pod, NS, allow_watch_bookmarks=True, timeout_seconds=1, _request_timeout=10
        )
    )

    assert 0.9 <= time.monotonic() - started < 10  # the server ended the watch; it did not run on
    assert events[0]["type"] == "ADDED"
    bookmarks = [e for e in events if e["type"] == "BOOKMARK"]
    assert len(bookmarks) >= 3
    assert bookmarks[-1]["object"]["metadata"]["resourceVersion"] == api.resource_version


def test_update_with_stale_resource_version_conflicts(core: kubernetes.client.CoreV1Api) -> None:
    core.create_namespaced_config_map(NS, {"metadata": {"name": "lock"}, "data": {"holder": "a"}})
    mine = core.read_namespaced_config_map("lock", NS)
    theirs = core.read_namespaced_config_map("lock", NS)
    theirs.data = {"holder": "b"}
    core.replace_namespaced_config_map("lock", NS, theirs)

    mine.data = {"holder": "c"}
    with pytest.raises(ApiException) as conflict:
        core.replace_namespaced_config_map("lock", NS, mine)

    assert (conflict.value.status, status_of(conflict.value)["reason"]) == (409, "Conflict")
    assert core.read_namespaced_config_map("lock", NS).data == {"holder": "b"}


def test_strategic_merge_and_json_patch_of_a_node(
    api: FakeApiServer, core: kubernetes.client.CoreV1Api
) -> None:
    api.create(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "n1", "labels": {"keep": "1", "drop": "1"}},
            "spec": {"taints": [{"key": "a", "effect": "NoSchedule"}]},
            "status": {
                "conditions": [
                    {"type": "Ready", "status": "False"},
                    {"type": "DiskPressure", "status": "False"},
                ]
            },
        }
    )

    node = core.patch_node(
        "n1",
        {
            "metadata": {"labels": {"drop": None, "new": "2"}},
            "spec": {"taints": [{"key": "b", "effect": "NoExecute"}]},
        },
    )
    assert node.metadata.labels == {"keep": "1", "new": "2"}
    assert [t.key for t in node.spec.taints] == ["b"]  # taints are an atomic list: replaced
    node = core.patch_node_status("n1", {"status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    assert {c.type: c.status for c in node.status.conditions} == {"Ready": "True", "DiskPressure": "False"}

    node = core.patch_node(
        "n1",
        [
            {"op": "add", "path": "/spec/unschedulable", "value": True},
            {"op": "remove", "path": "/metadata/labels/keep"},
        ],
    )
    assert node.spec.unschedulable is True and node.metadata.labels == {"new": "2"}
    with pytest.raises(ApiException) as failed:
        core.patch_node("n1", [{"op": "test", "path": "/spec/unschedulable", "value": False}])
    assert failed.value.status == 422


def test_eviction_is_blocked_by_a_pdb_until_the_budget_allows_it(
    api: FakeApiServer, client: ApiClient, core: kubernetes.client.CoreV1Api
) -> None:
    policy = kubernetes.client.PolicyV1Api(client)
    for name in ("w1", "w2"):
        api.create(running_pod(name, {"app": "web"}))
    policy.create_namespaced_pod_disruption_budget(
        NS,
        {
            "metadata": {"name": "web"},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}},
        },
    )
    api.sync_pdb_status()
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "w1", "namespace": NS}}

    with pytest.raises(ApiException) as blocked:
        core.create_namespaced_pod_eviction("w1", NS, eviction)
    assert blocked.value.status == 429
    assert (
        status_of(blocked.value)["message"]
        == "Cannot evict pod as it would violate the pod's disruption budget."
    )

    policy.patch_namespaced_pod_disruption_budget("web", NS, {"spec": {"minAvailable": 1}})
    api.sync_pdb_status()
    core.create_namespaced_pod_eviction("w1", NS, eviction)

    assert api.get("pods", NS, "w1") is None
    budget = policy.read_namespaced_pod_disruption_budget("web", NS)
    assert budget.status.disruptions_allowed == 0 and "w1" in budget.status.disrupted_pods
    with pytest.raises(ApiException) as again:
        core.create_namespaced_pod_eviction("w2", NS, eviction | {"metadata": {"name": "w2"}})
    assert again.value.status == 429


def test_finalizers_defer_deletion_until_the_last_one_is_removed(
    api: FakeApiServer, core: kubernetes.client.CoreV1Api
) -> None:
    api.create(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "n1", "finalizers": ["tidal.dev/a", "tidal.dev/b"]},
        }
    )

    core.delete_node("n1")
    node = core.read_node("n1")
    assert node.metadata.deletion_timestamp is not None
    core.patch_node("n1", [{"op": "remove", "path": "/metadata/finalizers/0"}])
    assert core.read_node("n1").metadata.finalizers == ["tidal.dev/b"]
    with pytest.raises(ApiException) as forbidden:
        core.patch_node("n1", {"metadata": {"finalizers": ["tidal.dev/c"]}})
    assert forbidden.value.status == 422
    core.patch_node("n1", [{"op": "replace", "path": "/metadata/finalizers", "value": []}])

    assert api.get("nodes", None, "n1") is None


def test_fault_queue_fails_matching_requests(api: FakeApiServer, core: kubernetes.client.CoreV1Api) -> None:
    throttle = api.faults.push(429, count=2, verbs={"GET"}, resource="pods")
    api.faults.push(500, verbs={"create"}, resource="configmaps", retry_after=7)

    for _ in range(2):
        with pytest.raises(ApiException) as throttled:
            core.list_namespaced_pod(NS)
        assert throttled.value.status == 429
    core.list_namespaced_pod(NS)
    core.list_namespaced_config_map(NS)  # a GET of another resource is not affected
    with pytest.raises(ApiException) as broken:
        core.create_namespaced_config_map(NS, {"metadata": {"name": "c"}})

    assert status_of(broken.value)["reason"] == "InternalError" and broken.value.headers["Retry-After"] == "7"
    assert throttle.hits == 2 and len(api.faults) == 0
    assert [(r.method, r.path) for r in api.requests][-2:] == [
        ("GET", "/api/v1/namespaces/default/configmaps"),
        ("POST", "/api/v1/namespaces/default/configmaps"),
    ]


def test_client_silently_retries_idempotent_requests_on_429_with_retry_after(
    api: FakeApiServer, core: kubernetes.client.CoreV1Api
) -> None:
    # urllib3's default Retry honours Retry-After on 413/429/503 for GET/PUT/DELETE (not POST/PATCH):
    # throttling of those verbs never reaches the caller unless retries are configured off.
    throttle = api.faults.push(429, verbs={"GET"}, resource="nodes", retry_after=1)

    core.list_node()

    assert throttle.hits == 1


def test_kai_custom_resources_are_404_until_registered(api: FakeApiServer, client: ApiClient) -> None:
    custom = kubernetes.client.CustomObjectsApi(client)
    with pytest.raises(ApiException) as absent:
        custom.list_namespaced_custom_object("scheduling.run.ai", "v2alpha2", NS, "podgroups")
    assert absent.value.status == 404

    api.register_crd("scheduling.run.ai", "v2alpha2", "podgroups", "PodGroup", namespaced=True)
    api.register_crd("scheduling.run.ai", "v2", "queues", "Queue", namespaced=False)
    custom.create_cluster_custom_object(
        "scheduling.run.ai",
        "v2",
        "queues",
        {
            "apiVersion": "scheduling.run.ai/v2",
            "kind": "Queue",
            "metadata": {"name": "research"},
            "spec": {"resources": {}},
        },
    )
    for name, queue in (("pg-1", "research"), ("pg-2", "prod")):
        custom.create_namespaced_custom_object(
            "scheduling.run.ai",
            "v2alpha2",
            NS,
            "podgroups",
            {
                "apiVersion": "scheduling.run.ai/v2alpha2",
                "kind": "PodGroup",
                "metadata": {"name": name, "labels": {"kai.scheduler/queue": queue}},
                "spec": {"minMember": 4, "queue": queue},
            },
        )

    groups = custom.list_namespaced_custom_object(
        "scheduling.run.ai", "v2alpha2", NS, "podgroups", label_selector="kai.scheduler/queue=research"
    )
    assert [(g["metadata"]["name"], g["spec"]["minMember"]) for g in groups["items"]] == [("pg-1", 4)]
    queues = custom.list_cluster_custom_object("scheduling.run.ai", "v2", "queues")
    assert [q["metadata"]["name"] for q in queues["items"]] == ["research"]
    resources = custom.get_api_resources("scheduling.run.ai", "v2alpha2")
    assert "podgroups" in [r.name for r in resources.resources]
    groups_served = kubernetes.client.ApisApi(client).get_api_versions()
    assert "scheduling.run.ai" in [g.name for g in groups_served.groups]


def test_authorizer_denial_is_a_forbidden_status(
    api: FakeApiServer, core: kubernetes.client.CoreV1Api
) -> None:
    api.authorizer = lambda verb, group, resource, sub, ns: not (resource == "pods" and sub == "eviction")
    api.create(running_pod("p1", {}))

    with pytest.raises(ApiException) as denied:
        core.create_namespaced_pod_eviction("p1", NS, {"metadata": {"name": "p1"}})

    assert denied.value.status == 403
    assert (
        'cannot create resource "pods/eviction" in API group "" in the namespace "default"'
        in (status_of(denied.value)["message"])
    )


def test_binding_assigns_a_node_once(api: FakeApiServer, core: kubernetes.client.CoreV1Api) -> None:
    api.create(pod("p1"))
    binding = {"metadata": {"name": "p1"}, "target": {"kind": "Node", "name": "node-a"}}

    # The server answers with a Status that V1Binding cannot deserialise (an upstream client quirk).
    response = core.create_namespaced_pod_binding("p1", NS, binding, _preload_content=False)
    assert (response.status, json.loads(response.data)["status"]) == (201, "Success")
    response.release_conn()
    with pytest.raises(ApiException) as twice:
        core.create_namespaced_pod_binding("p1", NS, binding, _preload_content=False)

    assert twice.value.status == 409
    assert core.read_namespaced_pod("p1", NS).spec.node_name == "node-a"


def test_leader_election_over_the_fake(api: FakeApiServer) -> None:
    from kubernetes.leaderelection import electionconfig, leaderelection

    try:  # LeaseLock is not in every release (the 37.0.2 wheel lacks it); ConfigMapLock speaks the same protocol.
        from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock as Lock

        resource = "leases"
    except ImportError:
        from kubernetes.leaderelection.resourcelock.configmaplock import ConfigMapLock as Lock

        resource = "configmaps"
    leading, stopped = threading.Event(), threading.Event()
    Configuration.set_default(api.client_configuration())  # the lock builds its client from the default
    lock = Lock("tidal-leader", NS, "tidal-a")
    try:
        config = electionconfig.Config(
            lock,
            lease_duration=3,
            renew_deadline=2,
            retry_period=1,
            onstarted_leading=leading.set,
            onstopped_leading=stopped.set,
        )
        elector = threading.Thread(target=leaderelection.LeaderElection(config).run, daemon=True)
        elector.start()
        assert leading.wait(5)
        deadline = time.monotonic() + 3
        while not any(r.method == "PUT" for r in api.requests) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert any(r.method == "PUT" for r in api.requests), "the leader never renewed"
        stored = api.get(resource, NS, "tidal-leader")
        assert stored is not None and "tidal-a" in json.dumps(stored)

        api.faults.push(500, count=1000, resource=resource)  # the API goes away: the leader must step down
        assert stopped.wait(6)
        elector.join(2)
    finally:
        api.faults.clear()
        Configuration.set_default(None)
        close(lock.api_instance.api_client)
