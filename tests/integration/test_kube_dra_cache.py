"""DRA objects in the cluster cache: DeviceClasses, ResourceClaims and templates are watched only while the API
server serves resource.k8s.io/v1, through the fake API server and the unmodified client."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from autoscaler.core.dra import AllocationMode
from autoscaler.runtime.kube.client import KubeClient, make_api_client
from autoscaler.runtime.kube.cluster_cache import ClusterCache
from tests.fakes.kube_apiserver import FakeApiServer

DRA = "resource.k8s.io"
DRA_KINDS = {"deviceclasses", "resourceclaims", "resourceclaimtemplates"}


def eventually(check: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.02)


def device_class(name: str, device_type: str) -> dict[str, Any]:
    expression = (
        f"device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == '{device_type}'"
    )
    return {
        "apiVersion": f"{DRA}/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


def claim_template(name: str, count: int) -> dict[str, Any]:
    return {
        "apiVersion": f"{DRA}/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": "research"},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": count}}
                    ]
                }
            }
        },
    }


def claim(name: str, request: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"{DRA}/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "research"},
        "spec": {"devices": {"requests": [request]}},
    }


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


def test_dra_objects_are_decoded_while_resource_k8s_io_v1_is_served(
    api: FakeApiServer, make_cache: Callable[..., ClusterCache]
) -> None:
    api.create(device_class("gpu.nvidia.com", "gpu"))
    api.create(device_class("mig.nvidia.com", "mig"))
    api.create(claim_template("two-gpus", 2))
    api.create(
        claim(
            "team-gpu",
            {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "All"}},
        )
    )
    cache = make_cache()
    cache.start()
    assert cache.wait_for_sync(5)

    dra = cache.dra_objects()
    assert dra.served
    assert [c.name for c in dra.device_classes] == ["gpu.nvidia.com", "mig.nvidia.com"]
    assert [(t.namespace, t.name) for t in dra.claim_templates] == [("research", "two-gpus")]
    template_request, claim_request = dra.claim_templates[0].spec.requests[0], dra.claims[0].spec.requests[0]
    assert template_request.exactly is not None and claim_request.exactly is not None
    assert template_request.exactly.count == 2
    assert [c.name for c in dra.claims] == ["team-gpu"]
    assert claim_request.exactly.allocation_mode == AllocationMode.ALL


def test_a_new_claim_reaches_the_cache_through_the_watch(
    api: FakeApiServer, make_cache: Callable[..., ClusterCache]
) -> None:
    cache = make_cache()
    cache.start()
    assert cache.wait_for_sync(5)
    assert cache.dra_objects().claims == ()

    api.create(claim("trainer-0-gpus", {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com"}}))
    eventually(lambda: [c.name for c in cache.dra_objects().claims] == ["trainer-0-gpus"])


def test_dra_kinds_are_not_watched_on_a_cluster_without_the_api(
    api: FakeApiServer, make_cache: Callable[..., ClusterCache]
) -> None:
    api.unserve(DRA, "v1")
    cache = make_cache()
    cache.start()
    assert cache.wait_for_sync(5)

    assert not DRA_KINDS & set(cache.watched_kinds())
    assert cache.dra_objects() == type(cache.dra_objects())(served=False)
    dra_requests = [r.path for r in list(api.requests) if r.path.startswith(f"/apis/{DRA}")]
    assert dra_requests == [f"/apis/{DRA}/v1"]  # one discovery request for the three kinds, no list or watch


def test_dra_kinds_are_picked_up_once_the_api_is_served(
    api: FakeApiServer, make_cache: Callable[..., ClusterCache]
) -> None:
    types = api.unserve(DRA, "v1")
    cache = make_cache(crd_probe_interval=0.2)
    cache.start()
    assert cache.wait_for_sync(5)
    assert not cache.dra_objects().served

    for rt in types:
        api.registry.register(rt)
    api.create(device_class("gpu.nvidia.com", "gpu"))
    eventually(lambda: [c.name for c in cache.dra_objects().device_classes] == ["gpu.nvidia.com"])
    assert cache.dra_objects().served
    assert set(cache.watched_kinds()) >= DRA_KINDS


def test_a_malformed_claim_is_left_out_and_the_others_kept(
    api: FakeApiServer, make_cache: Callable[..., ClusterCache]
) -> None:
    api.create(claim("good", {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 1}}))
    api.create(claim("bad", {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 0}}))
    cache = make_cache()
    cache.start()
    assert cache.wait_for_sync(5)

    assert [c.name for c in cache.dra_objects().claims] == ["good"]
    assert cache.stats()["resourceclaims"]["decode_errors"] == 1


def test_claims_are_limited_to_the_caches_namespace(
    api: FakeApiServer, make_cache: Callable[..., ClusterCache]
) -> None:
    api.create(claim("here", {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}))
    elsewhere = claim("there", {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}})
    elsewhere["metadata"]["namespace"] = "other"
    api.create(elsewhere)
    cache = make_cache(namespace="research")
    cache.start()
    assert cache.wait_for_sync(5)

    assert [(c.namespace, c.name) for c in cache.dra_objects().claims] == [("research", "here")]
