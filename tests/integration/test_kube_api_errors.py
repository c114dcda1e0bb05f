"""Every failed Kubernetes API request is reported by verb, resource and status, from every part of the edge:
actions, events, informers' lists and watches, leader election. The daemon counts them in
tidal_kube_api_errors_total."""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, cast

import kubernetes.client
import pytest

from autoscaler.runtime.kube.actions import ClusterActions, EvictionResult
from autoscaler.runtime.kube.client import KubeApiError, KubeClient, describe_call, make_api_client
from autoscaler.runtime.kube.convert import pod_from_dict
from autoscaler.runtime.kube.informer import Informer
from autoscaler.runtime.kube.leader import LeaderElector
from autoscaler.runtime.observability.metrics import Metrics
from tests.builders import node, pod
from tests.fakes.kube_apiserver import FakeApiServer

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from autoscaler.core.model import Pod

    class _RecordingClient(KubeClient):
        """A client the fixture gives a list of the failures it reports."""

        errors: list[tuple[str, str, str]]


CORE = kubernetes.client.CoreV1Api
CUSTOM = kubernetes.client.CustomObjectsApi


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        ((CORE.patch_node, ()), ("patch", "nodes")),
        ((CORE.read_node, ()), ("get", "nodes")),
        ((CORE.delete_node, ()), ("delete", "nodes")),
        ((CORE.list_pod_for_all_namespaces, ()), ("list", "pods")),
        ((CORE.create_namespaced_pod_eviction, ()), ("create", "pods/eviction")),
        ((CORE.create_namespaced_event, ()), ("create", "events")),
        ((CORE.replace_namespaced_config_map, ()), ("update", "configmaps")),
        ((CORE.patch_node_status, ()), ("patch", "nodes/status")),
        ((kubernetes.client.CoordinationV1Api.read_namespaced_lease, ()), ("get", "leases")),
        (
            (kubernetes.client.PolicyV1Api.list_pod_disruption_budget_for_all_namespaces, ()),
            ("list", "poddisruptionbudgets"),
        ),
        ((kubernetes.client.AppsV1Api.list_daemon_set_for_all_namespaces, ()), ("list", "daemonsets")),
        ((CUSTOM.get_api_resources, ("scheduling.run.ai", "v2")), ("get", "discovery")),
        (
            (
                functools.partial(
                    CUSTOM.list_cluster_custom_object, None, "scheduling.run.ai", "v2", "queues"
                ),
                (),
            ),
            ("list", "queues"),
        ),
        (
            (
                functools.partial(
                    CUSTOM.list_namespaced_custom_object, None, "g", "v1", "team-a", "podgroups"
                ),
                (),
            ),
            ("list", "podgroups"),
        ),
    ],
)
def test_a_generated_api_method_is_described_by_its_verb_and_resource(
    call: tuple[Callable[..., Any], tuple[Any, ...]], expected: tuple[str, ...]
) -> None:
    fn, args = call
    if isinstance(fn, functools.partial):  # bound methods take self first; drop the placeholder
        fn = functools.partial(fn.func, *fn.args[1:])
    assert describe_call(fn, args) == expected


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with FakeApiServer(bookmark_interval=0.2) as server:
        yield server


@pytest.fixture
def client(api: FakeApiServer) -> Iterator[_RecordingClient]:
    kube = cast("_RecordingClient", make_api_client(host=api.url, qps=0))
    kube.errors = []
    kube.on_error = lambda verb, resource, code: kube.errors.append((verb, resource, code))
    yield kube
    kube.close()


def test_a_failed_action_is_reported_with_its_status(api: FakeApiServer, client: _RecordingClient) -> None:
    api.create(node("gpu-a"))
    api.faults.push(500, verbs={"patch"}, resource="nodes")
    with pytest.raises(KubeApiError):
        ClusterActions(client).label_node("gpu-a", {"team": "ml"})
    assert client.errors == [("patch", "nodes", "500")]


def test_expected_refusals_count_too_told_apart_by_their_code(
    api: FakeApiServer, client: _RecordingClient
) -> None:
    actions = ClusterActions(client)
    api.faults.push(
        429,
        verbs={"create"},
        resource="pods/eviction",
        message="Cannot evict pod as it would violate the pod's disruption budget.",
    )
    assert actions.evict("default", "web-0") is EvictionResult.BLOCKED
    assert actions.delete_node("gone") is False  # 404: already deleted
    assert client.errors == [("create", "pods/eviction", "429"), ("delete", "nodes", "404")]


def test_a_lost_event_is_reported(api: FakeApiServer, client: _RecordingClient) -> None:
    api.faults.push(503, verbs={"create"}, resource="events")
    ClusterActions(client).node_event("gpu-a", reason="ScaleDown", message="m")
    assert client.errors == [("create", "events", "503")]


def test_an_informer_reports_failed_lists_and_watches_and_recovers(
    api: FakeApiServer, client: _RecordingClient
) -> None:
    api.create(pod("web-0"))
    list_fault = api.faults.push(500, verbs={"list"}, resource="pods")
    watch_fault = api.faults.push(500, count=2, verbs={"watch"}, resource="pods")
    informer: Informer[Pod] = Informer(
        "pods",
        client,
        client.core.list_pod_for_all_namespaces,
        pod_from_dict,
        watch_timeout=5,
        backoff_base=0.05,
    )
    informer.start()
    try:
        assert informer.wait_for_sync(5)
        api.create(pod("web-1"))
        deadline = time.monotonic() + 5
        while informer.get("default", "web-1") is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert informer.get("default", "web-1") is not None  # seen through the watch that finally opened
    finally:
        informer.stop()
    assert (list_fault.hits, watch_fault.hits) == (1, 2)
    assert client.errors == [("list", "pods", "500"), ("watch", "pods", "500"), ("watch", "pods", "500")]


def test_a_dropped_watch_that_fell_behind_a_compaction_relists_and_reports_the_410(
    api: FakeApiServer, client: _RecordingClient
) -> None:
    api.create(pod("db-0"))
    informer: Informer[Pod] = Informer(
        "pods",
        client,
        client.core.list_pod_for_all_namespaces,
        pod_from_dict,
        watch_timeout=5,
        backoff_base=0.2,
    )
    informer.start()
    try:
        assert informer.wait_for_sync(5)
        fault = api.faults.push(500, verbs={"watch"}, resource="pods")  # the first reconnect fails, backs off
        api.drop_watches()
        deadline = time.monotonic() + 5
        while not fault.hits and time.monotonic() < deadline:  # disconnected: the old stream saw nothing
            time.sleep(0.01)
        api.create(pod("web-0"))
        api.compact()  # meanwhile the history it would resume from is gone
        deadline = time.monotonic() + 5
        while informer.get("default", "web-0") is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert informer.get("default", "web-0") is not None
        assert informer.stats()["relists"] == 1
    finally:
        informer.stop()
    assert client.errors == [("watch", "pods", "500"), ("watch", "pods", "410")]


def test_leader_election_reports_failed_lease_requests(api: FakeApiServer, client: _RecordingClient) -> None:
    elector = LeaderElector(
        client,
        namespace="tidal-system",
        name="tidal",
        identity="a",
        lease_duration=15,
        renew_deadline=10,
        retry_period=2,
    )
    api.faults.push(500, verbs={"get"}, resource="leases")
    assert not elector.try_acquire_or_renew()
    assert elector.try_acquire_or_renew()
    assert client.errors == [("get", "leases", "500"), ("get", "leases", "404")]  # then created


def test_no_answer_at_all_is_a_connection_error() -> None:
    kube = make_api_client(host="http://127.0.0.1:9", qps=0)
    seen = []
    kube.on_error = lambda *labels: seen.append(labels)
    kube.request_timeout = (0.5, 0.5)
    kube.api_client.configuration.retries = False
    with pytest.raises(Exception):  # noqa: B017 - whatever urllib3 raises, it is counted first
        kube.call(kube.core.read_node, "gpu-a")
    kube.close()
    assert seen == [("get", "nodes", "connection")]


def test_the_daemon_metric_has_verb_resource_and_code() -> None:
    metrics = Metrics()
    metrics.kube_error("create", "pods/eviction", 429)
    text = metrics.render().decode()
    assert 'tidal_kube_api_errors_total{code="429",resource="pods/eviction",verb="create"} 1.0' in text
