"""KAI's node-scale-adjuster, which the baselines need to see GPU-sharing pods at all.

A pod that asks KAI for part of a GPU requests no ``nvidia.com/gpu``: cluster-autoscaler and Karpenter see a
CPU pod. KAI's answer (kai-scheduler/KAI-Scheduler ``pkg/nodescaleadjuster``, installed with
``global.clusterAutoscaling=true``) is a controller that turns unschedulable sharing pods into "scaling pods"
of whole GPUs, which those autoscalers do see. What it does on every pod event, as modelled here:

1. It deletes the scaling pods no longer needed: those that ran (their image exits at once, so a scaling pod
   that was scheduled has Succeeded) and those whose sharing pod is gone or no longer unschedulable. A
   deletion starts a cool-down of 60 s in which no scaling pod is created.
2. It sums the shares of the unschedulable sharing pods of KAI's scheduler, each rounded to hundredths of a
   GPU and multiplied by its number of devices (a ``gpu-memory`` pod counts 0.1 GPU, its
   ``--gpu-memory-to-fraction-ratio``), and rounds the sum up: the GPUs needed for the whole batch.
3. Going through those pods in order, it creates a scaling pod for a pod that has none while the scaling pods
   ask for fewer GPUs than needed (or the pod needs more devices than any scaling pod asks for). A scaling pod
   is named ``<namespace>-<name>`` of its pod, lives in ``kai-scale-adjust`` with the labels ``app:
   scaling-pod``, ``shared-gpu-pod-name`` and ``shared-gpu-pod-namespace``, requests as many whole GPUs as
   its pod has devices plus the CPU and memory of its pod's containers, and copies its node selector,
   affinity and tolerations. The default scheduler places it.

So two pending 0.5 pods make one scaling pod of one GPU; if the node bought for it holds only one of them
(its CPU or memory, sized for one pod, runs out), the other gets a scaling pod after the cool-down.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, MutableMapping, Sequence
from dataclasses import replace

from autoscaler.core.gpu.kai_pods import (
    SCALE_ADJUST_NAMESPACE,
    SCALING_POD_APP,
    SHARED_POD_NAME_LABEL,
    SHARED_POD_NAMESPACE_LABEL,
    scaled_pod,
)
from autoscaler.core.gpu.share import GpuShare
from autoscaler.core.model import Condition, Node, Pod
from autoscaler.core.placement.scheduler import ClusterScheduler
from autoscaler.core.resources import NVIDIA_GPU, Resources

COOL_DOWN = 60.0  # seconds after deleting a scaling pod before the next is created (DefaultCoolDownSeconds)
MEMORY_AS_GPUS = 0.1  # what a gpu-memory pod counts as (DefaultGPUMemoryToFractionRatio)
KAI_SCHEDULER = "kai-scheduler"
UNSCHEDULABLE = "Unschedulable"


def batch_gpus(shares: Iterable[GpuShare]) -> int:
    """Whole GPUs the adjuster asks for a batch of pending shares: the sum of the shares in hundredths of a
    GPU (each times its devices; a memory share as 0.1), rounded up."""
    hundredths = 0
    for share in shares:
        portion = share.portion if share.portion is not None else MEMORY_AS_GPUS
        hundredths += math.floor(portion * 100 + 0.5) * share.devices  # Go's math.Round for positive values
    return math.ceil(hundredths / 100)


def _unschedulable(pod: Pod) -> bool:
    cond = pod.scheduled
    return cond is not None and cond.status == "False" and cond.reason == UNSCHEDULABLE


def scaling_pod(pod: Pod, now: float) -> Pod:
    """The scaling pod that stands for ``pod``: its whole GPUs, its CPU and memory, its node constraints."""
    assert pod.gpu_share is not None
    requests = {
        "cpu": pod.requests.cpu,
        "memory": pod.requests.memory,
        NVIDIA_GPU: pod.gpu_share.devices * 1000,
    }
    return Pod(
        namespace=SCALE_ADJUST_NAMESPACE,
        name=f"{pod.namespace}-{pod.name}",
        uid=f"scaling-{pod.namespace}-{pod.name}",
        created=now,
        labels={
            "app": SCALING_POD_APP,
            SHARED_POD_NAME_LABEL: pod.name,
            SHARED_POD_NAMESPACE_LABEL: pod.namespace,
        },
        requests=Resources(requests),
        node_selector=pod.node_selector,
        affinity=pod.affinity,
        tolerations=pod.tolerations,
        pod_affinity=pod.pod_affinity,
        pod_anti_affinity=pod.pod_anti_affinity,
        # The adjuster marks it unschedulable when it creates it, so that autoscalers act on it at once.
        scheduled=Condition("False", UNSCHEDULABLE, "created by the node-scale-adjuster", now),
    )


class ScaleAdjuster:
    """KAI's node-scale-adjuster over the emulated cluster's pods and scaling pods."""

    def __init__(self, cool_down: float = COOL_DOWN) -> None:
        self.cool_down = cool_down
        self.last_deletion: float | None = None
        self.created = 0  # scaling pods created over the run

    def cooling(self, now: float) -> bool:
        return self.last_deletion is not None and now - self.last_deletion < self.cool_down

    def wakeup(self, now: float) -> float | None:
        """When the cool-down ends, if it has not yet: the adjuster looks again then."""
        if self.last_deletion is None or not self.cooling(now):
            return None
        return self.last_deletion + self.cool_down

    def adjust(self, pods: Sequence[Pod], scaling: MutableMapping[str, Pod], now: float) -> bool:
        """One pass over ``pods`` (the cluster's, in creation order: all of them, or at least those not bound)
        and ``scaling`` (its scaling pods, changed in place); whether anything changed."""
        # Each scaling pod's sharing pod, looked up by key (no scaling pod: nothing to look up).
        by_key = {p.key: p for p in pods} if scaling else {}
        changed = False
        for key, sp in list(scaling.items()):
            target = scaled_pod(sp.labels)
            pod = by_key.get(f"{target[0]}/{target[1]}") if target else None
            if sp.phase == "Succeeded" or pod is None or not _unschedulable(pod):
                del scaling[key]
                self.last_deletion = now
                changed = True
        if self.cooling(now):
            return changed
        waiting = [
            p
            for p in pods
            if p.gpu_share is not None
            and not p.node_name
            and p.scheduler_name == KAI_SCHEDULER
            and not p.finished
            and _unschedulable(p)
        ]
        needed = batch_gpus(p.gpu_share for p in waiting if p.gpu_share is not None)
        if not needed:
            return changed
        for pod in waiting:
            share = pod.gpu_share
            assert share is not None
            proxy = scaling_pod(pod, now)
            if proxy.key in scaling:
                continue
            asked = [s.requests.gpus for s in scaling.values()]
            if needed > sum(asked) or share.devices > max(asked, default=0):
                scaling[proxy.key] = proxy
                self.created += 1
                changed = True
        return changed


def run_scaling_pods(
    scaling: MutableMapping[str, Pod],
    nodes: Sequence[Node],
    sched: ClusterScheduler,
    now: float,
    message: str,
) -> bool:
    """The default scheduler binds a pending scaling pod wherever its whole GPUs fit, and its container exits
    at once (KAI's scaling-pod image does nothing): it is Succeeded and holds nothing. One that fits nowhere
    gets ``message``. Whether anything changed."""
    changed = False
    for key, p in list(scaling.items()):
        if not p.pending:
            continue
        home = next((n.name for n in nodes if sched.rejection(p, n.name) is None), None)
        if home is not None:
            scaling[key] = replace(
                p, node_name=home, phase="Succeeded", scheduled=Condition("True", "", "", now)
            )
            changed = True
        elif p.scheduled is None or p.scheduled.message != message:
            scaling[key] = replace(p, scheduled=Condition("False", UNSCHEDULABLE, message, now))
            changed = True
    return changed
