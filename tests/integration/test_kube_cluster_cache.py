"""ClusterCache: every kind a Snapshot holds, KAI CRDs only when served, through the fake API server."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from autoscaler.core.model import Queue, QueueLimits
from autoscaler.runtime.kube.client import KubeClient, make_api_client
from autoscaler.runtime.kube.cluster_cache import ClusterCache
from tests.builders import INSUFFICIENT_GPU, node, pod
from tests.fakes.kube_apiserver import FakeApiServer

KAI = "scheduling.run.ai"


def eventually(check: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.02)


def pdb(name: str, app: str, min_available: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": app}}},
    }


def daemonset(name: str, cpu: str, memory: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": "kube-system"},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [
                        {
                            "name": name,
                            "image": f"{name}:1",
                            "resources": {"requests": {"cpu": cpu, "memory": memory}},
                        }
                    ],
                    "tolerations": [{"operator": "Exists"}],
                },
            },
        },
    }


def podgroup(name: str, min_member: int, queue: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{KAI}/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"minMember": min_member, "queue": queue},
    }


def queue(name: str, quota: int, limit: int) -> dict[str, Any]:
    return {
        "apiVersion": f"{KAI}/v2",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": {
            "parentQueue": "default",
            "resources": {
                "gpu": {"quota": quota, "limit": limit, "overQuotaWeight": 2},
                "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
                "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
            },
        },
    }


def install_kai(api: FakeApiServer) -> None:
    api.register_crd(KAI, "v2alpha2", "podgroups", "PodGroup", namespaced=True)
    api.register_crd(KAI, "v2", "queues", "Queue", namespaced=False)


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
def make_cache(client: KubeClient) -> Iterator[Callable[..., ClusterCache]]:
    caches: list[ClusterCache] = []

    def build(**options: Any) -> ClusterCache:
        options.setdefault("watch_timeout", 5)
        cache = ClusterCache(client, **options)
        caches.append(cache)
        return cache

    yield build
    for cache in caches:
        cache.stop()


def populate(api: FakeApiServer) -> None:
    api.create(node("gpu-b", instance_type="g5.12xlarge", cpu="48", memory="192Gi", gpu=4, managed=True))
    api.create(node("cpu-a"))
    api.create(pod("web-1", node_name="cpu-a", phase="Running", labels={"app": "web"}))
    api.create(pod("train-0", namespace="ml", cpu="8", memory="64Gi", gpu=4, message=INSUFFICIENT_GPU))
    api.create(pod("web-0", node_name="cpu-a", phase="Running", labels={"app": "web"}))
    api.create(pdb("web", "web"))
    api.create(daemonset("node-exporter", "100m", "128Mi"))
    api.create(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml", "labels": {"team": "ml"}}}
    )


def test_snapshot_holds_every_kind_sorted_and_without_kai(
    api: FakeApiServer, make_cache: Callable[..., ClusterCache]
) -> None:
    populate(api)
    cache = make_cache()
    cache.start()
    assert cache.wait_for_sync(5)

    snap = cache.snapshot()
    assert [(p.namespace, p.name) for p in snap.pods] == [
        ("default", "web-0"),
        ("default", "web-1"),
        ("ml", "train-0"),
    ]
    assert [n.name for n in snap.nodes] == ["cpu-a", "gpu-b"]
    assert snap.nodes[1].gpus == 4 and snap.nodes[1].managed
    assert snap.pods[2].requests.gpus == 4 and snap.pods[2].pending
    assert [(b.name, b.selector is not None) for b in snap.pdbs] == [("web", True)]
    assert [(d.namespace, d.name) for d in snap.daemonsets] == [("kube-system", "node-exporter")]
    assert snap.daemonsets[0].requests.get("cpu") == 100
    assert snap.podgroups == () and snap.queues == ()
    # The fake serves resource.k8s.io/v1, as Kubernetes 1.34 and later do: DRA kinds are watched too.
    assert cache.watched_kinds() == [
        "daemonsets",
        "deviceclasses",
        "namespaces",
        "nodes",
        "pdbs",
        "pods",
        "resourceclaims",
        "resourceclaimtemplates",
    ]
    assert snap.namespaces["ml"] == {"team": "ml", "kubernetes.io/metadata.name": "ml"}
    # KAI absent: probed, never listed or watched, and nothing went wrong.
    kai = [r for r in list(api.requests) if r.path.startswith(f"/apis/{KAI}")]
    assert {r.path for r in kai} == {f"/apis/{KAI}/v2alpha2", f"/apis/{KAI}/v2"}
    assert all(s["watch_errors"] == 0 for k, s in cache.stats().items() if k != "crd_probe")
    assert not api.server_errors


def test_kai_podgroups_and_queues_are_decoded_when_their_crds_exist(
    api: FakeApiServer, make_cache: Callable[..., ClusterCache]
) -> None:
    install_kai(api)
    api.create(podgroup("pg-train", 4, "research"))
    api.create(queue("research", quota=8, limit=16))
    api.create(pod("train-0", namespace="ml", gpu=1, annotations={"pod-group-name": "pg-train"}))
    cache = make_cache()
    cache.start()
    assert cache.wait_for_sync(5)

    snap = cache.snapshot()
    assert [(g.namespace, g.name, g.min_member, g.queue) for g in snap.podgroups] == [
        ("ml", "pg-train", 4, "research")
    ]
    assert snap.queues == (Queue("research", parent="default", gpu=QueueLimits(8, 16, 2)),)

    api.create(queue("prod", quota=4, limit=-1))
    eventually(lambda: [q.name for q in cache.snapshot().queues] == ["prod", "research"])
    assert cache.snapshot().queues[0].gpu.limit is None  # -1 means unlimited


def test_kai_installed_later_is_picked_up_by_the_next_probe(
    api: FakeApiServer, make_cache: Callable[..., ClusterCache]
) -> None:
    cache = make_cache(crd_probe_interval=0.2)
    cache.start()
    assert cache.wait_for_sync(5)
    assert "podgroups" not in cache.watched_kinds()

    install_kai(api)
    api.create(podgroup("pg-a", 2, "research"))
    eventually(lambda: [g.name for g in cache.snapshot().podgroups] == ["pg-a"])
    assert cache.wait_for_sync(5)
    assert "queues" in cache.watched_kinds()


def test_listeners_see_changes_tagged_with_their_kind(
    api: FakeApiServer, make_cache: Callable[..., ClusterCache]
) -> None:
    # A non-zero resourceVersion to list at: a watch from "0" would fold early changes into one ADDED.
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}})
    cache = make_cache()
    seen: list[tuple[str, str, str]] = []
    cache.add_listener(lambda kind, etype, old, new: seen.append((kind, etype, (new or old).name)))
    cache.start()
    assert cache.wait_for_sync(5)

    api.create(node("cpu-a"))
    api.create(pod("web-0", node_name="cpu-a", phase="Running"))
    api.patch("nodes", None, "cpu-a", {"metadata": {"labels": {"tier": "spot"}}})
    eventually(lambda: len(seen) == 3)
    time.sleep(0.1)
    assert sorted(seen) == [
        ("nodes", "ADDED", "cpu-a"),
        ("nodes", "MODIFIED", "cpu-a"),
        ("pods", "ADDED", "web-0"),
    ]
    stats = cache.stats()
    assert stats["nodes"]["objects"] == 1 and stats["pods"]["objects"] == 1
    assert stats["nodes"]["relists"] == 0


def test_namespace_limits_namespaced_kinds(
    api: FakeApiServer, make_cache: Callable[..., ClusterCache]
) -> None:
    populate(api)
    cache = make_cache(namespace="ml")
    cache.start()
    assert cache.wait_for_sync(5)

    snap = cache.snapshot()
    assert [p.name for p in snap.pods] == ["train-0"]
    assert [n.name for n in snap.nodes] == ["cpu-a", "gpu-b"]  # nodes are cluster-scoped
    assert snap.pdbs == () and snap.daemonsets == ()
