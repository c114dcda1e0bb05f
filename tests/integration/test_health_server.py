"""HealthServer over real HTTP on an ephemeral port: /metrics, /healthz, /readyz."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from autoscaler.runtime.observability.metrics import Metrics
from autoscaler.runtime.observability.server import METRICS_CONTENT_TYPE, HealthServer, HealthState


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def health(clock: FakeClock) -> HealthState:
    return HealthState(staleness_limit=60, clock=clock)


@pytest.fixture
def metrics() -> Metrics:
    return Metrics()


@pytest.fixture
def server(metrics: Metrics, health: HealthState) -> Iterator[HealthServer]:
    server = HealthServer("127.0.0.1:0", metrics, health)
    server.start()
    yield server
    server.stop()


def get(server: HealthServer, path: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}{path}", timeout=5) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.headers["Content-Type"], err.read().decode()


def test_metrics_endpoint_serves_text_exposition(server: HealthServer, metrics: Metrics) -> None:
    metrics.set_leader(True)

    status, content_type, body = get(server, "/metrics")

    assert status == 200
    assert content_type == METRICS_CONTENT_TYPE
    leader = {f.name: f for f in text_string_to_metric_families(body)}["tidal_leader"]
    assert leader.samples[0].value == 1


def test_healthz_fails_when_heartbeat_is_stale(
    server: HealthServer, health: HealthState, clock: FakeClock
) -> None:
    health.heartbeat(clock.now)
    assert get(server, "/healthz")[0] == 200

    clock.now += 61
    status, _, body = get(server, "/healthz")

    assert status == 500
    assert "stalled" in body
    assert body.count("\n") == 1


def test_readyz_needs_synced_caches_and_a_config(server: HealthServer, health: HealthState) -> None:
    assert get(server, "/readyz")[0] == 500
    health.mark_config_ok(True)
    assert get(server, "/readyz")[0] == 500

    health.mark_synced()
    assert get(server, "/readyz")[0] == 200
    health.mark_config_ok(False)  # a bad reload keeps the last good config, so still ready
    assert get(server, "/readyz")[0] == 200


def test_unknown_path_is_404(server: HealthServer) -> None:
    assert get(server, "/nope")[0] == 404
