"""A ConfigMap edit reaches a running tidal: the mounted file changes as the kubelet swaps it."""

from __future__ import annotations

from tests.e2e.control_plane.conftest import Cluster
from tests.e2e.control_plane.workloads import job
from tests.k8s.tidal import wait_until


def test_a_lower_gpu_limit_written_to_the_configmap_holds_from_the_next_reconcile(cluster: Cluster) -> None:
    cfg = cluster.config(clusterGPULimit=8)
    tidal = cluster.tidal(cfg)
    tidal.wait_reconciles(1, timeout=60)
    tidal.write_config({**cfg, "clusterGPULimit": 1})
    wait_until(
        lambda: tidal.metric("tidal_cluster_gpu_limit") == 1, timeout=30, what="the reloaded GPU limit in use"
    )
    cluster.create(job("train", pods=3, cpu="2", memory="8Gi", gpus=1))
    cluster.wait_bound(1, timeout=90)
    tidal.wait_reconciles(3)
    cloud = cluster.cloud(cfg)
    assert cloud.gpus_up() == 1
    assert len(cluster.bound()) == 1
    assert tidal.metric("tidal_config_reloads_total", outcome="success") >= 1


def test_an_invalid_configmap_edit_is_reported_and_the_last_good_configuration_stays(
    cluster: Cluster,
) -> None:
    cfg = cluster.config(clusterGPULimit=1)
    tidal = cluster.tidal(cfg)
    tidal.wait_reconciles(1, timeout=60)
    tidal.write_config({**cfg, "clusterGPULimit": "four"})
    wait_until(
        lambda: (
            tidal.metric("tidal_config_last_reload_success") == 0
            and tidal.metric("tidal_config_reloads_total") >= 1
        ),
        timeout=30,
        what="the invalid reload reported",
    )
    status, detail = tidal.probe("/readyz")
    assert status == 200 and "last configuration reload was invalid" in detail
    cluster.create(job("train", pods=2, cpu="2", memory="8Gi", gpus=1))
    cluster.wait_bound(1, timeout=90)
    tidal.wait_reconciles(3)
    assert cluster.cloud(cfg).gpus_up() == 1  # still the last good limit
    assert tidal.running
