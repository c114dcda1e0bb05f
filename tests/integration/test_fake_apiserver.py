"""What only the fake API server does: faults on cue, a refusing authorizer, bookmarks as often as asked.

Everything the fake shares with the real kube-apiserver is held to it by test_kube_contract.py, which runs
against both; these are the fake's own abilities, the reason it is kept beside the real control plane."""

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
