"""Informer: list-then-watch through the unmodified kubernetes client against the fake API server."""

from __future__ import annotations

import gc
import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest
from kubernetes.client.exceptions import ApiException

from autoscaler.core.model import Node, Pod
from autoscaler.runtime.kube.client import KubeClient, make_api_client
from autoscaler.runtime.kube.convert import node_from_dict, pod_from_dict
from autoscaler.runtime.kube.informer import Informer, collector_paused
from tests.builders import INSUFFICIENT_GPU, node, pod
from tests.fakes.kube_apiserver import FakeApiServer, RecordedRequest

if TYPE_CHECKING:
    from collections.abc import Mapping

PODS = "/api/v1/pods"


def eventually(check: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.02)


def running(name: str, node_name: str = "node-a", **kwargs: Any) -> dict[str, Any]:
    obj = pod(name, node_name=node_name, phase="Running", **kwargs)
    obj["status"]["conditions"] = [
        {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-20T10:00:00Z"}
    ]
    return obj


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with FakeApiServer(bookmark_interval=0.2) as server:
        yield server


@pytest.fixture
def client(api: FakeApiServer) -> Iterator[KubeClient]:
    kube = make_api_client(host=api.url, qps=0)
    yield kube
    kube.close()


@pytest.fixture
def make_pod_informer(client: KubeClient) -> Iterator[Callable[..., Informer[Pod]]]:
    started: list[Informer[Pod]] = []

    def build(**options: Any) -> Informer[Pod]:
        options.setdefault("watch_timeout", 5)
        informer: Informer[Pod] = Informer(
            "pods", client, client.core.list_pod_for_all_namespaces, pod_from_dict, **options
        )
        started.append(informer)
        return informer

    yield build
    for informer in started:
        informer.stop()


def watch_requests(api: FakeApiServer, path: str = PODS) -> list[RecordedRequest]:
    return [r for r in list(api.requests) if r.path == path and r.query.get("watch", "").lower() == "true"]


def cached_names(informer: Informer[Pod]) -> list[str]:
    return [p.name for p in informer.items()]


def server_names(api: FakeApiServer) -> list[str]:
    return sorted(o["metadata"]["name"] for o in api.list("pods"))


def test_initial_list_builds_the_cache_from_raw_json(
    api: FakeApiServer, make_pod_informer: Callable[..., Informer[Pod]]
) -> None:
    api.create(pod("train-0", namespace="ml", cpu="8", memory="64Gi", gpu=2, message=INSUFFICIENT_GPU))
    api.create(running("web-0", cpu="500m", memory="1Gi"))
    informer = make_pod_informer()
    informer.start()

    assert informer.wait_for_sync(5)
    by_name = {p.name: p for p in informer.items()}
    assert sorted(by_name) == ["train-0", "web-0"]
    train = by_name["train-0"]
    assert train.namespace == "ml" and train.pending and train.requests.gpus == 2
    assert train.scheduled is not None and train.scheduled.reason == "Unschedulable"
    assert by_name["web-0"].node_name == "node-a" and not by_name["web-0"].pending
    assert informer.resource_version == api.resource_version
    # Items come back sorted by (namespace, name), not by "ns/name" string.
    assert [(p.namespace, p.name) for p in informer.items()] == [("default", "web-0"), ("ml", "train-0")]


def test_create_update_and_delete_arrive_through_the_watch(
    api: FakeApiServer, make_pod_informer: Callable[..., Informer[Pod]]
) -> None:
    api.create(pod("web-0"))
    informer = make_pod_informer()
    events: list[tuple[str, str | None, str | None]] = []

    def record(etype: str, old: Pod | None, new: Pod | None) -> None:
        events.append((etype, old.node_name if old else None, new.node_name if new else None))

    informer.add_listener(record)
    informer.start()
    assert informer.wait_for_sync(5)

    api.create(pod("web-1"))
    api.patch("pods", "default", "web-0", {"spec": {"nodeName": "node-b"}})
    api.delete("pods", "default", "web-1", grace_period_seconds=0)

    eventually(lambda: len(events) == 5)
    assert events == [
        ("ADDED", None, ""),
        ("ADDED", None, ""),
        ("MODIFIED", "", "node-b"),
        ("MODIFIED", "", ""),  # web-1's deletionTimestamp, stamped before it goes
        ("DELETED", "", None),
    ]
    assert cached_names(informer) == ["web-0"]
    web0 = informer.get("default", "web-0")
    assert web0 is not None and web0.node_name == "node-b"
    assert informer.stats()["lists"] == 1  # no relist was needed


def test_items_stay_sorted_through_watch_events_and_are_one_tuple_while_nothing_changes(
    api: FakeApiServer, make_pod_informer: Callable[..., Informer[Pod]]
) -> None:
    for name in ("web-2", "web-0"):
        api.create(pod(name))
    api.create(pod("train-0", namespace="ml"))
    informer = make_pod_informer()
    informer.start()
    assert informer.wait_for_sync(5)
    first = informer.sorted_items()
    assert informer.sorted_items() is first  # nothing changed: no copy, no sort
    assert [(p.namespace, p.name) for p in first] == [
        ("default", "web-0"),
        ("default", "web-2"),
        ("ml", "train-0"),
    ]

    api.create(pod("web-1"))
    api.create(pod("a-0", namespace="zz"))
    api.delete("pods", "default", "web-2", grace_period_seconds=0)
    api.patch("pods", "ml", "train-0", {"spec": {"nodeName": "node-b"}})

    def moved() -> bool:
        train = informer.get("ml", "train-0")
        names = [p.name for p in informer.items()]
        return (
            names == ["web-0", "web-1", "train-0", "a-0"]
            and train is not None
            and train.node_name == "node-b"
        )

    eventually(moved)
    after = informer.sorted_items()
    assert after is not first
    assert [(p.namespace, p.name) for p in after] == [
        ("default", "web-0"),
        ("default", "web-1"),
        ("ml", "train-0"),
        ("zz", "a-0"),
    ]
    assert after[2].node_name == "node-b"  # a modified object is seen in its new shape
    assert informer.items() == list(after)


def test_bookmarks_advance_the_resource_version(api: FakeApiServer, client: KubeClient) -> None:
    api.create(node("node-a"))
    informer: Informer[Node] = Informer(
        "nodes", client, client.core.list_node, node_from_dict, watch_timeout=5
    )
    informer.start()
    try:
        assert informer.wait_for_sync(5)
        listed_at = informer.resource_version
        for i in range(3):  # changes to other kinds move the global resourceVersion
            api.create(pod(f"other-{i}"))
        eventually(lambda: informer.resource_version == api.resource_version)
        assert int(informer.resource_version) > int(listed_at)
        assert informer.stats()["events"] == 0
        assert all(
            r.query.get("allowWatchBookmarks", "").lower() == "true"
            for r in watch_requests(api, "/api/v1/nodes")
        )
    finally:
        informer.stop()


def test_watches_always_send_timeout_seconds(
    api: FakeApiServer, make_pod_informer: Callable[..., Informer[Pod]]
) -> None:
    informer = make_pod_informer(watch_timeout=1)
    informer.start()
    assert informer.wait_for_sync(5)
    eventually(lambda: len(watch_requests(api)) >= 2, timeout=4)  # the first watch ended and was reopened

    assert {r.query.get("timeoutSeconds") for r in watch_requests(api)} == {"1"}
    assert informer.stats()["watch_errors"] == 0


def test_relists_after_history_was_compacted(
    api: FakeApiServer, make_pod_informer: Callable[..., Informer[Pod]]
) -> None:
    for name in ("a", "b", "c"):
        api.create(pod(name))
    informer = make_pod_informer(watch_timeout=1, backoff_base=0.05)
    informer.start()
    assert informer.wait_for_sync(5)
    # Keep the informer off the air while the cluster changes and the history is compacted away.
    outage = api.faults.push(503, count=1000, verbs=["watch"], resource="pods")
    eventually(lambda: outage.hits >= 1)
    api.delete("pods", "default", "b", grace_period_seconds=0)
    api.create(pod("d"))
    api.patch("pods", "default", "a", {"metadata": {"labels": {"tier": "gold"}}})
    api.compact()
    api.faults.clear()

    eventually(lambda: cached_names(informer) == server_names(api))
    stats = informer.stats()
    assert stats["relists"] == 1 and stats["lists"] == 2
    a = informer.get("default", "a")
    assert a is not None and a.labels.get("tier") == "gold"


def test_faults_back_off_exponentially_then_converge(
    api: FakeApiServer, make_pod_informer: Callable[..., Informer[Pod]]
) -> None:
    informer = make_pod_informer(watch_timeout=1, backoff_base=0.05, rng=lambda: 0.5)
    informer.start()
    assert informer.wait_for_sync(5)
    eventually(lambda: len(watch_requests(api)) == 1)
    times: list[float] = []

    def record(request: RecordedRequest) -> None:
        if request.path == PODS and request.query.get("watch", "").lower() == "true":
            times.append(time.monotonic())

    # Once armed, every watch request fails until the faults are used up: 4 x 500, then 429 Retry-After 1.
    errors = api.faults.push(500, count=4, verbs=["watch"], resource="pods")
    throttled = api.faults.push(429, count=1, verbs=["watch"], resource="pods", retry_after=1)
    api.on_request = record
    api.create(pod("late-0"))  # arrives on the open watch or after reconnecting: either way it must arrive
    api.create(pod("late-1"))

    eventually(lambda: len(times) >= 6, timeout=10)
    eventually(lambda: cached_names(informer) == ["late-0", "late-1"])
    assert errors.hits == 4 and throttled.hits == 1
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)][:5]
    # 500s wait 0.0375, 0.075, 0.15, 0.3 s (the step times 0.75 with rng 0.5). The 429's Retry-After (1 s)
    # is honoured: by urllib3's own retry of GETs, or by the informer when that retry is used up. Each gap is
    # that wait plus the request's own round trip, which a loaded machine stretches by a tenth of a second or
    # more: so every gap is checked against its floor, which only an exponential backoff reaches.
    floors = [0.0375, 0.075, 0.15, 0.3, 1.0]
    assert all(gap >= floor * 0.95 for gap, floor in zip(gaps, floors, strict=True)), gaps
    time.sleep(0.3)
    # Recovered: from the first healthy watch on, each one runs its whole second before the next opens.
    healthy = times[5:]
    assert all(later - earlier >= 0.95 for earlier, later in itertools.pairwise(healthy)), healthy


def test_list_failure_is_retried_until_the_cache_syncs(
    api: FakeApiServer, make_pod_informer: Callable[..., Informer[Pod]]
) -> None:
    api.create(pod("web-0"))
    fault = api.faults.push(500, count=2, verbs=["list"], resource="pods")
    informer = make_pod_informer(backoff_base=0.05)
    informer.start()

    assert informer.wait_for_sync(5)
    assert fault.hits == 2 and cached_names(informer) == ["web-0"]
    assert informer.stats()["watch_errors"] == 2


def test_pages_through_a_large_list_with_a_small_limit(
    api: FakeApiServer, make_pod_informer: Callable[..., Informer[Pod]]
) -> None:
    for i in range(25):
        api.create(pod(f"batch-{i:02d}", namespace=f"team-{i % 3}"))
    informer = make_pod_informer(page_size=7)
    informer.start()
    assert informer.wait_for_sync(5)

    lists = [r for r in list(api.requests) if r.path == PODS and r.query.get("watch", "").lower() != "true"]
    assert [r.query.get("limit") for r in lists] == ["7"] * 4
    assert [bool(r.query.get("continue")) for r in lists] == [False, True, True, True]
    assert len(informer.items()) == 25
    eventually(lambda: len(watch_requests(api)) == 1)
    assert watch_requests(api)[0].query["resourceVersion"] == api.resource_version


def test_a_list_whose_continue_token_expired_starts_over_and_caches_only_what_exists(
    api: FakeApiServer, client: KubeClient
) -> None:
    for i in range(20):
        api.create(pod(f"batch-{i:02d}"))
    calls: list[dict[str, Any]] = []

    def list_pods(**kwargs: Any) -> Any:
        calls.append(kwargs)
        body = client.core.list_pod_for_all_namespaces(**kwargs)
        if len(calls) == 1:
            # Between the first and second page: one pod goes, one comes, and etcd compacts its history.
            api.delete("pods", "default", "batch-00")
            api.create(pod("late-arrival"))
            api.compact()
        return body

    informer: Informer[Pod] = Informer("pods", client, list_pods, pod_from_dict, page_size=7, watch_timeout=5)
    informer.start()
    try:
        assert informer.wait_for_sync(5)
        pages = [c for c in calls if not c.get("watch")]
        # Page 2 got 410 for its token; the list started over without one and went to the end.
        assert [bool(c.get("_continue")) for c in pages] == [False, True, False, True, True]
        names = cached_names(informer)
        assert len(names) == 20 and "batch-00" not in names and "late-arrival" in names
    finally:
        informer.stop()


def test_a_malformed_object_is_skipped_not_fatal(
    api: FakeApiServer, make_pod_informer: Callable[..., Informer[Pod]]
) -> None:
    api.create(pod("good-0"))
    api.create(pod("bad-0", cpu="lots"))
    informer = make_pod_informer()
    informer.start()
    assert informer.wait_for_sync(5)
    assert cached_names(informer) == ["good-0"]

    api.create(pod("bad-1", memory="12 parsecs"))
    api.create(pod("good-1"))
    # A good object that turns bad must not linger in its last good shape.
    api.patch(
        "pods",
        "default",
        "good-0",
        {"metadata": {"annotations": {"x": "y"}}, "spec": {"overhead": {"cpu": "?"}}},
    )
    eventually(lambda: cached_names(informer) == ["good-1"])
    assert informer.stats()["decode_errors"] == 3
    assert informer.stats()["watch_errors"] == 0


def test_listener_exceptions_do_not_stop_the_informer(
    api: FakeApiServer, make_pod_informer: Callable[..., Informer[Pod]]
) -> None:
    informer = make_pod_informer()
    seen: list[str] = []

    def broken(etype: str, old: Pod | None, new: Pod | None) -> None:
        raise RuntimeError("listener bug")

    def record(etype: str, old: Pod | None, new: Pod | None) -> None:
        seen.append(new.name if new else "")

    informer.add_listener(broken)
    informer.add_listener(record)
    informer.start()
    assert informer.wait_for_sync(5)
    api.create(pod("p-0"))
    api.create(pod("p-1"))

    eventually(lambda: seen == ["p-0", "p-1"])
    assert informer.stats()["listener_errors"] == 2


class _MemoryList:
    """A list method serving pre-encoded pages (as the API server sends them) and an idle watch."""

    def __init__(self, pages: list[bytes]) -> None:
        self.pages = pages
        self.closed = threading.Event()

    def __call__(self, **kwargs: Any) -> Any:
        if kwargs.get("watch"):
            return _IdleWatch(self.closed)
        return _Body(self.pages[int(kwargs.get("_continue") or 0)])


def _encoded_pages(count: int, page: int) -> list[bytes]:
    template = json.dumps(running("POD", node_name="NODE", cpu="250m", memory="512Mi")).replace(
        '"namespace": "default"', '"namespace": "NS"'
    )
    pages: list[bytes] = []
    for first in range(0, count, page):
        items = ",".join(
            template.replace('"POD"', f'"pod-{i:06d}"')
            .replace('"NS"', f'"ns-{i % 50}"')
            .replace('"NODE"', f'"node-{i % 1000}"')
            for i in range(first, min(count, first + page))
        )
        more = first + page < count
        meta = {"resourceVersion": "100", **({"continue": str(len(pages) + 1)} if more else {})}
        pages.append(f'{{"kind": "PodList", "metadata": {json.dumps(meta)}, "items": [{items}]}}'.encode())
    return pages


class _Body:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def release_conn(self) -> None:
        pass


class _IdleWatch:
    def __init__(self, closed: threading.Event) -> None:
        self.closed = closed

    def stream(self, amt: Any = None, decode_content: bool = False) -> Iterator[bytes]:
        self.closed.wait(30)
        return iter(())

    def shutdown(self) -> None:
        self.closed.set()

    def close(self) -> None:
        pass

    def release_conn(self) -> None:
        pass


@pytest.mark.slow
def test_decodes_a_hundred_thousand_pods_from_raw_pages(client: KubeClient) -> None:
    """Functional check of the bulk path (bench/ times it): raw JSON pages straight into model values."""
    count = 100_000
    source = _MemoryList(_encoded_pages(count, 500))
    informer: Informer[Pod] = Informer("pods", client, source, pod_from_dict)
    informer.start()
    try:
        assert informer.wait_for_sync(120)
        assert len(informer.items()) == count
        assert informer.stats()["decode_errors"] == 0
        last = informer.get("ns-49", f"pod-{count - 1:06d}")  # from the last page
        assert last is not None and last.node_name == "node-999"
    finally:
        informer.stop()


def test_the_garbage_collector_is_paused_while_a_list_is_decoded_and_resumed_after(
    client: KubeClient,
) -> None:
    collector_on_while_decoding: list[bool] = []

    def decode(obj: Mapping[str, Any]) -> Pod:
        collector_on_while_decoding.append(gc.isenabled())
        return pod_from_dict(obj)

    informer: Informer[Pod] = Informer("pods", client, _MemoryList(_encoded_pages(1200, 500)), decode)
    informer._list()

    assert collector_on_while_decoding == [False] * 1200
    assert gc.isenabled()


def test_what_a_big_list_leaves_is_kept_out_of_later_collections(client: KubeClient) -> None:
    gc.unfreeze()
    pages = _MemoryList(_encoded_pages(40_000, 1000))
    informer: Informer[Pod] = Informer("pods", client, pages, pod_from_dict)
    try:
        informer._list()
        assert gc.get_freeze_count() > 40_000  # the cache's pods and what they hold
        assert gc.isenabled()
        last = informer.get("ns-49", "pod-039999")
        assert last is not None and last.node_name == "node-999"
    finally:
        gc.unfreeze()


def test_pauses_of_the_garbage_collector_nest_and_leave_it_as_they_found_it() -> None:
    with collector_paused():
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # an outer list is still decoding
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()  # disabled by someone else before: not ours to turn on
    finally:
        gc.enable()


def test_a_list_that_fails_midway_resumes_the_garbage_collector(client: KubeClient) -> None:
    pages = _MemoryList(_encoded_pages(1200, 500))

    def failing_second_page(**kwargs: Any) -> Any:
        if kwargs.get("_continue"):
            raise ApiException(status=500, reason="Internal Server Error")
        return pages(**kwargs)

    informer: Informer[Pod] = Informer("pods", client, failing_second_page, pod_from_dict)
    with pytest.raises(ApiException):
        informer._list()
    assert gc.isenabled()
