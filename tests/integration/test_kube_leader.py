"""LeaderElector on a coordination.k8s.io/v1 Lease, through the fake API server, mostly with a fake clock."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from autoscaler.runtime.kube.client import KubeClient, make_api_client
from autoscaler.runtime.kube.convert import parse_time
from autoscaler.runtime.kube.leader import LeaderElector
from tests.fakes.kube_apiserver import FakeApiServer, RecordedRequest

NAMESPACE, LEASE = "tidal-system", "tidal"
LEASE_PATH = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{LEASE}"


class FakeClock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        yield server


@pytest.fixture
def client(api: FakeApiServer) -> Iterator[KubeClient]:
    kube = make_api_client(host=api.url, qps=0)
    yield kube
    kube.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def elector(client: KubeClient, clock: FakeClock) -> Callable[..., LeaderElector]:
    def build(identity: str, **options: Any) -> LeaderElector:
        settings: dict[str, Any] = {"lease_duration": 15.0, "renew_deadline": 10.0, "retry_period": 2.0}
        settings.update(options)
        return LeaderElector(
            client, namespace=NAMESPACE, name=LEASE, identity=identity, clock=clock, **settings
        )

    return build


def lease(api: FakeApiServer) -> dict[str, Any]:
    found = api.get("leases", NAMESPACE, LEASE)
    assert found is not None
    spec: dict[str, Any] = found["spec"]
    return spec


def test_only_one_of_two_replicas_leads(
    api: FakeApiServer, elector: Callable[..., LeaderElector], clock: FakeClock
) -> None:
    started: list[str] = []
    a = elector("tidal-a", on_started_leading=lambda: started.append("a"))
    b = elector("tidal-b", on_started_leading=lambda: started.append("b"))

    assert a.try_acquire_or_renew() is True
    assert b.try_acquire_or_renew() is False
    clock.advance(2)
    assert a.try_acquire_or_renew() is True
    assert b.try_acquire_or_renew() is False

    spec = lease(api)
    assert spec["holderIdentity"] == "tidal-a" and spec["leaseDurationSeconds"] == 15
    assert parse_time(spec["renewTime"]) == pytest.approx(clock.now, abs=1e-6)
    assert spec["renewTime"].endswith("Z") and len(spec["renewTime"].split(".")[1]) == 7  # microseconds + Z
    assert spec["leaseTransitions"] == 0
    assert a.is_leader() and not b.is_leader() and started == ["a"]


def test_standby_takes_over_once_the_leader_stops_renewing(
    api: FakeApiServer, elector: Callable[..., LeaderElector], clock: FakeClock
) -> None:
    stopped: list[str] = []
    a = elector("tidal-a", on_stopped_leading=lambda: stopped.append("a"))
    b = elector("tidal-b")
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()

    clock.advance(11)  # past a's renew deadline: a must stop acting even before anyone else leads
    assert not a.is_leader() and stopped == ["a"]
    assert not b.try_acquire_or_renew()  # the lease itself is still fresh for 4 more seconds
    clock.advance(5)
    assert b.try_acquire_or_renew()

    spec = lease(api)
    assert spec["holderIdentity"] == "tidal-b" and spec["leaseTransitions"] == 1
    assert not a.try_acquire_or_renew()


def test_release_hands_over_at_once(
    api: FakeApiServer, elector: Callable[..., LeaderElector], clock: FakeClock
) -> None:
    a = elector("tidal-a")
    b = elector("tidal-b")
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()

    a.release()
    assert not a.is_leader()
    assert not lease(api).get("holderIdentity") and lease(api)["leaseDurationSeconds"] == 1
    clock.advance(0.5)
    assert b.try_acquire_or_renew()
    assert lease(api)["holderIdentity"] == "tidal-b"


def test_a_stale_update_gets_409_and_does_not_lead(
    api: FakeApiServer, elector: Callable[..., LeaderElector], clock: FakeClock
) -> None:
    a = elector("tidal-a")
    b = elector("tidal-b")
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    clock.advance(16)  # a's lease has expired as far as b can tell...

    def a_renews_first(request: RecordedRequest) -> None:
        # ...but a renews between b's read and b's write.
        if request.method == "PUT" and request.path == LEASE_PATH and api.on_request is not None:
            api.on_request = None
            assert a.try_acquire_or_renew()

    api.on_request = a_renews_first
    assert b.try_acquire_or_renew() is False

    assert not b.is_leader() and a.is_leader()
    assert lease(api)["holderIdentity"] == "tidal-a"


def test_leader_steps_down_when_renewals_fail_past_the_deadline(
    api: FakeApiServer, elector: Callable[..., LeaderElector], clock: FakeClock
) -> None:
    stopped: list[str] = []
    a = elector("tidal-a", on_stopped_leading=lambda: stopped.append("a"))
    assert a.try_acquire_or_renew()
    api.faults.push(500, count=100, resource="leases")

    clock.advance(5)
    assert a.try_acquire_or_renew() is True  # one failed renewal inside the deadline: still leading
    clock.advance(6)
    assert a.try_acquire_or_renew() is False
    assert stopped == ["a"]


def test_run_loops_release_on_stop_and_fail_over(client: KubeClient, api: FakeApiServer) -> None:
    """Real time, short periods: the loop renews, and stopping it lets the standby lead within a round."""
    events: list[str] = []

    def build(identity: str) -> LeaderElector:
        return LeaderElector(
            client,
            namespace=NAMESPACE,
            name=LEASE,
            identity=identity,
            lease_duration=2.0,
            renew_deadline=1.0,
            retry_period=0.1,
            on_started_leading=lambda: events.append(f"{identity} leads"),
            on_stopped_leading=lambda: events.append(f"{identity} stops"),
        )

    a, b = build("tidal-a"), build("tidal-b")
    stop_a, stop_b = threading.Event(), threading.Event()
    thread_a = a.start(stop_a)
    deadline = time.monotonic() + 3
    while not a.is_leader() and time.monotonic() < deadline:
        time.sleep(0.02)
    thread_b = b.start(stop_b)
    time.sleep(0.3)
    assert a.is_leader() and not b.is_leader()

    stop_a.set()
    thread_a.join(2)
    deadline = time.monotonic() + 2
    while not b.is_leader() and time.monotonic() < deadline:
        time.sleep(0.02)
    stop_b.set()
    thread_b.join(2)

    assert events == ["tidal-a leads", "tidal-a stops", "tidal-b leads", "tidal-b stops"]


def test_without_the_leases_namespace_the_replica_says_the_namespace_is_missing() -> None:
    with FakeApiServer(namespaces=("default", "kube-system")) as api:
        kube = make_api_client(host=api.url, qps=0)
        try:
            lonely = LeaderElector(
                kube,
                namespace=NAMESPACE,
                name=LEASE,
                identity="tidal-a",
                lease_duration=15.0,
                renew_deadline=10.0,
                retry_period=2.0,
            )
            assert lonely.try_acquire_or_renew() is False
            state = lonely.state()
        finally:
            kube.close()
    assert (state.leading, state.lease, state.holder) == (False, "tidal-system/tidal", "")
    assert state.reason.startswith("namespace 'tidal-system' does not exist")
    assert 'namespaces "tidal-system" not found' in state.reason
    assert state.describe().startswith("not leading (lease tidal-system/tidal): namespace 'tidal-system'")


def test_an_rbac_refusal_of_the_lease_is_the_reason_for_not_leading(
    api: FakeApiServer, elector: Callable[..., LeaderElector]
) -> None:
    api.authorizer = lambda verb, group, resource, sub, ns: resource != "leases"
    refused = elector("tidal-a")
    assert refused.try_acquire_or_renew() is False
    reason = refused.state().reason
    assert reason.startswith("RBAC refuses to read lease tidal-system/tidal: ")
    assert "forbidden" in reason


def test_a_standby_names_the_identity_holding_the_lease(
    api: FakeApiServer, elector: Callable[..., LeaderElector]
) -> None:
    assert elector("tidal-a").try_acquire_or_renew() is True
    standby = elector("tidal-b")
    assert standby.try_acquire_or_renew() is False
    state = standby.state()
    assert (state.leading, state.reason, state.holder, state.held_by_other) == (
        False,
        "held by tidal-a",
        "tidal-a",
        True,
    )


def test_not_leading_is_logged_at_warning_once_per_reason(
    api: FakeApiServer, elector: Callable[..., LeaderElector], clock: FakeClock
) -> None:
    from structlog.testing import capture_logs

    api.authorizer = lambda verb, group, resource, sub, ns: resource != "leases"
    refused = elector("tidal-a")
    with capture_logs() as logs:
        for _ in range(3):
            refused.try_acquire_or_renew()
            clock.advance(2)
    warnings = [e for e in logs if e["event"] == "not leading"]
    assert len(warnings) == 1
    assert warnings[0]["log_level"] == "warning"
    assert warnings[0]["lease"] == "tidal-system/tidal"
    assert warnings[0]["reason"].startswith("RBAC refuses")


def test_rounds_of_one_replica_never_overlap_so_its_own_create_does_not_look_like_a_rival(
    elector: Callable[..., LeaderElector],
) -> None:
    # The electing thread and `tidal run --once` both try a round at start. The first round's read is held
    # after it saw no lease, as a slow API server would: the second must wait for it, then renew.
    one = elector("tidal-a")
    read = one._api.read_namespaced_lease
    held, release = threading.Event(), threading.Event()

    def slow_first_read(*args: Any, **kwargs: Any) -> Any:
        try:
            return read(*args, **kwargs)
        finally:
            if not held.is_set():
                held.set()
                release.wait(2)

    one._api.read_namespaced_lease = slow_first_read
    results: dict[str, bool] = {}
    first = threading.Thread(target=lambda: results.update(first=one.try_acquire_or_renew()))
    second = threading.Thread(target=lambda: results.update(second=one.try_acquire_or_renew()))
    first.start()
    assert held.wait(5)
    second.start()
    second.join(0.5)  # overlapping rounds would let the second create the lease meanwhile
    release.set()
    first.join(5)
    second.join(5)
    assert results == {"first": True, "second": True}
    assert one.is_leader()
