"""Which pods tidal never evicts, and which it never waits for.

Protected (their node is never disrupted, except when the cloud reclaims it): a pod tidal cannot fully read;
``tidal.dev/do-not-evict`` (or Luna's spelling), ``karpenter.sh/do-not-disrupt`` and
``cluster-autoscaler.kubernetes.io/safe-to-evict: "false"``; a pod whose PodDisruptionBudget allows no more
disruptions; KAI's reservation pods (each holds a GPU for the pods sharing it); and, unless marked safe to
evict, pods with local storage, without a controller, or in kube-system. A member of a running KAI gang moves
only with its whole gang.

Expendable: KAI background pods (``kai.scheduler/background: "true"``) give their capacity back whenever it
is wanted. They never keep a node (they neither count as its use nor need a place elsewhere) and are evicted
with it, through the Eviction API, unless a protection above names them explicitly.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence

from autoscaler.core import annotations as ann
from autoscaler.core.annotations import POD_GROUP_ANNOTATION
from autoscaler.core.gpu.kai_pods import gpu_groups, is_background, is_reservation_pod
from autoscaler.core.model import DisruptionBudget, Pod, Snapshot
from autoscaler.core.placement.labels import requirements_match

__all__ = [
    "budgets_of",
    "eviction_blocker",
    "expendable",
    "gang_blocker",
    "pod_blocker",
    "running_gangs",
    "untouchable",
    "without_reservations",
    "workload",
]


def workload(pods: Iterable[Pod]) -> list[Pod]:
    """The pods that would be lost with their node: all but DaemonSet and mirror pods. A pod tidal cannot
    fully read counts whatever it says it is."""
    return [p for p in pods if p.unreadable or (not p.daemonset and not p.mirror)]


def expendable(pod: Pod) -> bool:
    """A KAI background pod tidal can read fully: it never keeps a node."""
    return not pod.unreadable and is_background(pod.labels)


def _explicit(pod: Pod) -> str:
    """A protection someone wrote on the pod, or an empty string."""
    a = pod.annotations
    if ann.is_true(a, ann.DO_NOT_EVICT):
        found = ann.lookup(a, ann.DO_NOT_EVICT)
        return f"pod {pod.key} is annotated {found[0] if found else ann.DO_NOT_EVICT}"
    if a.get(ann.KARPENTER_DO_NOT_DISRUPT, "").lower() == "true":
        return f"pod {pod.key} is annotated {ann.KARPENTER_DO_NOT_DISRUPT}"
    if a.get(ann.SAFE_TO_EVICT, "").lower() == "false":
        return f"pod {pod.key} is annotated {ann.SAFE_TO_EVICT}=false"
    return ""


def untouchable(pod: Pod) -> str:
    """Why the pod is never evicted, not even from a node the cloud is reclaiming ("" if it may be): it said
    so, or tidal cannot read all of it. A PodDisruptionBudget is left to the Eviction API there."""
    if pod.unreadable:
        return f"tidal cannot read all of pod {pod.key} ({pod.unreadable})"
    return _explicit(pod)


def pod_blocker(pod: Pod, pdbs: Sequence[DisruptionBudget], evicting: Mapping[tuple[str, str], int]) -> str:
    """Why this pod must not be evicted, or an empty string."""
    if pod.unreadable:
        return f"tidal cannot read all of pod {pod.key} ({pod.unreadable}), so it never moves it"
    written = _explicit(pod)
    if written:
        return written
    if is_reservation_pod(pod.namespace, pod.labels):
        return f"pod {pod.key} is a KAI reservation pod (it holds a GPU for the pods that share it)"
    for pdb in pdbs:
        if pdb.namespace != pod.namespace or pdb.selector is None:
            continue
        if requirements_match(pdb.selector, pod.labels):
            key = (pdb.namespace, pdb.name)
            if evicting.get(key, 0) + 1 > pdb.disruptions_allowed:
                if pdb.unreadable:
                    return (
                        f"pod {pod.key} may be protected by PodDisruptionBudget {pdb.namespace}/{pdb.name}, "
                        f"which tidal cannot read ({pdb.unreadable})"
                    )
                return f"pod {pod.key} is protected by PodDisruptionBudget {pdb.namespace}/{pdb.name}"
    if expendable(pod) or pod.annotations.get(ann.SAFE_TO_EVICT, "").lower() == "true":
        return ""
    if pod.local_storage:
        return f"pod {pod.key} has local storage (emptyDir/hostPath)"
    if pod.owner is None:
        return f"pod {pod.key} has no controller to recreate it"
    if pod.namespace == "kube-system":
        return f"pod {pod.key} is a kube-system pod"
    return ""


def budgets_of(pod: Pod, pdbs: Sequence[DisruptionBudget]) -> list[tuple[str, str]]:
    """The PodDisruptionBudgets that select ``pod``."""
    return [
        (pdb.namespace, pdb.name)
        for pdb in pdbs
        if pdb.namespace == pod.namespace
        and pdb.selector is not None
        and requirements_match(pdb.selector, pod.labels)
    ]


def eviction_blocker(
    pods: Sequence[Pod], pdbs: Sequence[DisruptionBudget], evicting: dict[tuple[str, str], int]
) -> str:
    """Why ``pods`` cannot all be evicted, or an empty string; then ``evicting`` counts them too.

    A budget's allowance is shared by every pod it selects, on this node as on the nodes already chosen:
    two pods of one Deployment on the same node take two of its disruptions, not one.
    """
    counted = dict(evicting)
    for pod in pods:
        blocker = pod_blocker(pod, pdbs, counted)
        if blocker:
            return blocker
        for key in budgets_of(pod, pdbs):
            counted[key] = counted.get(key, 0) + 1
    evicting.update(counted)
    return ""


def _gang(pod: Pod, sizes: Mapping[tuple[str, str], int]) -> str:
    name = pod.annotations.get(POD_GROUP_ANNOTATION)
    if not name or sizes.get((pod.namespace, name), 1) <= 1:
        return ""
    return f"{pod.namespace}/{name}"


def running_gangs(snapshot: Snapshot) -> dict[str, set[str]]:
    """The nodes each running KAI gang (a PodGroup of minMember above 1) has members bound to."""
    sizes = {(g.namespace, g.name): g.min_member for g in snapshot.podgroups}
    if not sizes:
        return {}
    nodes: dict[str, set[str]] = defaultdict(set)
    for pod in snapshot.pods:
        if pod.node_name and not pod.finished:
            gang = _gang(pod, sizes)
            if gang:
                nodes[gang].add(pod.node_name)
    return dict(nodes)


def gang_blocker(pods: Iterable[Pod], snapshot: Snapshot, leaving: Collection[str]) -> str:
    """Why ``pods`` must stay because of their gangs: a member of a running gang is evicted only when every
    node its gang runs on is disrupted with it (``leaving``), so that the whole gang moves, or none of it."""
    sizes = {(g.namespace, g.name): g.min_member for g in snapshot.podgroups}
    if not sizes:
        return ""
    spread = running_gangs(snapshot)
    for pod in pods:
        gang = _gang(pod, sizes)
        if not gang:
            continue
        staying = sorted(spread.get(gang, set()) - set(leaving))
        if staying:
            return (
                f"pod {pod.key} belongs to running gang {gang}, which also runs on {', '.join(staying[:3])}: "
                "it moves only with its whole gang"
            )
    return ""


def without_reservations(workload: Sequence[Pod]) -> list[Pod]:
    """The workload but the KAI reservation pods whose every GPU is shared by a pod of it: they go with those
    pods, which the rest of the plan moves (or keeps, when one of them may not be evicted). A reservation no
    pod shares yet (one bound a moment before its pod) still holds the node."""
    shared = {
        g for p in workload if not is_reservation_pod(p.namespace, p.labels) for g in gpu_groups(p.labels)
    }
    return [
        p
        for p in workload
        if p.unreadable
        or not is_reservation_pod(p.namespace, p.labels)
        or not set(gpu_groups(p.labels)) <= shared
        or not gpu_groups(p.labels)
    ]
