"""The daemon end to end with ``cloud: azure``: fake API server, scheduler stand-in, fake ARM, AKS kubelets.

The provider is found through the ``tidal.providers`` entry point and talks to the fake ARM through the
unmodified Azure SDK; only the endpoint, the credential and the TLS trust differ from production.
"""

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
from tests.e2e.harness import base_config, gpu_pod
from tests.fakes.azure_arm import FakeArm
from tests.fakes.azure_auth import FakeCredential
from tests.fakes.azure_kubelet import AzureKubelet
from tests.fakes.azure_model import ArmError
from tests.fakes.azure_setup import (
    A100,
    POOL_CPU,
    POOL_T4,
    POOL_T4_BIG,
    POOL_T4_SPOT,
    T4,
    T4_BIG,
    azure_section,
    seed_node_pools,
)
from tests.fakes.kube_apiserver import FakeApiServer
from tests.fakes.scheduler import SchedulerStandIn

if TYPE_CHECKING:
    from typing import Any

pytestmark = pytest.mark.slow


@dataclass
class AksCluster:
    api: FakeApiServer
    arm: FakeArm
    kubelet: AzureKubelet
    scheduler: SchedulerStandIn
    daemon: Daemon

    def step(self) -> None:
        """One round: kubelets join, the scheduler binds, tidal reconciles."""
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
        raise AssertionError(
            f"not reached in {timeout}s; nodes={[n['metadata']['name'] for n in self.nodes()]}"
        )

    def nodes(self) -> list[dict[str, Any]]:
        return self.api.list("nodes")

    def running(self) -> int:
        return sum(1 for p in self.api.list("pods") if p["status"].get("phase") == "Running")


@contextmanager
def aks_cluster(tmp_path: Path, **overrides: object) -> Iterator[AksCluster]:
    with FakeArm(tmp_path / "tls") as arm, FakeApiServer(bookmark_interval=0.5) as api:
        seed_node_pools(arm)
        path = tmp_path / "config.yaml"
        config = base_config(
            cloud="azure",
            region="eastus",
            zones=[],
            instanceTypeRegexp="Standard_.*",
            azure=azure_section(arm),
            **overrides,
        )
        path.write_text(yaml.safe_dump(config))
        cfg = load_config(path)
        client = make_api_client(host=api.url)
        provider = load_provider(
            cfg.cloud,
            cfg,
            kube_api_client=client.api_client,
            credential=FakeCredential(),
            connection_verify=str(arm.cert),
            polling_interval=0,
        )
        daemon = Daemon(str(path), client, provider, identity="tidal-0", metrics_address="127.0.0.1:0")
        daemon.start(serve=False, sync_timeout=20)
        kubelet = AzureKubelet(arm, make_api_client(host=api.url).api_client, api=api)
        try:
            yield AksCluster(api, arm, kubelet, SchedulerStandIn(api), daemon)
        finally:
            daemon.stop()


def test_a_pending_gpu_pod_gets_an_aks_node_that_is_removed_and_deleted_after_the_pod_finishes(
    tmp_path: Path,
) -> None:
    with aks_cluster(tmp_path) as c:
        c.kubelet.step()  # the CPU pool's two nodes were there before tidal
        c.api.create(gpu_pod("infer-0"))
        c.run_until(lambda: c.running() == 1)
        pool = c.arm.state.scale_sets[POOL_T4]
        assert (pool.capacity, sorted(pool.vms)) == (1, ["0"])
        [gpu_node] = [node_from_dict(n) for n in c.nodes() if n["metadata"]["name"].startswith(POOL_T4)]
        assert gpu_node.provider_id.endswith(f"/virtualMachineScaleSets/{POOL_T4}/virtualMachines/0")
        assert gpu_node.labels["node.kubernetes.io/instance-type"] == T4
        assert gpu_node.labels["tidal.dev/managed"] == "true"  # tidal labels the node it asked for
        pod = next(p for p in c.api.list("pods") if p["metadata"]["name"] == "infer-0")
        assert pod["spec"]["nodeName"] == gpu_node.name

        c.scheduler.finish("default", "infer-0")
        c.run_until(
            lambda: not pool.vms and all(not n["metadata"]["name"].startswith(POOL_T4) for n in c.nodes())
        )
        deletes = c.arm.calls("POST", f"{POOL_T4}/delete")
        assert len(deletes) == 1 and pool.capacity == 0
        assert sorted(c.arm.state.scale_sets[POOL_CPU].vms) == ["0", "1"]  # not tidal's: untouched
        assert len([n for n in c.nodes() if n["metadata"]["name"].startswith(POOL_CPU)]) == 2


def test_an_allocation_failure_on_the_cheapest_pool_falls_back_within_the_same_reconcile(
    tmp_path: Path,
) -> None:
    with aks_cluster(tmp_path) as c:
        c.daemon.reconcile()  # offerings cached while the cheapest pool still looks fine
        c.arm.state.fail_allocation(T4)
        c.api.create(gpu_pod("infer-0"))
        c.scheduler.step()
        time.sleep(0.2)
        result = c.daemon.reconcile()
        assert result.plan is not None
        assert result.plan.launch.launches[0].offering.instance_type == T4
        assert [o.instance.instance_type for o in result.launched if o.instance is not None] == [T4_BIG]
        assert c.arm.state.scale_sets[POOL_T4].vms == {}
        c.run_until(lambda: c.running() == 1)
        assert sorted(c.arm.state.scale_sets[POOL_T4_BIG].vms) == ["0"]


def test_a_family_cores_quota_on_the_cheapest_pool_falls_back_to_another_family_in_the_same_reconcile(
    tmp_path: Path,
) -> None:
    """ARM refuses the scale-out with OperationNotAllowed for the T4 family's cores quota: the family's other
    pool is not asked (the quota covers it), the pod gets the next family at once, and the family stays
    benched for the next plans."""
    with aks_cluster(tmp_path) as c:
        c.daemon.reconcile()
        quota = ArmError(
            409,
            "OperationNotAllowed",
            "Operation could not be completed as it results in exceeding approved standardNCASv3_T4Family Cores "
            "quota. Additional details - Deployment Model: Resource Manager, Location: eastus, Current Limit: "
            "0, Current Usage: 0, Additional Required: 4, (Minimum) New Limit Required: 4.",
        )
        c.arm.fail_request("PATCH", POOL_T4, quota)
        c.api.create(gpu_pod("infer-0"))
        c.scheduler.step()
        time.sleep(0.2)

        result = c.daemon.reconcile()

        # The A100 ($3.673/h) is no fallback of the T4 launch (maxFallbackPriceRatio 2.0): the plan made again
        # after the refusal, in the same reconcile, launches it.
        assert [o.launch.offering.instance_type for o in result.launched] == [T4, A100]
        assert [o.instance.instance_type for o in result.launched if o.instance is not None] == [A100]
        assert c.arm.calls("PATCH", POOL_T4_BIG) == []  # in the quota's family: not asked
        benched = c.daemon.controller.availability.benched(time.time())
        assert "quota family/standardNCASv3_T4Family/eastus/on-demand" in benched


def spot_tolerant(pod: dict[str, Any]) -> dict[str, Any]:
    """A pod that may run on AKS Spot nodes (AKS taints them kubernetes.azure.com/scalesetpriority=spot)."""
    pod["spec"]["tolerations"] = [
        *pod["spec"].get("tolerations", []),
        {"key": "kubernetes.azure.com/scalesetpriority", "operator": "Equal", "value": "spot"},
    ]
    return pod


def test_an_evicted_spot_node_is_replaced_and_its_workload_runs_again(tmp_path: Path) -> None:
    with aks_cluster(tmp_path, capacityTypes=["spot", "on-demand"]) as c:
        c.kubelet.step()
        c.api.create(spot_tolerant(gpu_pod("train-0")))
        c.run_until(lambda: c.running() == 1)
        spot_pool = c.arm.state.scale_sets[POOL_T4_SPOT]
        assert sorted(spot_pool.vms) == ["0"]  # the cheapest: a Spot T4

        c.arm.state.evict(POOL_T4_SPOT, "0")  # evictionPolicy Delete: the VM and its capacity go
        c.run_until(lambda: c.api.get("pods", "default", "train-0") is None)  # Node removed, pod collected
        c.api.create(spot_tolerant(gpu_pod("train-1")))  # the Job controller makes a new pod

        c.run_until(lambda: c.running() == 1)
        pod = c.api.get("pods", "default", "train-1")
        assert pod is not None
        [node] = [n for n in c.nodes() if n["metadata"]["name"] == pod["spec"]["nodeName"]]
        evicted = f"{POOL_T4_SPOT}/virtualMachines/0"
        assert not node["spec"]["providerID"].endswith(evicted)  # new capacity, not the evicted VM
        assert sorted(spot_pool.vms) in ([], ["1"])  # instance ids only grow: "0" is gone for good
        assert len(c.nodes()) == 3  # the CPU pool's two nodes and the replacement; the evicted one went


def test_an_allocation_failure_reported_after_the_grace_moves_the_pod_to_the_next_pool(
    tmp_path: Path,
) -> None:
    with aks_cluster(tmp_path) as c:
        c.daemon.reconcile()
        c.arm.state.hold_operations = True
        c.arm.state.fail_allocation(T4)
        c.api.create(gpu_pod("infer-0"))
        c.scheduler.step()
        time.sleep(0.2)

        started = time.monotonic()
        result = c.daemon.reconcile()
        # The launch waited out operationWait (2s by default) for the held operation, then answered pending.
        assert 2.0 <= time.monotonic() - started < 20
        [pending] = [o.instance for o in result.launched if o.instance is not None]
        assert (pending.instance_type, pending.state) == (T4, "pending")

        c.arm.state.release()  # Azure reports AllocationFailed now
        c.run_until(lambda: c.running() == 1)
        assert sorted(c.arm.state.scale_sets[POOL_T4_BIG].vms) == ["0"]
        c.run_until(lambda: c.arm.state.scale_sets[POOL_T4].vms == {})  # the failed instance is deleted
