"""The daemon end to end with ``cloud: aws``: EKS nodes from a moto EC2, joined to the fake API server.

A pending GPU pod makes tidal launch an instance with EC2 Fleet; the kubelet stand-in boots it as EKS would
(reading its user data for labels and taints) and registers the Node; the scheduler stand-in binds the pod;
once the pod has finished the node is removed and the instance terminated.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import yaml

from autoscaler.config.options import load_config
from autoscaler.runtime.daemon import Daemon
from autoscaler.runtime.kube.client import make_api_client
from autoscaler.runtime.kube.convert import node_from_dict
from providers.aws import AwsProvider
from tests.e2e.harness import base_config, gpu_pod
from tests.fakes.aws_cloud import (
    CATALOG,
    aws_section,
    ec2_client,
    make_network,
    make_provider,
    moto_server_url,
    pricing_denied,
    reset_moto_server,
)
from tests.fakes.aws_kubelet import AwsKubelet
from tests.fakes.kube_apiserver import FakeApiServer
from tests.fakes.scheduler import SchedulerStandIn

if TYPE_CHECKING:
    from typing import Any

pytestmark = pytest.mark.slow


@dataclass
class EksCluster:
    api: FakeApiServer
    scheduler: SchedulerStandIn
    kubelet: AwsKubelet
    provider: AwsProvider
    daemon: Daemon
    ec2: object

    def step(self) -> None:
        """One round: instances boot and join, the scheduler binds, tidal reconciles."""
        self.kubelet.step()
        self.scheduler.step()
        time.sleep(0.05)  # let the informers see the writes
        self.daemon.reconcile()

    def run_until(self, done: Callable[[], bool], timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.step()
            if done():
                return
            time.sleep(0.1)
        raise AssertionError(f"not reached in {timeout}s; instances={self.provider.instances()}")

    def running_pods(self) -> int:
        return sum(1 for p in self.api.list("pods") if p["status"].get("phase") == "Running")

    def live_instances(self) -> list[Any]:
        return [i for i in self.provider.instances() if i.state != "terminated"]


@pytest.fixture
def eks(tmp_path: Path) -> Iterator[EksCluster]:
    server = moto_server_url()
    reset_moto_server(server)
    ec2 = ec2_client(server)
    network = make_network(ec2, zones=("us-east-1a",))
    api = FakeApiServer(bookmark_interval=0.5)
    api.start()
    path = tmp_path / "config.yaml"
    section = aws_section(network, endpointUrl=server, families=["g4dn", "g5"], catalogFallback=str(CATALOG))
    path.write_text(yaml.safe_dump(base_config(cloud="aws", aws=section)))
    provider = make_provider(load_config(path), pricing_denied(), endpoint_url=server, clock=time.time)
    daemon = Daemon(
        str(path), make_api_client(host=api.url), provider, identity="tidal-0", metrics_address="127.0.0.1:0"
    )
    try:
        daemon.start(serve=False, sync_timeout=20)
        kubelet = AwsKubelet(ec2, make_api_client(host=api.url).api_client, cluster="e2e")
        yield EksCluster(api, SchedulerStandIn(api), kubelet, provider, daemon, ec2)
    finally:
        daemon.stop()
        api.stop()


def test_a_gpu_pod_gets_an_eks_node_that_is_removed_once_the_pod_has_finished(eks: EksCluster) -> None:
    eks.api.create(gpu_pod("infer-0"))
    eks.run_until(lambda: eks.running_pods() == 1)

    [instance] = eks.live_instances()
    [node] = [node_from_dict(n) for n in eks.api.list("nodes")]
    assert (instance.instance_type, instance.zone, instance.capacity_type) == (
        "g4dn.xlarge",
        "us-east-1a",
        "on-demand",
    )
    assert node.provider_id == f"aws:///us-east-1a/{instance.id}"
    assert node.name.endswith(".ec2.internal")
    assert node.allocatable.gpus == 1
    assert node.labels["tidal.dev/managed"] == "true"  # from the user data: the kubelet registered with it
    assert node.labels["tidal.dev/cluster"] == "e2e"
    assert node.labels["node.kubernetes.io/instance-type"] == "g4dn.xlarge"
    [bound] = [p for p in eks.api.list("pods") if p["metadata"]["name"] == "infer-0"]
    assert bound["spec"]["nodeName"] == node.name
    eks.run_until(
        lambda: node_from_dict(eks.api.list("nodes")[0]).labels.get("tidal.dev/capacity-type") == "on-demand"
    )

    eks.scheduler.finish("default", "infer-0")
    eks.run_until(lambda: not eks.api.list("nodes") and not eks.live_instances())
    [ended] = eks.provider.instances()
    assert (ended.id, ended.state) == (instance.id, "terminated")
