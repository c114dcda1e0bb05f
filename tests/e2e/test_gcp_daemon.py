"""The daemon end to end with ``cloud: gcp``: fake GCE + Cloud Billing, fake API server, GKE kubelet and
scheduler stand-ins, and the real `tidal run` pieces with the provider found through the registry."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import yaml

from autoscaler.cloud import load_provider
from autoscaler.config.options import load_config
from autoscaler.runtime.daemon import Daemon
from autoscaler.runtime.kube.client import make_api_client
from autoscaler.runtime.kube.convert import node_from_dict
from providers.gcp.gpus import split_attached_name
from tests.e2e.harness import KAI_REGEXP, gpu_pod
from tests.fakes.gcp_cloud import FakeGcp
from tests.fakes.gcp_fixtures import attachable_gpu_prices
from tests.fakes.gcp_kubelet import GkeKubelet
from tests.fakes.kube_apiserver import FakeApiServer
from tests.fakes.scheduler import SchedulerStandIn

if TYPE_CHECKING:
    from typing import Any

pytestmark = pytest.mark.slow


@dataclass
class GkeCluster:
    gcp: FakeGcp
    api: FakeApiServer
    kubelet: GkeKubelet
    scheduler: SchedulerStandIn
    daemon: Daemon

    def step(self) -> None:
        self.kubelet.step()
        self.scheduler.step()
        time.sleep(0.05)  # let the informers see the writes
        self.daemon.reconcile()

    def run_until(self, done: Callable[[], bool], timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.step()
            if done():
                return
            time.sleep(0.05)
        raise AssertionError(f"not reached in {timeout}s; VMs={[vm['name'] for vm in self.gcp.instances()]}")

    def phase(self, name: str) -> str:
        pod = self.api.get("pods", "default", name)
        return pod["status"].get("phase", "") if pod else ""


@contextmanager
def gke_cluster(tmp_path: Path, **config: Any) -> Iterator[GkeCluster]:
    with FakeGcp() as gcp, FakeApiServer(bookmark_interval=0.5) as api:
        document = gcp.config(
            template=gcp.add_node_pool("e2e", "tidal"),
            pendingPodReasonRegexp=KAI_REGEXP,
            instanceTypeRegexp="(n1|e2|g2)-.*",
            scanInterval="1s",
            batchIdleDuration="100ms",
            batchMaxDuration="1s",
            scaleDown={"nodeUnneededDuration": "1s"},
            newNodeGracePeriod="0s",
            leaderElection={"enabled": False},
            metricsAddress="127.0.0.1:0",
            logFormat="console",
            logLevel="warning",
            **config,
        )
        path = tmp_path / "config.yaml"
        path.write_text(yaml.safe_dump(document))
        client = make_api_client(host=api.url)
        provider = load_provider("gcp", load_config(path), kube_api_client=client.api_client)
        daemon = Daemon(str(path), client, provider, identity="tidal-0", metrics_address="127.0.0.1:0")
        daemon.start(serve=False, sync_timeout=20)
        try:
            yield GkeCluster(gcp, api, GkeKubelet(gcp, api), SchedulerStandIn(api), daemon)
        finally:
            daemon.stop()


def test_a_pending_gpu_pod_gets_a_gke_node_and_the_node_goes_away_when_the_pod_is_done(
    tmp_path: Path,
) -> None:
    with gke_cluster(tmp_path) as c:
        c.api.create(gpu_pod("infer-0"))
        c.run_until(lambda: c.phase("infer-0") == "Running")

        [vm] = c.gcp.instances()
        [node] = [node_from_dict(n) for n in c.api.list("nodes")]
        assert node.provider_id == f"gce://{c.gcp.project}/{vm['zone'].rsplit('/', 1)[-1]}/{vm['name']}"
        assert node.labels["tidal.dev/managed"] == "true" and node.gpus == 1
        assert vm["labels"]["tidal-cluster"] == "e2e" and vm["labels"]["tidal-managed"] == "true"
        if attachable_gpu_prices():  # the cheapest GPU that fits 1 CPU + 1 GPU is an N1 with a T4 attached
            assert node.labels["node.kubernetes.io/instance-type"] == "n1-standard-2_nvidia-tesla-t4x1"
            assert vm["guestAccelerators"][0]["acceleratorType"].endswith("/nvidia-tesla-t4")

        c.scheduler.finish("default", "infer-0")
        c.run_until(lambda: not c.api.list("nodes") and not c.gcp.instances(), timeout=30)
        assert "compute.instances.delete" in c.gcp.compute_server.methods()


def test_a_stockout_inside_the_operation_falls_back_to_the_next_offering_in_the_same_reconcile(
    tmp_path: Path,
) -> None:
    with gke_cluster(tmp_path) as c:
        c.daemon.reconcile()
        cheapest = min(
            (o for o in c.daemon.controller.catalog.offerings(time.time()) if o.gpu_count),
            key=lambda o: o.price,
        )
        c.gcp.stockout(machine_type=cheapest.instance_type.split("_")[0], zone=cheapest.zone)
        c.api.create(gpu_pod("infer-0"))
        c.scheduler.step()
        time.sleep(0.2)

        result = c.daemon.reconcile()

        launched = [o.instance for o in result.launched if o.instance is not None]
        assert result.plan is not None and result.plan.launch.launches
        assert len(launched) == 1
        assert (launched[0].instance_type, launched[0].zone) != (cheapest.instance_type, cheapest.zone)
        assert len(c.gcp.instances()) == 1


def test_a_gpu_quota_inside_the_operation_falls_back_to_another_gpu_type_in_the_same_reconcile(
    tmp_path: Path,
) -> None:
    """GCE refuses the insert with QUOTA_EXCEEDED for the cheapest GPU's metric (its quotaInfo in the
    operation): every machine type with that GPU is benched and the pod gets another GPU at once; before,
    the quota was folded into a stockout of that one offering, or only logged."""
    with gke_cluster(tmp_path) as c:
        c.daemon.reconcile()
        cheapest = min(
            (o for o in c.daemon.controller.catalog.offerings(time.time()) if o.gpu_count),
            key=lambda o: o.price,
        )
        metric = f"NVIDIA_{cheapest.gpu_model}_GPUS"
        machine, accelerator, _ = split_attached_name(cheapest.instance_type)
        if accelerator:  # an N1 with the GPU attached (when the shared GPU price file is there)
            c.gcp.quota(metric, accelerator=accelerator)
        else:
            c.gcp.quota(metric, machine_type=machine)
        c.api.create(gpu_pod("infer-0"))
        c.scheduler.step()
        time.sleep(0.2)

        result = c.daemon.reconcile()

        launched = [o.instance for o in result.launched if o.instance is not None]
        assert len(launched) == 1 and len(c.gcp.instances()) == 1
        by_type = {o.instance_type: o for o in c.daemon.controller.catalog.offerings(time.time())}
        assert by_type[launched[0].instance_type].gpu_model != cheapest.gpu_model
        # One insert of that GPU was refused; the other machine types with it were not even asked for, and
        # the quota's whole scope is benched for the next plans.
        refused = [op for op in c.gcp.compute.operations.values() if "error" in op.resource]
        assert len(refused) == 1
        benched = c.daemon.controller.availability.benched(time.time())
        assert [b for b in benched if b.startswith("quota ")] == [f"quota gpu/{metric}/us-central1"]


def test_a_preempted_spot_vm_is_replaced_and_its_workload_runs_again(tmp_path: Path) -> None:
    with gke_cluster(tmp_path, capacityTypes=["spot"]) as c:
        c.api.create(gpu_pod("train-0"))
        c.run_until(lambda: c.phase("train-0") == "Running")
        [preempted] = c.gcp.instances()
        assert preempted["scheduling"]["provisioningModel"] == "SPOT"

        c.gcp.preempt(preempted["name"])  # GCE deletes a preempted Spot VM (instanceTerminationAction DELETE)
        c.run_until(lambda: c.api.get("pods", "default", "train-0") is None)  # its Node and pod are gone
        c.api.create(gpu_pod("train-1"))  # the Job controller makes a new pod

        c.run_until(lambda: c.phase("train-1") == "Running")
        [replacement] = c.gcp.instances()
        assert replacement["name"] != preempted["name"]
        assert replacement["labels"]["tidal-launch-token"] != preempted["labels"]["tidal-launch-token"]
        [node] = [node_from_dict(n) for n in c.api.list("nodes")]
        assert node.name == replacement["name"]
        train = c.api.get("pods", "default", "train-1")
        assert train is not None
        assert train["spec"]["nodeName"] == replacement["name"]
