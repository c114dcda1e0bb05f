"""What tidal relies on from an API server, held true of the real kube-apiserver and of the fake alike.

Every test runs twice: against the in-process fake (tests/fakes) and against the real control plane
(tests/k8s). A fake that drifts from Kubernetes fails here before it can mislead another test.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest
from kubernetes.client import ApiException

from tests.integration.kube_backends import Backend, fake_backend, real_backend

WATCH = {"timeout_seconds": 2, "_request_timeout": 10}


@pytest.fixture(params=["fake", "real"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    if request.param == "fake":
        with fake_backend() as b:
            yield b
    else:
        with real_backend(request.getfixturevalue("control_plane")) as b:
            yield b


@pytest.fixture
def core(backend: Backend) -> kubernetes.client.CoreV1Api:
    return kubernetes.client.CoreV1Api(backend.client)


def pod(name: str, namespace: str, labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}], **spec},
    }


def running(core: kubernetes.client.CoreV1Api, name: str, namespace: str, labels: dict[str, str]) -> None:
    """A pod bound to a node and reported Running and Ready, as its kubelet would (status after create)."""
    core.create_namespaced_pod(namespace, pod(name, namespace, labels, nodeName="node-a"))
    core.patch_namespaced_pod_status(
        name,
        namespace,
        {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}},
    )


def status_of(exc: ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(exc.body)
    return body


def test_create_get_and_list_pods_with_label_and_field_selectors(
    backend: Backend, core: kubernetes.client.CoreV1Api
) -> None:
    ns = backend.namespace
    web = pod("", ns, {"app": "web", "tier": "a"})
    web["metadata"] = {"generateName": "web-", "labels": {"app": "web", "tier": "a"}}
    created = core.create_namespaced_pod(ns, web)
    core.create_namespaced_pod(
        ns, pod("db", ns, {"app": "db", "tier": "b", "gpu": "true"}, nodeName="node-a")
    )

    assert created.metadata.name.startswith("web-") and len(created.metadata.name) == len("web-") + 5
    assert created.metadata.uid and created.metadata.creation_timestamp is not None
    assert created.status.phase == "Pending" and created.spec.scheduler_name == "default-scheduler"
    db = core.read_namespaced_pod("db", ns)
    assert int(db.metadata.resource_version) > int(created.metadata.resource_version)

    def names(**kwargs: Any) -> set[str]:
        return {p.metadata.name for p in core.list_namespaced_pod(ns, **kwargs).items}

    assert names(label_selector="app=web") == {created.metadata.name}
    assert names(label_selector="app==db,tier in (a, b)") == {"db"}
    assert names(label_selector="tier notin (a),!gpu") == set()
    assert names(label_selector="app!=web,gpu") == {"db"}
    assert names(field_selector="spec.nodeName=") == {created.metadata.name}
    assert names(field_selector="spec.nodeName!=,status.phase=Pending") == {"db"}
    assert names(field_selector=f"metadata.name={created.metadata.name}") == {created.metadata.name}
    everywhere = core.list_pod_for_all_namespaces(field_selector=f"metadata.namespace={ns}")
    assert {p.metadata.name for p in everywhere.items} == {created.metadata.name, "db"}


def test_errors_are_statuses_with_their_reason(backend: Backend, core: kubernetes.client.CoreV1Api) -> None:
    ns = backend.namespace
    core.create_namespaced_pod(ns, pod("db", ns))
    with pytest.raises(ApiException) as bad:
        core.list_namespaced_pod(ns, field_selector="spec.containers=x")
    assert bad.value.status == 400
    with pytest.raises(ApiException) as duplicate:
        core.create_namespaced_pod(ns, pod("db", ns))
    assert (duplicate.value.status, status_of(duplicate.value)["reason"]) == (409, "AlreadyExists")
    with pytest.raises(ApiException) as missing:
        core.read_namespaced_pod("nope", ns)
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


def test_list_pages_with_limit_and_continue(backend: Backend, core: kubernetes.client.CoreV1Api) -> None:
    ns = backend.namespace
    # Pods, not ConfigMaps: the real controller manager puts kube-root-ca.crt in every namespace.
    for i in range(7):
        core.create_namespaced_pod(ns, pod(f"p-{i}", ns))

    first = core.list_namespaced_pod(ns, limit=3)
    assert [c.metadata.name for c in first.items] == ["p-0", "p-1", "p-2"]
    assert first.metadata.remaining_item_count == 4
    second = core.list_namespaced_pod(ns, limit=3, _continue=first.metadata._continue)
    third = core.list_namespaced_pod(ns, limit=3, _continue=second.metadata._continue)

    assert [c.metadata.name for c in second.items + third.items] == [f"p-{i}" for i in range(3, 7)]
    assert third.metadata._continue is None
    assert first.metadata.resource_version == second.metadata.resource_version


def test_watch_from_a_resource_version_replays_later_changes(
    backend: Backend, core: kubernetes.client.CoreV1Api
) -> None:
    ns = backend.namespace
    # A scheduler nobody runs: the real one would write its own MODIFIED events in between.
    core.create_namespaced_pod(ns, pod("before", ns, schedulerName="nobody"))
    start = core.list_namespaced_pod(ns).metadata.resource_version
    core.create_namespaced_pod(ns, pod("p1", ns, schedulerName="nobody"))
    core.patch_namespaced_pod("p1", ns, {"metadata": {"labels": {"seen": "yes"}}})
    core.delete_namespaced_pod("p1", ns, grace_period_seconds=0)

    watch = kubernetes.watch.Watch()
    events = []
    for event in watch.stream(core.list_namespaced_pod, ns, resource_version=start, **WATCH):
        meta = event["object"].metadata
        events.append((event["type"], meta.name, meta.deletion_timestamp is not None))
        if event["type"] == "DELETED":
            watch.stop()

    # A pod's deletion is two events: deletionTimestamp stamped, then gone once nothing runs it.
    assert events == [
        ("ADDED", "p1", False),
        ("MODIFIED", "p1", False),
        ("MODIFIED", "p1", True),
        ("DELETED", "p1", True),
    ]


def test_a_watch_with_a_selector_sees_objects_leave_the_selection(
    backend: Backend, core: kubernetes.client.CoreV1Api
) -> None:
    ns = backend.namespace
    start = core.create_namespaced_pod(
        ns, pod("p1", ns, {"queue": "a"}, schedulerName="nobody")
    ).metadata.resource_version
    moved = core.patch_namespaced_pod("p1", ns, {"metadata": {"labels": {"queue": "b"}}})

    watch = kubernetes.watch.Watch()
    stream = watch.stream(
        core.list_namespaced_pod, ns, label_selector="queue=a", resource_version=start, **WATCH
    )
    event = next(stream)
    watch.stop()

    # The object as it last matched, at the resourceVersion of the change that took it out.
    assert (event["type"], event["object"].metadata.labels) == ("DELETED", {"queue": "a"})
    assert event["object"].metadata.resource_version == moved.metadata.resource_version


def test_a_watch_from_a_compacted_resource_version_gets_410_expired(
    backend: Backend, core: kubernetes.client.CoreV1Api
) -> None:
    ns = backend.namespace
    old = core.create_namespaced_pod(ns, pod("p1", ns)).metadata.resource_version
    core.create_namespaced_pod(ns, pod("p2", ns))
    backend.expire_history()

    with pytest.raises(ApiException) as gone:
        list(kubernetes.watch.Watch().stream(core.list_namespaced_pod, ns, resource_version=old, **WATCH))

    assert gone.value.status == 410
    assert "Expired" in str(gone.value.reason)


def test_a_watch_ends_at_its_timeout_and_bookmarks_carry_a_resource_version(
    backend: Backend, core: kubernetes.client.CoreV1Api
) -> None:
    ns = backend.namespace
    listed = core.create_namespaced_pod(ns, pod("p1", ns)).metadata.resource_version
    started = time.monotonic()

    events = list(
        kubernetes.watch.Watch().stream(
            core.list_namespaced_pod, ns, allow_watch_bookmarks=True, timeout_seconds=1, _request_timeout=10
        )
    )

    assert 0.9 <= time.monotonic() - started < 10  # the server ended the watch; it did not run on
    assert (events[0]["type"], events[0]["object"].metadata.name) == ("ADDED", "p1")
    for bookmark in (e for e in events if e["type"] == "BOOKMARK"):
        assert int(bookmark["object"]["metadata"]["resourceVersion"]) >= int(listed)


def test_an_update_with_a_stale_resource_version_conflicts(
    backend: Backend, core: kubernetes.client.CoreV1Api
) -> None:
    ns = backend.namespace
    core.create_namespaced_config_map(ns, {"metadata": {"name": "lock"}, "data": {"holder": "a"}})
    mine = core.read_namespaced_config_map("lock", ns)
    theirs = core.read_namespaced_config_map("lock", ns)
    theirs.data = {"holder": "b"}
    core.replace_namespaced_config_map("lock", ns, theirs)

    mine.data = {"holder": "c"}
    with pytest.raises(ApiException) as conflict:
        core.replace_namespaced_config_map("lock", ns, mine)

    assert (conflict.value.status, status_of(conflict.value)["reason"]) == (409, "Conflict")
    assert core.read_namespaced_config_map("lock", ns).data == {"holder": "b"}


def test_strategic_merge_and_json_patch_of_a_node(
    backend: Backend, core: kubernetes.client.CoreV1Api
) -> None:
    name = f"{backend.namespace}-n1"
    core.create_node(
        {
            "metadata": {"name": name, "labels": {"keep": "1", "drop": "1"}},
            "spec": {"taints": [{"key": "a", "effect": "NoSchedule"}]},
        }
    )
    try:
        core.patch_node_status(
            name,
            {
                "status": {
                    "conditions": [
                        {"type": "Ready", "status": "False"},
                        {"type": "DiskPressure", "status": "False"},
                    ]
                }
            },
        )
        node = core.patch_node(
            name,
            {
                "metadata": {"labels": {"drop": None, "new": "2"}},
                "spec": {"taints": [{"key": "b", "effect": "NoExecute"}]},
            },
        )
        assert node.metadata.labels == {"keep": "1", "new": "2"}
        assert [t.key for t in node.spec.taints] == ["b"]  # taints are an atomic list: replaced
        node = core.patch_node_status(name, {"status": {"conditions": [{"type": "Ready", "status": "True"}]}})
        assert {c.type: c.status for c in node.status.conditions} == {
            "Ready": "True",
            "DiskPressure": "False",
        }

        node = core.patch_node(
            name,
            [
                {"op": "add", "path": "/spec/unschedulable", "value": True},
                {"op": "remove", "path": "/metadata/labels/keep"},
            ],
        )
        assert node.spec.unschedulable is True and node.metadata.labels == {"new": "2"}
        with pytest.raises(ApiException) as failed:
            core.patch_node(name, [{"op": "test", "path": "/spec/unschedulable", "value": False}])
        assert failed.value.status == 422
    finally:
        core.delete_node(name)


def test_an_eviction_is_refused_with_429_while_the_budget_allows_none(
    backend: Backend, core: kubernetes.client.CoreV1Api
) -> None:
    ns = backend.namespace
    policy = kubernetes.client.PolicyV1Api(backend.client)
    for name in ("w1", "w2"):
        running(core, name, ns, {"app": "web"})
    policy.create_namespaced_pod_disruption_budget(
        ns,
        {
            "metadata": {"name": "web"},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}},
        },
    )
    backend.settle_budget("web", 0)
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "w1", "namespace": ns}}

    with pytest.raises(ApiException) as blocked:
        core.create_namespaced_pod_eviction("w1", ns, eviction)
    assert blocked.value.status == 429
    assert (
        status_of(blocked.value)["message"]
        == "Cannot evict pod as it would violate the pod's disruption budget."
    )

    policy.patch_namespaced_pod_disruption_budget("web", ns, {"spec": {"minAvailable": 1}})
    backend.settle_budget("web", 1)
    core.create_namespaced_pod_eviction("w1", ns, eviction)

    evicted = [p for p in core.list_namespaced_pod(ns).items if p.metadata.name == "w1"]
    assert evicted == [] or evicted[0].metadata.deletion_timestamp is not None
    # The budget is spent at once; which field records it (disruptedPods) is the controller's business.
    assert policy.read_namespaced_pod_disruption_budget("web", ns).status.disruptions_allowed == 0
    with pytest.raises(ApiException) as again:
        core.create_namespaced_pod_eviction(
            "w2", ns, eviction | {"metadata": {"name": "w2", "namespace": ns}}
        )
    assert again.value.status == 429


def test_finalizers_defer_a_deletion_until_the_last_one_is_removed(
    backend: Backend, core: kubernetes.client.CoreV1Api
) -> None:
    name = f"{backend.namespace}-n2"
    core.create_node({"metadata": {"name": name, "finalizers": ["tidal.dev/a", "tidal.dev/b"]}})

    core.delete_node(name)
    assert core.read_node(name).metadata.deletion_timestamp is not None
    core.patch_node(name, [{"op": "remove", "path": "/metadata/finalizers/0"}])
    assert core.read_node(name).metadata.finalizers == ["tidal.dev/b"]
    with pytest.raises(ApiException) as forbidden:
        core.patch_node(name, {"metadata": {"finalizers": ["tidal.dev/b", "tidal.dev/c"]}})
    assert forbidden.value.status == 422
    core.patch_node(name, [{"op": "replace", "path": "/metadata/finalizers", "value": []}])

    with pytest.raises(ApiException) as gone:
        core.read_node(name)
    assert gone.value.status == 404


def test_custom_resources_are_404_until_served_then_listed_with_selectors(backend: Backend) -> None:
    ns = backend.namespace
    group = "contract.tidal.dev"
    custom = kubernetes.client.CustomObjectsApi(backend.client)
    with pytest.raises(ApiException) as absent:
        custom.list_namespaced_custom_object(group, "v1", ns, "gangs")
    assert absent.value.status == 404

    backend.serve_custom(group, "v1", "gangs", "Gang", True)
    backend.serve_custom(group, "v1", "pools", "Pool", False)
    custom.create_cluster_custom_object(
        group,
        "v1",
        "pools",
        {"apiVersion": f"{group}/v1", "kind": "Pool", "metadata": {"name": f"{ns}-research"}, "spec": {}},
    )
    for name, pool in (("g-1", "research"), ("g-2", "prod")):
        custom.create_namespaced_custom_object(
            group,
            "v1",
            ns,
            "gangs",
            {
                "apiVersion": f"{group}/v1",
                "kind": "Gang",
                "metadata": {"name": name, "labels": {"pool": pool}},
                "spec": {"minMember": 4, "pool": pool},
            },
        )

    gangs = custom.list_namespaced_custom_object(group, "v1", ns, "gangs", label_selector="pool=research")
    assert [(g["metadata"]["name"], g["spec"]["minMember"]) for g in gangs["items"]] == [("g-1", 4)]
    pools = custom.list_cluster_custom_object(group, "v1", "pools")
    assert f"{ns}-research" in [p["metadata"]["name"] for p in pools["items"]]
    assert "gangs" in [r.name for r in custom.get_api_resources(group, "v1").resources]
    assert group in [g.name for g in kubernetes.client.ApisApi(backend.client).get_api_versions().groups]


def test_a_binding_assigns_a_node_once(backend: Backend, core: kubernetes.client.CoreV1Api) -> None:
    ns = backend.namespace
    core.create_namespaced_pod(ns, pod("p1", ns, schedulerName="nobody"))
    binding = {"metadata": {"name": "p1"}, "target": {"kind": "Node", "name": "node-a"}}

    # The server answers with a Status that V1Binding cannot deserialise (an upstream client quirk).
    response = core.create_namespaced_pod_binding("p1", ns, binding, _preload_content=False)
    assert (response.status, json.loads(response.data)["status"]) == (201, "Success")
    response.release_conn()
    with pytest.raises(ApiException) as twice:
        core.create_namespaced_pod_binding("p1", ns, binding, _preload_content=False)

    assert twice.value.status == 409
    assert core.read_namespaced_pod("p1", ns).spec.node_name == "node-a"
