"""Two replicas, one simulated cloud, a real Lease: kill -9 the leader and the standby takes over."""

from __future__ import annotations

import time

import kubernetes.client

from tests.e2e.control_plane.conftest import Cluster
from tests.e2e.control_plane.workloads import job
from tests.k8s.tidal import wait_until

ELECTION = {"enabled": True, "leaseDuration": "4s", "renewDeadline": "3s", "retryPeriod": "1s"}


def lease_holder(cluster: Cluster) -> str | None:
    coord = kubernetes.client.CoordinationV1Api(cluster.api)
    try:
        lease = coord.read_namespaced_lease("tidal", "tidal-system")
    except kubernetes.client.exceptions.ApiException:
        return None
    holder: str | None = lease.spec.holder_identity
    return holder


def test_the_standby_takes_over_within_the_lease_after_the_leader_is_killed_and_launches_nothing_twice(
    cluster: Cluster,
) -> None:
    cfg = cluster.config(leaderElection=ELECTION)
    first = cluster.tidal(cfg, name="tidal-a")
    wait_until(lambda: first.metric("tidal_leader") == 1, timeout=60, what="tidal-a leading")
    second = cluster.tidal(cfg, name="tidal-b")
    second.wait_reconciles(1, timeout=60)
    assert second.metric("tidal_leader") == 0
    cluster.create(job("train", pods=2, cpu="2", memory="8Gi", gpus=1))
    cluster.wait_bound(2, timeout=90)
    cloud = cluster.cloud(cfg)
    before = {i.id for i in cloud.launched()}

    leader_identity = lease_holder(cluster)
    first.kill()
    killed = time.monotonic()
    wait_until(
        lambda: (h := lease_holder(cluster)) is not None and h != leader_identity,
        timeout=30,
        what="the standby holding the lease",
    )
    took_over = time.monotonic() - killed
    assert took_over < 4 + 3 + 2  # the lease duration, one retry period and the machine's slack
    wait_until(lambda: second.metric("tidal_leader") == 1, timeout=10, what="tidal-b reporting leadership")
    second.wait_reconciles(3)
    # The new leader rebuilt the fleet from the cloud and the Nodes: the running pods need nothing more.
    assert {i.id for i in cloud.launched()} == before
    cluster.create(job("more", pods=1, cpu="2", memory="8Gi", gpus=1))
    cluster.wait_bound(3, timeout=90)
    assert len({i.id for i in cloud.launched()} - before) == 1
