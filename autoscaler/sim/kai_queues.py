"""KAI's queues as the emulated scheduler admits work through them: a queue and its ancestors each cap the
GPUs bound to their pods (``limit``), and non-preemptible work stays within each one's deserved quota. A pod
held back says so in its ``PodScheduled=False`` message, as KAI's does."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

from autoscaler.core.model import Pod
from autoscaler.sim.pods import SimPod
from autoscaler.sim.scenario import QueueSpec

__all__ = ["QUEUE_HOLD_PREFIXES", "held_by_queue", "lineage", "queue_hold", "queue_priority", "queue_use"]

QUEUE_HOLD_PREFIXES = ("OverLimit", "NonPreemptibleOverQuota", "OverQuota")


def held_by_queue(pod: Pod) -> bool:
    """KAI keeps this pod pending for its queue's quota or limit, not for lack of capacity."""
    cond = pod.scheduled
    return cond is not None and cond.status == "False" and cond.message.startswith(QUEUE_HOLD_PREFIXES)


def queue_use(
    queues: Mapping[str, QueueSpec], pods: Iterable[SimPod]
) -> tuple[dict[str, float], dict[str, float]]:
    """GPUs bound to each queue's pods (its descendants' included): all of them, and the non-preemptible."""
    used: dict[str, float] = defaultdict(float)
    non_preemptible: dict[str, float] = defaultdict(float)
    for sp in pods:
        if sp.pod.node_name and sp.queue:
            for q in lineage(queues, sp.queue):
                used[q] += sp.gpus
                if not sp.preemptible:
                    non_preemptible[q] += sp.gpus
    return used, non_preemptible


def lineage(queues: Mapping[str, QueueSpec], name: str) -> list[str]:
    """The queue and its ancestors, nearest first (a cycle ends where it repeats)."""
    chain = []
    while name and name in queues and name not in chain:
        chain.append(name)
        name = queues[name].parent
    return chain


def queue_priority(queues: Mapping[str, QueueSpec], sp: SimPod) -> int:
    """The priority of the pod's queue (0 when it has none)."""
    q = queues.get(sp.queue)
    return q.priority if q else 0


def queue_hold(
    queues: Mapping[str, QueueSpec],
    sp: SimPod,
    gpus: float,
    used: Mapping[str, float],
    non_pre: Mapping[str, float],
) -> str:
    """KAI's message when a queue holds back a unit asking for ``gpus``; empty when every queue admits it."""
    for name in lineage(queues, sp.queue):
        q = queues[name]
        if q.limit is not None and used.get(name, 0) + gpus > q.limit:
            return (
                f"OverLimit: {name} quota has reached the allowable limit of GPUs. Limit is {q.limit} GPUs, "
                f"currently {used.get(name, 0):g} GPUs allocated and workload requested {gpus:g} GPUs."
            )
        if not sp.preemptible and q.quota is not None and non_pre.get(name, 0) + gpus > q.quota:
            return (
                f"NonPreemptibleOverQuota: Non-preemptible workload in queue {name} requested {gpus:g} GPUs, "
                f"over the deserved quota of {q.quota} GPUs ({non_pre.get(name, 0):g} in use)."
            )
    return ""
