"""make_api_client's source order and errors, and the client-side rate limiter every kube/ call uses."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoscaler.runtime.kube.actions import ClusterActions
from autoscaler.runtime.kube.client import KubeClient, KubeConfigError, RateLimiter, make_api_client
from autoscaler.runtime.kube.cluster_cache import ClusterCache
from autoscaler.runtime.kube.leader import LeaderElector
from tests.builders import node, pod
from tests.fakes.kube_apiserver import FakeApiServer


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        yield server


def kubeconfig(path: Path, servers: dict[str, str], current: str) -> str:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": n, "cluster": {"server": url}} for n, url in servers.items()],
                "users": [{"name": "tidal", "user": {"token": "kubeconfig-token"}}],
                "contexts": [{"name": n, "context": {"cluster": n, "user": "tidal"}} for n in servers],
                "current-context": current,
            }
        )
    )
    return str(path)


def node_names(kube: KubeClient) -> list[str]:
    body = kube.call(kube.core.list_node)
    return [item["metadata"]["name"] for item in body["items"]]


def test_explicit_host_and_token_win(api: FakeApiServer, tmp_path: Path) -> None:
    api.create(node("cpu-a"))
    other = kubeconfig(tmp_path / "config", {"prod": "http://127.0.0.1:1"}, "prod")

    kube = make_api_client(host=api.url, token="secret-token", kubeconfig=other)
    try:
        assert node_names(kube) == ["cpu-a"]
        cfg = kube.api_client.configuration
        assert cfg.get_api_key_with_prefix("authorization") == "Bearer secret-token"
    finally:
        kube.close()


def test_kubeconfig_path_and_context_beat_in_cluster(
    api: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    api.create(node("cpu-a"))
    path = kubeconfig(tmp_path / "config", {"prod": "http://127.0.0.1:1", "fake": api.url}, "prod")

    kube = make_api_client(kubeconfig=path, context="fake")
    try:
        assert node_names(kube) == ["cpu-a"]
    finally:
        kube.close()


@pytest.mark.parametrize(
    ("setup", "expected"),
    [
        ("missing", "kubeconfig '{tmp}/nope' does not exist"),
        ("bad-context", "cannot load Kubernetes configuration from kubeconfig '{tmp}/config': "),
        ("in-cluster", "cannot load Kubernetes configuration from the in-cluster service account: "),
    ],
)
def test_configuration_errors_are_one_line(
    setup: str, expected: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    options: dict[str, Any] = {}
    if setup == "missing":
        options["kubeconfig"] = str(tmp_path / "nope")
    elif setup == "bad-context":
        options["kubeconfig"] = kubeconfig(tmp_path / "config", {"prod": "https://k8s.example.com"}, "prod")
        options["context"] = "staging"
    else:  # in a pod without a mounted service account token
        monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
        monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")

    with pytest.raises(KubeConfigError) as caught:
        make_api_client(**options)
    message = str(caught.value)
    assert message.startswith(expected.format(tmp=tmp_path)) and "\n" not in message


def test_token_bucket_allows_a_burst_then_paces_to_qps() -> None:
    now = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(round(seconds, 6))

    limiter = RateLimiter(10.0, 3, clock=lambda: now[0], sleep=sleep)
    for _ in range(5):
        limiter.acquire()
    assert slept == [0.1, 0.2]  # three free, then one per 100 ms, reserved in arrival order

    now[0] = 10.0  # long idle: the bucket refills to the burst, not beyond
    slept.clear()
    for _ in range(4):
        limiter.acquire()
    assert slept == [0.1]


class YieldingInstant(float):
    """A clock reading whose arithmetic hands the CPU to other threads.

    The bucket's update reads its tokens and then subtracts clock readings; switching threads right there makes
    an unguarded update lose other threads' reservations every run instead of once in a long while.
    """

    def __sub__(self, other: float) -> float:
        time.sleep(0.0005)
        return float(self) - float(other)


def test_concurrent_callers_each_get_their_own_token() -> None:
    delays: list[float] = []
    limiter = RateLimiter(200.0, 5, clock=lambda: YieldingInstant(0.0), sleep=delays.append)

    def ten() -> None:
        for _ in range(10):
            limiter.acquire()

    threads = [threading.Thread(target=ten) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # The clock stands still: 5 callers use the burst, the other 35 queue 5 ms apart, none sharing a slot.
    assert sorted(round(d, 6) for d in delays) == [round(k / 200.0, 6) for k in range(1, 36)]
    assert limiter.waited == pytest.approx(sum(k / 200.0 for k in range(1, 36)))


class CountingLimiter(RateLimiter):
    def __init__(self) -> None:
        super().__init__(0, 1)
        self.count = 0
        self._count_lock = threading.Lock()

    def reserve(self) -> float:
        with self._count_lock:
            self.count += 1
        return super().reserve()


def test_every_kube_call_goes_through_the_rate_limiter(api: FakeApiServer) -> None:
    api.create(node("cpu-a"))
    api.create(pod("web-0", node_name="cpu-a", phase="Running"))
    limiter = CountingLimiter()
    kube = make_api_client(host=api.url)
    kube.limiter = limiter
    try:
        cache = ClusterCache(kube, watch_timeout=5)
        cache.start()
        assert cache.wait_for_sync(5)
        time.sleep(0.2)  # let every watch open
        cache.stop()
        actions = ClusterActions(kube)
        actions.cordon("cpu-a")
        actions.evict("default", "web-0")
        actions.write_status("tidal-system", "tidal-status", {"k": "v"})
        actions.node_event("cpu-a", reason="Test", message="m")
        elector = LeaderElector(
            kube,
            namespace="tidal-system",
            name="tidal",
            identity="a",
            lease_duration=15,
            renew_deadline=10,
            retry_period=2,
        )
        assert elector.try_acquire_or_renew()
        elector.release()
    finally:
        kube.close()

    assert limiter.count == len(api.requests)
