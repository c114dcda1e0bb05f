"""KAI Scheduler's GPU sharing as the emulated cluster performs it: shares of physical GPUs, held by reservation pods.

This is written from KAI's own rules, not from tidal's planner, so that a simulation can catch the planner
placing shares differently from the scheduler that really binds them (kai-scheduler/KAI-Scheduler:
``pkg/scheduler/api/node_info`` for the accounting, ``pkg/scheduler/gpu_sharing`` and the ``gpupack`` and
``gpusharingorder`` plugins for the choice of device, ``pkg/binder/binding/resourcereservation`` for the pods):

- A node's GPUs all have the memory GPU feature discovery labels it with (``nvidia.com/gpu.memory``, in MiB,
  floored to a multiple of 100); without the label KAI counts each device as 100 units.
- A ``gpu-fraction`` share takes ``int(portion x memory)`` of a device, a ``gpu-memory`` share its MiB; the
  shares on one device fit while they add up to at most its memory. Pods of different compute modes never
  share a device.
- A share goes to a device that already hosts shares when one has room (the fullest first: ``gpupack``; nodes
  with such a device first: ``gpusharingorder``), else to a whole free GPU of the node, which then becomes a
  new GPU group held by a reservation pod requesting one whole ``nvidia.com/gpu``.
- A share on N devices (``gpu-fraction-num-devices``) takes one slot on each of N different devices of a node.
- The binder labels a single-device pod ``runai-gpu-group: <group>`` and a multi-device pod
  ``runai-gpu-group/<group>: <group>`` per device; a group whose last pod has gone loses its reservation pod.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from autoscaler.core.gpu.kai_pods import GPU_GROUP_LABEL, RESERVATION_APP, RESERVATION_NAMESPACE
from autoscaler.core.gpu.share import ComputeMode, GpuShare
from autoscaler.core.model import Node, Pod, Toleration
from autoscaler.core.placement.scheduler import ClusterScheduler
from autoscaler.core.resources import NVIDIA_GPU, Resources

GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"
DEFAULT_DEVICE_MEMORY = 100  # KAI's stand-in for a node whose GPU memory is not labelled
MULTI_GROUP_PREFIX = GPU_GROUP_LABEL + "/"
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"


def device_memory(labels: Mapping[str, str]) -> int:
    """The memory KAI accounts one GPU of a node with: the GFD label floored to 100 MiB, else 100 units."""
    raw = labels.get(GPU_MEMORY_LABEL, "")
    if not raw.isdigit() or int(raw) < DEFAULT_DEVICE_MEMORY:
        return DEFAULT_DEVICE_MEMORY
    mib = int(raw)
    return mib - mib % 100


def units(share: GpuShare, memory: int) -> int | None:
    """What one device slot of ``share`` takes of a device of ``memory``; None when it can never fit there."""
    if share.memory_mib is not None:
        return share.memory_mib if share.memory_mib <= memory else None
    assert share.portion is not None
    return int(share.portion * memory)


def pod_groups(labels: Mapping[str, str]) -> tuple[str, ...]:
    """The GPU groups the binder labelled a pod with (one label, or one prefixed label per device)."""
    groups = {v for k, v in labels.items() if k.startswith(MULTI_GROUP_PREFIX) and v}
    if labels.get(GPU_GROUP_LABEL):
        groups.add(labels[GPU_GROUP_LABEL])
    return tuple(sorted(groups))


def without_groups(labels: Mapping[str, str]) -> dict[str, str]:
    """A pod's labels without the binder's GPU-group labels (for the pod that replaces an evicted one)."""
    return {k: v for k, v in labels.items() if k != GPU_GROUP_LABEL and not k.startswith(MULTI_GROUP_PREFIX)}


def group_labels(groups: Iterable[str], devices: int) -> dict[str, str]:
    """The labels the binder puts on a pod bound to ``groups``."""
    groups = list(groups)
    if devices == 1:
        return {GPU_GROUP_LABEL: groups[0]}
    return {MULTI_GROUP_PREFIX + g: g for g in groups}


@dataclass(slots=True)
class Device:
    """One shared GPU (a KAI GPU group) of a node."""

    group: str
    node: str
    memory: int
    mode: ComputeMode
    used: int = 0

    @property
    def free(self) -> int:
        return self.memory - self.used


@dataclass(frozen=True, slots=True)
class Choice:
    """Where one share pod goes on one node: existing groups, and how many whole GPUs become new groups."""

    node: str
    groups: tuple[str, ...]
    new: int
    need: int


@dataclass(slots=True)
class SharedGpus:
    """Every GPU group of the cluster and what its pods use of it, rebuilt from the bound pods."""

    devices: dict[str, Device] = field(default_factory=dict)
    by_node: dict[str, list[Device]] = field(default_factory=dict)
    _journal: list[tuple[str, int]] = field(default_factory=list)  # (group, units added) or (group, -1): new

    @classmethod
    def of(
        cls,
        reservations: Iterable[Pod],
        bound: Iterable[Pod],
        node_labels: Mapping[str, Mapping[str, str]],
    ) -> SharedGpus:
        """The groups KAI's reservation pods hold, used by the share pods bound to them."""
        book = cls()
        for r in reservations:
            labels = node_labels.get(r.node_name)
            group = r.labels.get(GPU_GROUP_LABEL, "")
            if labels is None or not group:
                continue
            book._add(Device(group, r.node_name, device_memory(labels), ComputeMode.TIME_SLICING))
        for p in bound:
            share = p.gpu_share
            if share is None:
                continue
            for group in pod_groups(p.labels):
                d = book.devices.get(group)
                if d is None:
                    continue
                d.used += units(share, d.memory) or d.memory
                d.mode = share.compute_mode
        return book

    def _add(self, device: Device) -> None:
        self.devices[device.group] = device
        self.by_node.setdefault(device.node, []).append(device)

    def nodes_with_room(self, share: GpuShare) -> list[str]:
        """Nodes with a shared device this share fits on, the fullest such device first (KAI prefers them)."""
        best: dict[str, int] = {}
        for d in self.devices.values():
            need = units(share, d.memory)
            if d.mode != share.compute_mode or need is None or need > d.free:
                continue
            if d.node not in best or d.free < best[d.node]:
                best[d.node] = d.free
        return sorted(best, key=lambda n: (best[n], n))

    def choose(self, node: str, share: GpuShare, labels: Mapping[str, str], whole_free: int) -> Choice | None:
        """The devices of ``node`` one pod of ``share`` would take, or None when it does not fit there."""
        memory = device_memory(labels)
        need = units(share, memory)
        if need is None:
            return None
        fitting = [
            d
            for d in self.by_node.get(node, ())
            if d.mode == share.compute_mode and units(share, d.memory) is not None and d.free >= need
        ]
        fitting.sort(key=lambda d: (d.free, d.group))  # the fullest first, as gpupack orders them
        picked = tuple(d.group for d in fitting[: share.devices])
        new = share.devices - len(picked)
        if new > whole_free:
            return None
        return Choice(node, picked, new, need)

    def take(self, choice: Choice, mode: ComputeMode, memory: int, new_groups: Iterable[str]) -> None:
        """Commit a choice; ``new_groups`` names the groups opened on whole GPUs."""
        for group in choice.groups:
            self.devices[group].used += choice.need
            self._journal.append((group, choice.need))
        for group in new_groups:
            self._add(Device(group, choice.node, memory, mode, choice.need))
            self._journal.append((group, -1))

    def mark(self) -> int:
        return len(self._journal)

    def rollback(self, mark: int) -> None:
        """Undo every ``take`` since ``mark`` (a gang that did not fit whole)."""
        while len(self._journal) > mark:
            group, added = self._journal.pop()
            d = self.devices[group]
            if added < 0:
                del self.devices[group]
                self.by_node[d.node].remove(d)
            else:
                d.used -= added


def reservation_pod(group: str, node: str, tolerations: tuple[Toleration, ...], now: float) -> Pod:
    """The pod KAI's binder binds straight to ``node`` to hold one whole GPU for the shares of ``group``."""
    return Pod(
        namespace=RESERVATION_NAMESPACE,
        name=f"gpu-reservation-{node}-{group}",
        uid=f"gpu-reservation-{group}",
        created=now,
        labels={"app": RESERVATION_APP, GPU_GROUP_LABEL: group},
        annotations={DO_NOT_DISRUPT: "true"},
        node_name=node,
        phase="Running",
        requests=Resources({NVIDIA_GPU: 1000}),
        tolerations=tolerations,
    )


class KaiSharing:
    """KAI's scheduler and binder for share pods: the GPU groups of the cluster and their reservation pods.

    ``start`` reads the groups from the pods bound at the beginning of a scheduling pass; ``place`` puts one
    share pod; a gang's pods are placed between ``mark`` and ``commit`` (or ``rollback``, when it does not
    land whole); ``release`` deletes the reservation pods of groups whose last pod has gone.
    """

    def __init__(self) -> None:
        self.reservations: dict[str, Pod] = {}
        self.gpus = SharedGpus()
        self._held: list[Pod] = []  # reservation pods of the unit being placed, kept once it lands whole
        self._groups = 0

    def start(self, bound: Iterable[Pod], nodes: Mapping[str, Node]) -> None:
        """Read the groups at the start of a pass: without a reservation pod there is none, whatever is
        bound, and neither the pods nor the nodes are looked at."""
        if not self.reservations:
            self.gpus = SharedGpus()
            return
        self.gpus = SharedGpus.of(
            self.reservations.values(), bound, {n: node.labels for n, node in nodes.items()}
        )

    def mark(self) -> tuple[int, int]:
        return self.gpus.mark(), len(self._held)

    def rollback(self, mark: tuple[int, int]) -> None:
        self.gpus.rollback(mark[0])
        del self._held[mark[1] :]

    def commit(self, mark: tuple[int, int]) -> None:
        for r in self._held[mark[1] :]:
            self.reservations[r.key] = r
        del self._held[mark[1] :]

    def place(
        self,
        pod: Pod,
        order: Sequence[Node],
        nodes: Mapping[str, Node],
        sched: ClusterScheduler,
        now: float,
    ) -> tuple[str, dict[str, str], float] | None:
        """KAI's place for a share pod: a node whose kube filters pass (CPU, memory, taints, affinity) with
        a device the share fits on, nodes with a partly used device first, then the others in ``order``.
        Returns the node, the GPU-group labels the binder gives the pod, and the part of a device it got."""
        share = pod.gpu_share
        assert share is not None
        plain = replace(pod, gpu_share=None)  # what the kube filters see: CPU and memory, no GPU request
        candidates = [*self.gpus.nodes_with_room(share), *(n.name for n in order if n.allocatable.gpus)]
        tried: set[str] = set()
        for name in candidates:
            if name in tried or name not in sched.bins:
                continue
            tried.add(name)
            labels = nodes[name].labels
            whole = sched.bins[name].free.get(NVIDIA_GPU, 0) // 1000
            choice = self.gpus.choose(name, share, labels, whole)
            if choice is None or sched.rejection(plain, name) is not None:
                continue
            opened = []
            for _ in range(choice.new):
                self._groups += 1
                opened.append(f"g{self._groups:05d}")
            memory = device_memory(labels)
            self.gpus.take(choice, share.compute_mode, memory, opened)
            sched.bind(plain, name)
            for group in opened:
                r = reservation_pod(group, name, pod.tolerations, now)
                sched.bind(r, name)
                self._held.append(r)
            return name, group_labels((*choice.groups, *opened), share.devices), choice.need / memory
        return None

    def release(self, live: set[str], nodes: Mapping[str, Node]) -> bool:
        """Delete the reservation pods of groups not in ``live`` or on nodes that are gone; whether any went."""
        gone = [
            key
            for key, r in self.reservations.items()
            if r.node_name not in nodes or r.labels.get(GPU_GROUP_LABEL) not in live
        ]
        for key in gone:
            del self.reservations[key]
        return bool(gone)
