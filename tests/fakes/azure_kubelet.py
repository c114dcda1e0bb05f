"""Kubelet stand-in for the fake ARM: a Node in the fake API server for every running VM, as on AKS.

Each VM of the fake's scale sets that is provisioned and running joins the cluster the way an AKS node
does: named after its computer name, with AKS's providerID (resource group in lower case), AKS's labels
(agent pool, instance type, zone, Spot priority and its taint, ``accelerator: nvidia``), allocatable after
AKS's reservations, Ready, and its GPUs reported by the device plugin. A VM that disappears (deleted or
evicted) leaves its Node NotReady, as the node lifecycle controller would; pods bound to a Node that no
longer exists are deleted, as the pod garbage collector does.
"""

from __future__ import annotations

import time
from typing import Any

from autoscaler.core.allocatable import node_allocatable
from autoscaler.core.model import ON_DEMAND, SPOT, Taint
from autoscaler.core.offering import Offering
from providers.simulated.node import NodeRegistrar, gpu_status, node_manifest
from tests.fakes.azure_arm import FakeArm
from tests.fakes.azure_catalog import SIZES_BY_NAME
from tests.fakes.azure_model import FakeScaleSet, FakeVM

SPOT_TAINT = Taint("kubernetes.azure.com/scalesetpriority", "spot", "NoSchedule")


def provider_id(arm: FakeArm, vm: FakeVM) -> str:
    """The providerID AKS writes for a VM of a Uniform or a Flexible scale set."""
    base = (
        f"azure:///subscriptions/{arm.subscription}/resourceGroups/{arm.resource_group.lower()}"
        "/providers/Microsoft.Compute"
    )
    if vm.instance_id:
        return f"{base}/virtualMachineScaleSets/{vm.scale_set}/virtualMachines/{vm.instance_id}"
    return f"{base}/virtualMachines/{vm.name}"


def _offering(vm: FakeVM, region: str) -> Offering:
    size = SIZES_BY_NAME[vm.size]
    return Offering(
        instance_type=vm.size,
        zone=f"{region}-{vm.zone}" if vm.zone else "",
        capacity_type=SPOT if vm.priority == "Spot" else ON_DEMAND,
        vcpu=size.vcpus,
        memory_mib=int(size.memory_gb * 1024),
        price=0.0,
        gpu_count=size.gpus,
        gpu_vendor="NVIDIA" if size.gpus else "",
    )


class AzureKubelet:
    """Registers and fails Nodes for the fake ARM's VMs; call :meth:`step` to move on."""

    def __init__(self, arm: FakeArm, api_client: Any, *, region: str = "eastus", api: Any = None) -> None:
        self.arm = arm
        self.api = api  # the fake API server, for the pod garbage collector (None: no collection)
        self.region = region
        self.registrar = NodeRegistrar(api_client)
        self.nodes: dict[str, str] = {}  # providerID -> Node name, for every Node ever registered
        self.down: set[str] = set()

    def _running(self) -> list[tuple[FakeScaleSet, FakeVM]]:
        state = self.arm.state
        with state.lock:
            found = [(ss, vm) for ss in state.scale_sets.values() for vm in ss.vms.values()]
            found += [(state.scale_sets[vm.scale_set], vm) for vm in state.vms.values()]
            return [(ss, vm) for ss, vm in found if vm.provisioning == "Succeeded" and vm.power == "running"]

    def step(self) -> None:
        """Register Nodes for newly running VMs; mark Nodes of vanished VMs NotReady."""
        now = time.time()
        running = self._running()
        for ss, vm in running:
            pid = provider_id(self.arm, vm)
            if pid in self.nodes:
                continue  # a kubelet registers once; a deleted Node stays deleted while its VM goes
            self.register(ss, vm, pid, now)
        alive = {provider_id(self.arm, vm) for _, vm in running}
        for pid, name in self.nodes.items():
            if pid not in alive and pid not in self.down:
                self.registrar.mark_unreachable(name, now)
                self.down.add(pid)
        if self.api is not None:
            nodes = {n["metadata"]["name"] for n in self.api.list("nodes")}
            for pod in self.api.list("pods"):
                bound = pod["spec"].get("nodeName")
                if bound and bound in self.nodes.values() and bound not in nodes:
                    self.api.delete("pods", pod["metadata"]["namespace"], pod["metadata"]["name"])

    def register(self, ss: FakeScaleSet, vm: FakeVM, pid: str, now: float) -> None:
        offering = _offering(vm, self.region)
        spot = vm.priority == "Spot"
        labels = {
            "kubernetes.azure.com/agentpool": ss.tags.get("aks-managed-poolName", ss.name),
            "kubernetes.azure.com/cluster": self.arm.resource_group,
            "node.kubernetes.io/instance-type": vm.size,
        }
        if spot:
            labels["kubernetes.azure.com/scalesetpriority"] = "spot"
        if offering.gpu_count:
            labels["accelerator"] = "nvidia"
        capacity = offering.capacity()
        allocatable = node_allocatable(offering)
        manifest = node_manifest(
            name=vm.computer_name,
            provider_id=pid,
            instance_type=vm.size,
            zone=offering.zone or "0",
            region=self.region,
            arch="amd64",
            labels=labels,
            taints=(SPOT_TAINT,) if spot else (),
            capacity=capacity,
            allocatable=allocatable,
            now=now,
        )
        self.registrar.create(manifest)
        if offering.gpu_count:
            self.registrar.patch_status(vm.computer_name, gpu_status(capacity, allocatable))
        self.nodes[pid] = vm.computer_name
