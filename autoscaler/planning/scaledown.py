"""Scale-down: which nodes tidal launched can go, and what keeps the others.

A node is removable when it has been unneeded for ``nodeUnneededDuration``: empty (only DaemonSet and mirror
pods), or under-utilised with every pod safe to evict and a place to go on the nodes that stay (the pods are
re-planned with the same fit rules as scale-up), or, failing that, on new nodes that cost at least
``replaceSavings`` less than it does, within the cluster limits. GPU nodes go all the way to zero. While a cluster
limit keeps pending pods out, no node is replaced: the budget it frees would go to those pods.

A node whose pods all started within ``replaceYoungPodsWithin`` is replaced, however busy, when new nodes cost
at least ``YOUNG_REPLACE_SAVINGS`` less: moving such pods loses minutes of work, while leaving them holds a node
bought for bigger pods (the scheduler binds a new pod to any idle node that fits) for their whole run.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from autoscaler import annotations as ann
from autoscaler.config import Config
from autoscaler.demand import Demand
from autoscaler.fit import AnnotationError, pod_constraints
from autoscaler.model import (
    LABEL_CAPACITY_TYPE,
    LABEL_INSTANCE_TYPE,
    LABEL_ZONE,
    DisruptionBudget,
    Node,
    Offering,
    Pod,
    Snapshot,
)
from autoscaler.placement.bins import Bin, Kind
from autoscaler.placement.engine import Engine
from autoscaler.placement.labels import requirements_match
from autoscaler.placement.reasons import Rejection
from autoscaler.planning import reserved
from autoscaler.planning.cluster import build_engine, node_gpus, pods_by_node, requested, usage
from autoscaler.planning.decisions import (
    BIN_PACKING,
    BIN_SELECTION,
    NO_USAGE,
    Blocked,
    Removal,
    RemovalPlan,
    Usage,
)
from autoscaler.planning.offerings import OfferingIndex
from autoscaler.planning.scaleup import scale_up
from autoscaler.quantity import format_duration
from autoscaler.resources import CPU, GPU_RESOURCES, MEMORY
from autoscaler.timestamps import parse_time

UNNEEDED_SINCE = "tidal.dev/unneeded-since"
NODE_MODE = "tidal.dev/node-mode"
# The saving that justifies restarting pods that have only just started (capped by replaceSavings).
YOUNG_REPLACE_SAVINGS = 0.2


def _moves_blocker(
    pod: Pod, pdbs: Sequence[DisruptionBudget], evicting: Mapping[tuple[str, str], int]
) -> str:
    """Why this pod must not be evicted, or an empty string."""
    if pod.unreadable:
        return f"tidal cannot read all of pod {pod.key} ({pod.unreadable}), so it never moves it"
    a = pod.annotations
    if ann.is_true(a, ann.DO_NOT_EVICT):
        found = ann.lookup(a, ann.DO_NOT_EVICT)
        return f"pod {pod.key} is annotated {found[0] if found else ann.DO_NOT_EVICT}"
    if a.get(ann.KARPENTER_DO_NOT_DISRUPT, "").lower() == "true":
        return f"pod {pod.key} is annotated {ann.KARPENTER_DO_NOT_DISRUPT}"
    safe = a.get(ann.SAFE_TO_EVICT, "").lower()
    if safe == "false":
        return f"pod {pod.key} is annotated {ann.SAFE_TO_EVICT}=false"
    for pdb in pdbs:
        if pdb.namespace != pod.namespace or pdb.selector is None:
            continue
        if requirements_match(pdb.selector, pod.labels):
            key = (pdb.namespace, pdb.name)
            if evicting.get(key, 0) + 1 > pdb.disruptions_allowed:
                return f"pod {pod.key} is protected by PodDisruptionBudget {pdb.namespace}/{pdb.name}"
    if safe == "true":
        return ""
    if pod.local_storage:
        return f"pod {pod.key} has local storage (emptyDir/hostPath)"
    if pod.owner is None:
        return f"pod {pod.key} has no controller to recreate it"
    if pod.namespace == "kube-system":
        return f"pod {pod.key} is a kube-system pod"
    return ""


def _budgets_of(pod: Pod, pdbs: Sequence[DisruptionBudget]) -> list[tuple[str, str]]:
    """The PodDisruptionBudgets that select ``pod``."""
    return [
        (pdb.namespace, pdb.name)
        for pdb in pdbs
        if pdb.namespace == pod.namespace
        and pdb.selector is not None
        and requirements_match(pdb.selector, pod.labels)
    ]


def _eviction_blocker(
    pods: Sequence[Pod], pdbs: Sequence[DisruptionBudget], evicting: dict[tuple[str, str], int]
) -> str:
    """Why ``pods`` cannot all be evicted, or an empty string; then ``evicting`` counts them too.

    A budget's allowance is shared by every pod it selects, on this node as on the nodes already chosen:
    two pods of one Deployment on the same node take two of its disruptions, not one.
    """
    counted = dict(evicting)
    for pod in pods:
        blocker = _moves_blocker(pod, pdbs, counted)
        if blocker:
            return blocker
        for key in _budgets_of(pod, pdbs):
            counted[key] = counted.get(key, 0) + 1
    evicting.update(counted)
    return ""


def _young(pods: Sequence[Pod], now: float, within: float) -> bool:
    """Every pod was bound at most ``within`` seconds ago (never, when ``within`` is 0)."""
    if within <= 0:
        return False
    for p in pods:
        bound = p.scheduled
        if bound is None or bound.status != "True" or bound.last_transition is None:
            return False
        if now - bound.last_transition > within:
            return False
    return True


def _utilization(node: Node, pods: Sequence[Pod]) -> float:
    used = requested(pods)
    alloc = node.allocatable
    gpu_names = [r for r in GPU_RESOURCES if alloc.get(r)]
    names = gpu_names or [CPU, MEMORY]
    return max((used.get(n) / alloc[n] for n in names if alloc.get(n)), default=0.0)


def _move(pods: Sequence[Pod], node: Node, engine: Engine, targets: Sequence[Bin], config: Config) -> str:
    """Move ``pods`` off ``node`` onto ``targets`` (biggest first, first fit) with the scheduler's filters;
    keep the moves when every pod finds a place (later candidates then see that room taken), else undo them
    and say why not."""
    mark = engine.journal.mark()
    engine.topology.remove_node(node.name)
    for pod in sorted(pods, key=lambda p: (-p.requests.gpus, -p.requests.cpu, -p.requests.memory, p.key)):
        try:
            c = pod_constraints(pod, config)
        except AnnotationError as err:
            engine.journal.rollback(mark)
            return f"nowhere to move pod {pod.key} ({err})"
        for b in targets:
            fit = engine.can_add(pod, c, b)
            if not isinstance(fit, Rejection):
                engine.add(pod, c, b, fit, [pod.key])
                break
        else:
            engine.journal.rollback(mark)
            return f"nowhere to move pod {pod.key}"
    engine.journal.commit(mark)
    return ""


def node_offering(node: Node, index: OfferingIndex) -> Offering | None:
    """The offering a Node was launched as, from its labels (instance type, zone, capacity type)."""
    by_key = index.memo.offerings_by_key
    if by_key is None:
        by_key = {}
        for o in index.offerings:  # cheapest first: the first of a key wins, as a scan in order would find
            by_key.setdefault((o.instance_type, o.zone, o.capacity_type), o)
        index.memo.offerings_by_key = by_key
    labels = node.labels
    return by_key.get(
        (labels.get(LABEL_INSTANCE_TYPE), labels.get(LABEL_ZONE), labels.get(LABEL_CAPACITY_TYPE))
    )


def _without(total: Usage, node: Node) -> Usage:
    """What counts against the limits once ``node`` is gone."""
    return Usage(
        gpus=max(0, total.gpus - node_gpus(node)),
        cpu_milli=max(0, total.cpu_milli - (node.capacity.cpu or node.allocatable.cpu)),
        managed_nodes=max(0, total.managed_nodes - node.managed),
    )


def _planned(demand: Demand, index: OfferingIndex, usage: Usage) -> tuple[float, str, Usage]:
    """(cost per hour, why not placed, what the new nodes count against the limits) of a replacement."""
    launch = scale_up(demand, index, Engine(index), usage=usage)
    if launch.unplaced:
        return float("inf"), launch.unplaced[0].reason, NO_USAGE
    return launch.cost_per_hour, "", Usage.of(la.offering for la in launch.launches)


def _within_limits(needs: Usage, used: Usage, cfg: Config) -> bool:
    return (
        (cfg.cluster_gpu_limit is None or used.gpus + needs.gpus <= cfg.cluster_gpu_limit)
        and (cfg.cluster_cpu_limit is None or used.cpu_milli + needs.cpu_milli <= cfg.cluster_cpu_limit)
        and (cfg.max_nodes is None or used.managed_nodes + needs.managed_nodes <= cfg.max_nodes)
    )


def _replacement(
    node: Node, pods: Sequence[Pod], index: OfferingIndex, savings: float, total: Usage
) -> tuple[str, str]:
    """(why not, "") or ("", how): new nodes may take ``pods`` when they cost at least ``savings`` less than
    ``node`` (Karpenter's single-node replace; the evicted pods then get the nodes the scale-up plans).

    The new nodes must fit the cluster limits with ``node`` gone (``total`` is the usage with it): a
    replacement the limits forbid would leave its pods to the node that fits, the same as this one, which
    would be replaced again, and again."""
    current = node_offering(node, index)
    if current is None:
        return "nowhere to move its pods, and its price is unknown", ""
    if any(p.topological for p in pods):
        # New nodes are planned for them alone, without the rest of the cluster their affinity or spread is
        # about: such pods only move to nodes that exist.
        return "nowhere to move its pods, and their affinity or topology spread keeps them off new nodes", ""
    try:
        constraints = {p.key: pod_constraints(p, index.config) for p in pods}
    except AnnotationError as err:
        return f"nowhere to move its pods ({err})", ""
    # The same node keeps the same pods for hours: plan its replacement once per offering index, without
    # limits; only when that plan would not fit what the limits leave is it planned again within them.
    memo = index.memo.replacements
    key = tuple(sorted(((constraints[p.key], p.requests) for p in pods), key=repr))
    demand = Demand(singles=list(pods), constraints=constraints)
    found = memo.get(key)
    if found is None:
        found = _planned(demand, index, NO_USAGE)
        memo[key] = found
    after = _without(total, node)
    if not found[1] and not _within_limits(found[2], after, index.config):
        limited_key = (*key, after)
        found = memo.get(limited_key) or memo.setdefault(limited_key, _planned(demand, index, after))
    cost, unplaced, _ = found
    if unplaced:
        return f"nowhere to move its pods, and no offering holds them ({unplaced})", ""
    if cost > current.price * (1 - savings):
        return (
            f"nowhere to move its pods; new nodes for them would cost ${cost:.4f}/h against "
            f"${current.price:.4f}/h now, less than {savings:.0%} saved"
        ), ""
    if cost >= current.price:
        # Even at replaceSavings 0 a move must save something: a replacement at the same price is just as
        # under-used and would be replaced in turn, restarting its pods over and over for nothing.
        return (
            f"nowhere to move its pods; new nodes for them would cost ${cost:.4f}/h, "
            f"no less than ${current.price:.4f}/h now"
        ), ""
    return "", f"new nodes hold its pods for ${cost:.4f}/h instead of ${current.price:.4f}/h"


def _young_replaceable(
    node: Node, workload: Sequence[Pod], snapshot: Snapshot, index: OfferingIndex, now: float, total: Usage
) -> bool:
    """A busy node of young, movable pods that new nodes hold for ``YOUNG_REPLACE_SAVINGS`` less.

    Only such nodes join the candidates (a busy node that stays must stay a place other pods can move to).
    """
    cfg = index.config.scale_down
    if cfg.replace_savings >= 1.0 or not _young(workload, now, cfg.replace_young_pods_within):
        return False
    if _eviction_blocker(workload, snapshot.pdbs, {}):
        return False
    blocker, _ = _replacement(node, workload, index, min(cfg.replace_savings, YOUNG_REPLACE_SAVINGS), total)
    return not blocker


def scale_down(
    snapshot: Snapshot,
    index: OfferingIndex,
    now: float,
    *,
    unneeded_since: Mapping[str, float] | None = None,
    needed: Collection[str] = (),
    by_node: Mapping[str, list[Pod]] | None = None,
    engine: Engine | None = None,
    total: Usage | None = None,
    contended: str = "",
) -> RemovalPlan:
    """Removable managed nodes and, for every other managed node, what blocks its removal.

    ``total`` is what counts against the cluster limits (nodes still launching and planned included); the
    snapshot's nodes when not given. ``contended`` is the limit that keeps pending pods out, if one does: no
    node is then replaced (its pods would lose the budget it frees to them)."""
    cfg = index.config.scale_down
    if not cfg.enabled:
        return RemovalPlan()
    grace = index.config.new_node_grace_period
    total = total if total is not None else usage(snapshot)
    by_node = by_node if by_node is not None else pods_by_node(snapshot.pods)
    since_map = dict(unneeded_since or {})
    removals: list[Removal] = []
    blocked: list[Blocked] = []
    seen: dict[str, float] = {}
    candidates: list[tuple[float, Node, list[Pod]]] = []
    listed = reserved.live(index.memo, (*index.offerings, *index.excluded))
    for node in sorted(snapshot.nodes, key=lambda n: n.name):
        if not node.managed or node.deleting:
            continue
        if node.name in needed:
            blocked.append(Blocked(node.name, "pending pods will run here"))
            continue
        if node.unreadable:
            blocked.append(Blocked(node.name, f"tidal cannot read all of this Node ({node.unreadable})"))
            continue
        if not node.ready:
            continue
        kept = reserved.keeps(node, listed, index.config, now)
        if kept:
            blocked.append(Blocked(node.name, kept))
            continue
        # A pod tidal cannot fully read counts as workload whatever it says it is: its node is never empty.
        workload = [
            p for p in by_node.get(node.name, ()) if p.unreadable or (not p.daemonset and not p.mirror)
        ]
        util = _utilization(node, workload)
        mode = node.labels.get(NODE_MODE) or (BIN_SELECTION if node.allocatable.gpus else BIN_PACKING)
        threshold = (
            cfg.utilization_threshold_bin_packing
            if mode == BIN_PACKING
            else cfg.utilization_threshold_bin_selection
        )
        if (
            workload
            and util >= threshold
            and (contended or not _young_replaceable(node, workload, snapshot, index, now, total))
        ):
            blocked.append(
                Blocked(node.name, f"utilization {util:.2f} is at or above {threshold:.2f} ({mode})")
            )
            continue
        candidates.append((util, node, workload))

    removing = {node.name for _, node, _ in candidates}
    if engine is None:
        engine = build_engine(snapshot, index, by_node=by_node)
    targets = [b for b in engine.bins if b.kind == Kind.NODE and b.name not in removing]
    evicting: dict[tuple[str, str], int] = {}
    replace_ok = cfg.replace_savings < 1.0
    for util, node, workload in sorted(candidates, key=lambda c: (c[0], c[1].name)):
        since = since_map.get(node.name)
        if since is None:
            since = parse_time(node.annotations.get(UNNEEDED_SINCE)) or now
        how = ""
        counted = dict(evicting)
        blocker = _eviction_blocker(workload, snapshot.pdbs, counted)
        if not blocker and workload:
            blocker = _move(workload, node, engine, targets, index.config)
            if blocker and replace_ok and contended:
                blocker = f"{blocker}; no node is replaced while pending pods wait for a limit ({contended})"
            elif blocker and replace_ok:
                savings = cfg.replace_savings
                if _young(workload, now, cfg.replace_young_pods_within):
                    savings = min(savings, YOUNG_REPLACE_SAVINGS)
                blocker, how = _replacement(node, workload, index, savings, total)
        if blocker:
            blocked.append(Blocked(node.name, blocker))
            continue
        seen[node.name] = since
        waited = now - since
        if waited < cfg.node_unneeded_duration:
            blocked.append(
                Blocked(
                    node.name,
                    f"unneeded for {format_duration(waited)} of {format_duration(cfg.node_unneeded_duration)}",
                )
            )
            continue
        # The unneeded clock runs from the start, but a node is never removed younger than the grace period:
        # a pod cancelled while its node launched is often followed by the next one.
        age = now - node.created
        if node.created and age < grace:
            blocked.append(
                Blocked(
                    node.name,
                    f"new node: {format_duration(age)} old of newNodeGracePeriod {format_duration(grace)}",
                )
            )
            continue
        evicting = counted  # this node's pods now take their share of every budget
        kind = "empty" if not workload else f"utilization {util:.2f}, {len(workload)} pods can move"
        if how:
            kind = f"utilization {util:.2f}, {how}"
        removals.append(
            Removal(
                node.name,
                f"{kind}; unneeded for {format_duration(waited)}",
                not workload,
                tuple(p.key for p in workload),
                node_gpus(node),
            )
        )
    blocked.sort(key=lambda b: b.node)
    return RemovalPlan(tuple(removals), tuple(blocked), seen)
