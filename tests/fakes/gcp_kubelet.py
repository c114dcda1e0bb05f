"""A stand-in for the kubelets (and GKE's cloud controller manager) of VMs in the fake GCE project.

For every RUNNING VM labelled ``tidal-cluster`` it registers a Node the way a GKE node does: name = VM
name, ``spec.providerID = gce://project/zone/name``, labels and taints from the ``--node-labels`` and
``--register-with-taints`` of the VM's kube-env ``KUBELET_ARGS`` (what the real kubelet reads), the
well-known labels the cloud controller manager sets (``node.kubernetes.io/instance-type`` = the machine
type), capacity from the machine type and its GPUs, Ready. The GPUs appear in allocatable after
``gpu_delay`` (the device plugin), and a Node whose VM is gone is deleted (the cloud node lifecycle
controller does that in GKE) together with the pods bound to it (the pod garbage collector).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from autoscaler.core.allocatable import node_allocatable
from autoscaler.core.model import SPOT, Arch, Taint
from autoscaler.core.offering import Offering
from providers.simulated.node import gpu_status, node_manifest
from tests.fakes.gcp_cloud import FakeGcp
from tests.fakes.gcp_rules import last
from tests.fakes.kube_apiserver import FakeApiServer


def _kubelet_args(vm: dict[str, Any]) -> tuple[dict[str, str], tuple[Taint, ...]]:
    items = {i["key"]: i["value"] for i in (vm.get("metadata") or {}).get("items", [])}
    args = next(
        (
            line.split(":", 1)[1]
            for line in items.get("kube-env", "").splitlines()
            if line.startswith("KUBELET_ARGS:")
        ),
        "",
    )
    labels: dict[str, str] = {}
    taints: list[Taint] = []
    for token in args.split():
        if token.startswith("--node-labels="):
            for part in token.partition("=")[2].split(","):
                k, _, v = part.partition("=")
                labels[k] = v
        elif token.startswith("--register-with-taints="):
            for part in token.partition("=")[2].split(","):
                kv, _, effect = part.rpartition(":")
                k, _, v = kv.partition("=")
                taints.append(Taint(k, v, effect))
    return labels, tuple(taints)


class GkeKubelet:
    """Registers, readies and removes Nodes for the fake project's tidal VMs; ``step()`` or ``start()``."""

    def __init__(
        self, gcp: FakeGcp, api: FakeApiServer, *, cluster: str = "e2e", gpu_delay: float = 0.2
    ) -> None:
        self.gcp, self.api, self.cluster, self.gpu_delay = gcp, api, cluster, gpu_delay
        self.registered: dict[str, tuple[float, Offering]] = {}
        self.gpus_ready: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _shape(self, vm: dict[str, Any], zone: str) -> Offering:
        machine = last(vm["machineType"])
        mt = next(m for m in self.gcp.compute.machine_types[zone] if m["name"] == machine)
        gpus = sum(int(a["acceleratorCount"]) for a in vm.get("guestAccelerators") or [])
        return Offering(
            instance_type=machine,
            zone=zone,
            capacity_type=SPOT,
            vcpu=mt["guestCpus"],
            memory_mib=mt["memoryMb"],
            price=0.0,
            gpu_count=gpus,
            gpu_vendor="NVIDIA" if gpus else "",
            arch=Arch.ARM64 if mt["architecture"] == "ARM64" else Arch.AMD64,
        )

    def step(self) -> None:
        """Register new VMs' Nodes, report GPUs that are due, delete Nodes whose VM is gone."""
        now = time.time()
        running = {
            vm["name"]: vm
            for vm in self.gcp.instances()
            if (vm.get("labels") or {}).get("tidal-cluster") == self.cluster and vm["status"] == "RUNNING"
        }
        for name, vm in running.items():
            if name in self.registered:
                continue
            zone = last(vm["zone"])
            shape = self._shape(vm, zone)
            labels, taints = _kubelet_args(vm)
            self.api.create(
                node_manifest(
                    name=name,
                    provider_id=f"gce://{self.gcp.project}/{zone}/{name}",
                    instance_type=shape.instance_type,
                    zone=zone,
                    region=zone.rsplit("-", 1)[0],
                    arch=shape.arch.value,
                    labels=labels,
                    taints=taints,
                    capacity=shape.capacity(),
                    allocatable=node_allocatable(shape),
                    now=now,
                )
            )
            self.registered[name] = (now, shape)
        for name, (since, shape) in self.registered.items():
            if (
                shape.gpu_count
                and name not in self.gpus_ready
                and now - since >= self.gpu_delay
                and name in running
            ):
                self.api.patch_status(
                    "nodes", None, name, gpu_status(shape.capacity(), node_allocatable(shape))
                )
                self.gpus_ready.add(name)
        live = {vm["name"] for vm in self.gcp.instances()}
        for node in self.api.list("nodes"):
            name = node["metadata"]["name"]
            if name in self.registered and name not in live:
                self.api.delete("nodes", None, name)
                for pod in self.api.list("pods"):
                    if pod["spec"].get("nodeName") == name:
                        self.api.delete("pods", pod["metadata"]["namespace"], pod["metadata"]["name"])

    def start(self, interval: float = 0.1) -> None:
        """Run :meth:`step` every ``interval`` seconds in a thread."""
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, args=(interval,), daemon=True, name="gke-kubelet")
        self._thread.start()

    def _run(self, interval: float) -> None:
        while not self._stop.wait(interval):
            self.step()

    def stop(self) -> None:
        """Stop the thread started by :meth:`start`."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
