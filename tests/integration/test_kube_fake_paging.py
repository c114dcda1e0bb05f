"""The fake API server pages lists incrementally, as etcd does: each page starts where the last one ended, so
listing 100,000 pods costs one pass over them, not one pass per page."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest

from tests.fakes.kube_apiserver import FakeApiServer


def configmap(name: str, namespace: str = "default", **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
    }


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        yield server
        assert server.server_errors == []


def page_through(api: FakeApiServer, limit: int, **kw: Any) -> tuple[list[str], list[int | None]]:
    """Every name a paged list returns over HTTP, and each page's remainingItemCount."""
    client = api.api_client()
    core = kubernetes.client.CoreV1Api(client)
    names: list[str] = []
    remaining: list[int | None] = []
    token = None
    try:
        while True:
            page = core.list_config_map_for_all_namespaces(limit=limit, _continue=token, **kw)
            names += [f"{c.metadata.namespace}/{c.metadata.name}" for c in page.items]
            remaining.append(page.metadata.remaining_item_count)
            token = page.metadata._continue
            if not token:
                return names, remaining
    finally:
        client.close()
        client.rest_client.pool_manager.clear()


def test_each_object_is_looked_at_once_however_many_pages_it_takes(api: FakeApiServer) -> None:
    for i in range(600):
        api.create(configmap(f"cm-{i:04d}", tier="a" if i % 3 else "b"))
    rt = api.registry.resolve("configmaps")
    looked_at = 0

    def match(obj: dict[str, Any]) -> bool:
        nonlocal looked_at
        looked_at += 1
        wanted: bool = obj["metadata"]["labels"]["tier"] == "a"
        return wanted

    found, token, pages = 0, None, 0
    while True:
        page = api.store.select(rt, None, match, limit=10, continue_token=token)
        found, token, pages = found + len(page.items), page.continue_token, pages + 1
        if token is None:
            break
    assert found == 400 and pages == 40
    # The old scan from the first key on every page looked at about 600 * 40 / 2 = 12,000 objects.
    assert looked_at <= 600 + pages


def test_writes_between_pages_neither_repeat_nor_lose_the_objects_that_stay(api: FakeApiServer) -> None:
    for i in range(10):
        api.create(configmap(f"cm-{i}"))
    rt = api.registry.resolve("configmaps")
    first = api.store.select(rt, "default", limit=4)
    assert [o["metadata"]["name"] for o in first.items] == ["cm-0", "cm-1", "cm-2", "cm-3"]
    api.delete("configmaps", "default", "cm-1")  # already served
    api.delete("configmaps", "default", "cm-5")  # not yet served: it is gone
    api.create(configmap("cm-0a"))  # sorts before the cursor: a later list sees it, this one need not
    api.create(configmap("cm-8a"))  # sorts after the cursor: this list sees it
    api.delete("configmaps", "default", "cm-9")
    api.create(configmap("cm-9"))  # deleted and created again between two pages
    rest = api.store.select(rt, "default", limit=100, continue_token=first.continue_token)
    assert [o["metadata"]["name"] for o in rest.items] == ["cm-4", "cm-6", "cm-7", "cm-8", "cm-8a", "cm-9"]
    assert rest.continue_token is None
    everything = [o["metadata"]["name"] for o in api.store.select(rt, "default").items]
    assert everything == sorted(
        ["cm-0", "cm-0a", "cm-2", "cm-3", "cm-4", "cm-6", "cm-7", "cm-8", "cm-8a", "cm-9"]
    )


def test_a_namespace_pages_only_its_own_objects_and_counts_only_them(api: FakeApiServer) -> None:
    for namespace in ("a", "b", "b-2", "c"):
        for i in range(5):
            api.create(configmap(f"cm-{i}", namespace))
    rt = api.registry.resolve("configmaps")
    first = api.store.select(rt, "b", limit=2)
    assert [o["metadata"]["namespace"] for o in first.items] == ["b", "b"]
    assert first.remaining == 3
    rest = api.store.select(rt, "b", limit=10, continue_token=first.continue_token)
    assert [o["metadata"]["name"] for o in rest.items] == ["cm-2", "cm-3", "cm-4"]
    assert {o["metadata"]["namespace"] for o in rest.items} == {"b"}


def test_over_http_every_object_comes_once_in_key_order_and_only_unselected_lists_count_the_rest(
    api: FakeApiServer,
) -> None:
    for namespace in ("x", "y"):
        for i in range(7):
            api.create(configmap(f"cm-{i}", namespace, tier="a" if i % 2 else "b"))
    names, remaining = page_through(api, 5)
    assert names == [f"{ns}/cm-{i}" for ns in ("x", "y") for i in range(7)]
    assert remaining == [9, 4, None]
    selected, remaining = page_through(api, 3, label_selector="tier=a")
    assert selected == [f"{ns}/cm-{i}" for ns in ("x", "y") for i in (1, 3, 5)]
    assert remaining == [None, None]  # like the API server: no count when a selector filters
