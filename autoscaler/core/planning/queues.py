"""KAI queues as tidal sees them: GPUs each one requests, holds, waits for and has launching, and what the nodes
serving it cost, against its ``queueBudgets`` entry.

A node *serves* the queues of the pods on it (bound, or planned onto it while it launches). Each queue pays the
share of the node's price that its pods' GPU requests are of all the GPU requests there (fractions of a GPU
count as KAI counts them); on a node where no pod requests a GPU, the share of cpu requests. Pods of no queue
pay their share too, so a queue never pays for another's room. A node whose price tidal does not know (not in
the catalog) costs nothing here. Pure, like the plan.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from autoscaler.core.census import PodCensus
from autoscaler.core.census import census as take_census
from autoscaler.core.demand import pod_gpus, pod_queue
from autoscaler.core.model import Pod, PodGroup, Snapshot
from autoscaler.core.planning.decisions import Launching, LaunchPlan, QueueSpend
from autoscaler.core.planning.node_facts import NodeFacts
from autoscaler.core.planning.offerings import OfferingIndex
from autoscaler.core.planning.scaledown import node_offering

__all__ = ["QueueView", "queue_costs", "queue_views"]


@dataclass(frozen=True, slots=True)
class QueueView:
    """One KAI queue after a plan."""

    queue: str
    gpus_allocated: float = 0.0  # requested by its pods bound to a node
    gpus_pending: float = 0.0  # requested by its pods waiting for one (scheduling gates aside)
    gpus_launching: float = 0.0  # of those, by pods a node is launching, or is planned, for
    cost_per_hour: float = 0.0  # its share of the nodes serving it: running, launching and planned
    budget: float | None = None  # queueBudgets

    @property
    def gpus_requested(self) -> float:
        return self.gpus_allocated + self.gpus_pending


def _shares(
    pods: Sequence[Pod],
    groups: Mapping[tuple[str, str], PodGroup],
    memory: int,
    queues: Sequence[str] | None = None,
) -> dict[str, float]:
    """Each queue's part of a node whose ``pods`` are these (of ``queues``, when known): by GPU requests,
    else by cpu requests."""
    if queues is None:
        queues = [pod_queue(p, groups) for p in pods]
    if not any(queues):
        return {}  # pods of no queue: nothing to charge (most nodes of a plan, so skip their GPU counts)
    weights: dict[str, float] = defaultdict(float)
    for q, p in zip(queues, pods, strict=True):
        weights[q] += pod_gpus(p, memory)
    if not any(weights.values()):
        weights.clear()
        for q, p in zip(queues, pods, strict=True):
            weights[q] += p.requests.cpu
    total = sum(weights.values())
    return {q: w / total for q, w in weights.items() if w} if total else {}


def _charge(
    out: dict[str, float],
    price: float,
    pods: Sequence[Pod],
    groups: Mapping[tuple[str, str], PodGroup],
    memory: int,
    queues: Sequence[str] | None = None,
) -> None:
    for q, share in _shares(pods, groups, memory, queues).items():
        if q:
            out[q] += price * share


def _workload(pods: Iterable[Pod]) -> list[Pod]:
    return [p for p in pods if not p.daemonset and not p.mirror]


def queue_costs(
    snapshot: Snapshot,
    index: OfferingIndex,
    launching: Iterable[Launching] = (),
    *,
    by_node: Mapping[str, Sequence[Pod]] | None = None,
    facts: Mapping[str, NodeFacts] | None = None,
) -> QueueSpend:
    """$/h of the nodes that exist or launch, per queue they serve (queues of no node are absent), and the
    priced nodes no pod (but DaemonSet and mirror pods) runs on yet. ``by_node`` is the snapshot's bound,
    unfinished pods by node when already grouped; ``facts`` what earlier plans read of the nodes whose Node
    and pods are this snapshot's (see :class:`~autoscaler.core.planning.node_facts.NodeFacts`)."""
    groups = {(g.namespace, g.name): g for g in snapshot.podgroups}
    memory = index.smallest_gpu_memory()
    if by_node is None:
        grouped: dict[str, list[Pod]] = defaultdict(list)
        for p in snapshot.pods:
            if p.node_name and not p.finished:
                grouped[p.node_name].append(p)
        by_node = grouped
    out: dict[str, float] = defaultdict(float)
    unclaimed: dict[str, float] = {}
    for node in snapshot.nodes:
        known = facts.get(node.name) if facts is not None else None
        priced = known.priced if known is not None else None
        if priced is None:
            priced = (node_offering(node, index), _workload(by_node.get(node.name, ())))
            if known is not None:
                known.priced = priced
        o, pods = priced
        if o is None:
            continue
        if pods:
            _charge(out, o.price, pods, groups, memory)
        elif not node.deleting:
            unclaimed[node.name] = o.price
    for la in launching:
        waiting = [p for p in la.pods if not p.node_name]
        if waiting:
            _charge(out, la.offering.price, waiting, groups, memory)
        else:
            unclaimed[la.name] = la.offering.price
    return QueueSpend(dict(out), unclaimed)


def queue_views(
    snapshot: Snapshot,
    launch: LaunchPlan,
    index: OfferingIndex,
    launching: Sequence[Launching] = (),
    spend: QueueSpend | None = None,
    census: PodCensus | None = None,
    known: Mapping[str, str] | None = None,
) -> tuple[QueueView, ...]:
    """Every KAI queue the snapshot names (as a Queue, a PodGroup's queue or a pod's label) or a budget names,
    by name. ``spend`` is :func:`queue_costs` of the snapshot when already known, ``census`` that of its pods;
    ``known`` the queue of pods whose queue was read already, by pod key (a pod missing from it is read
    here)."""
    if census is None or not census.describes(snapshot.pods):
        census = take_census(snapshot.pods)
    groups = {(g.namespace, g.name): g for g in snapshot.podgroups}
    memory = index.smallest_gpu_memory()
    if spend is None:
        spend = queue_costs(snapshot, index, launching)
    cost: dict[str, float] = defaultdict(float, spend.by_queue)
    # A launch and a pod placed on a node are for pending pods, none of them bound to a node yet.
    pods = {p.key: p for p in census.unbound}
    # Each pod's queue, read once: most launches hold pods of none, and are passed over at once.
    if known is None:
        queue_of = {key: pod_queue(p, groups) for key, p in pods.items()}
    else:
        queue_of = {}
        for key, p in pods.items():
            q = known.get(key)
            queue_of[key] = pod_queue(p, groups) if q is None else q
    # The pods of launches that serve a queue: of the pods this plan launches for, only those of a queue are
    # looked up below.
    launching_for = {p.key for la in launching for p in la.pods}
    for la in launch.launches:
        queues = [queue_of[k] for k in la.pods if k in pods]
        if any(queues):
            _charge(cost, la.offering.price, [pods[k] for k in la.pods if k in pods], groups, memory, queues)
            launching_for.update(la.pods)
    # A node no pod runs on yet serves the pods this plan puts there.
    onto: dict[str, list[Pod]] = defaultdict(list)
    for a in launch.absorbed:
        if a.node in spend.unclaimed and a.pod in pods:
            onto[a.node].append(pods[a.pod])
    for name, waiting in onto.items():
        _charge(cost, spend.unclaimed[name], waiting, groups, memory)
    launching_names = {la.name for la in launching}
    launching_for |= {a.pod for a in launch.absorbed if a.node in launching_names}
    allocated: dict[str, float] = defaultdict(float)
    pending: dict[str, float] = defaultdict(float)
    coming: dict[str, float] = defaultdict(float)
    names = {q.name for q in snapshot.queues} | {g.queue for g in snapshot.podgroups if g.queue}
    names |= set(index.config.queue_budgets)
    counted: dict[tuple[object, ...], float] = {}
    for p in census.queue_candidates:  # the others have no queue
        q = queue_of[p.key] if not p.node_name and pods.get(p.key) is p else pod_queue(p, groups)
        if not q or p.finished or p.terminating:
            continue
        names.add(q)
        # Replicas ask alike: what a request (and share) counts as is worked out once.
        asked = (p.requests, p.gpu_share)
        gpus = counted.get(asked)
        if gpus is None:
            gpus = counted[asked] = pod_gpus(p, memory)
        if p.node_name:
            allocated[q] += gpus
        elif p.phase == "Pending" and not p.scheduling_gates:
            pending[q] += gpus
            if p.key in launching_for:
                coming[q] += gpus
    budgets = index.config.queue_budgets
    return tuple(
        QueueView(
            q,
            gpus_allocated=round(allocated[q], 4),
            gpus_pending=round(pending[q], 4),
            gpus_launching=round(coming[q], 4),
            cost_per_hour=round(cost[q], 6),
            budget=budgets.get(q),
        )
        for q in sorted(names)
    )
