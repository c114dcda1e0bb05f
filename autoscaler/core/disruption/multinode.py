"""Multi-node consolidation: several nodes whose pods fit on fewer, or cheaper, nodes together, which no one
of them does alone (Karpenter's multi-node consolidation, decided by tidal's own planner). Pure.

A node joins when it is managed, Ready, under its utilization threshold, older than ``newNodeGracePeriod``, its
pods all started between ``nodeUnneededDuration`` (a node still filling up is left alone) and
``replaceYoungPodsWithin`` ago (a moved pod starts again: only little work may be lost), and may all be
evicted (no PodDisruptionBudget at zero, no do-not-evict, no pod tidal cannot read, no running gang's member,
no affinity or topology spread that only nodes that exist can honour), it is no other method's and nothing
holds it.

Two steps, in the order they cost less:

1. **Into the room that exists.** Node by node (fewest pods, dearest node first), the pods move onto the nodes
   that stay, other candidates included, with the scheduler's filters; a node that took pods stays. Each node
   so emptied is drained now: its pods have a place already. Single-node consolidation never moves pods onto
   another candidate; two half-used nodes become one here.
2. **Onto new nodes.** The candidates left, in the same order: the largest leading set (found by binary search,
   as Karpenter does) whose pods the scale-up planner puts on new nodes costing at least ``replaceSavings``
   less than the set. The first node of the set is replaced by all those nodes, launched and Ready (GPUs
   visible) before any pod leaves it, as a single-node replacement is; the cluster limits must hold the new
   nodes beside every node of the set (``clusterGPULimit`` is never exceeded while both run). The rest of
   the set then goes by step 1 in a later pass, onto the room the new nodes keep for its pods. It is not
   tried while a cluster limit keeps pending pods out.

Neither step runs while a pod waits for a place (the room a move fills is what it would take), a disruption
waits for replacements, a drain runs or a Node is being deleted (the room they make is not settled yet).

A node whose pods cannot all be placed is never removed.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from autoscaler.core.disruption import empty, underutilised
from autoscaler.core.disruption.method import Method, retry_after
from autoscaler.core.disruption.protection import eviction_blocker, gang_blocker
from autoscaler.core.disruption.replace import NewNodes, new_nodes, node_offering, within_limits
from autoscaler.core.model import Node, Pod, Snapshot
from autoscaler.core.placement.bins import Kind
from autoscaler.core.placement.engine import Engine
from autoscaler.core.planning import reserved
from autoscaler.core.planning.cluster import node_gpus
from autoscaler.core.planning.decisions import Removal, Usage
from autoscaler.core.planning.offerings import OfferingIndex
from autoscaler.core.words import count

__all__ = ["MAX_SET", "Candidate", "Consolidation", "candidates", "consolidate"]

# The most nodes one replacement is planned for (Karpenter looks at 100); the planner runs about log2 of it
# times per pass.
MAX_SET = 32


@dataclass(frozen=True, slots=True)
class Candidate:
    """A node multi-node consolidation may take: its pods (``workload``: all that go with it; ``kept``: those
    that need a place) and its price per hour."""

    node: Node
    workload: tuple[Pod, ...]
    kept: tuple[Pod, ...]
    price: float


def _settled(pods: Sequence[Pod], now: float, after: float, within: float) -> bool:
    """Every pod was bound at least ``after`` seconds ago, and at most ``within``."""
    for p in pods:
        bound = p.scheduled
        if bound is None or bound.status != "True" or bound.last_transition is None:
            return False
        if not after <= now - bound.last_transition <= within:
            return False
    return True


def candidates(
    snapshot: Snapshot,
    index: OfferingIndex,
    now: float,
    *,
    workloads: Mapping[str, Sequence[Pod]],
    taken: Collection[str],
) -> list[Candidate]:
    """The nodes multi-node consolidation may take, in the order it tries them: fewest pods to move first,
    then the dearest. ``workloads`` are the managed nodes' pods that go with them, as scale-down counts them;
    ``taken`` the nodes it must leave alone (held, needed by pending pods, chosen by another method)."""
    cfg = index.config
    listed = reserved.live(index.memo, (*index.offerings, *index.excluded))
    out: list[Candidate] = []
    for node in snapshot.nodes:
        if not node.managed or node.deleting or not node.ready or node.unreadable or node.name in taken:
            continue
        if node.name not in workloads or now - node.created < cfg.new_node_grace_period:
            continue
        if retry_after(node.annotations) > now or reserved.keeps(node, listed, cfg, now):
            continue
        offering = node_offering(node, index)
        if offering is None:
            continue
        workload = tuple(workloads[node.name])
        kept = tuple(empty.kept(workload))
        if not kept or any(p.topological for p in kept):
            continue  # an empty node is scale-down's; a topological pod only moves to nodes that exist
        if underutilised.utilization(node, kept) >= underutilised.threshold(node, cfg):
            continue  # moving a busy node's pods costs their work so far; only an under-used node repays it
        sd = cfg.scale_down
        if not _settled(kept, now, sd.node_unneeded_duration, sd.replace_young_pods_within):
            continue
        if eviction_blocker(workload, snapshot.pdbs, {}) or gang_blocker(workload, snapshot, ()):
            continue
        out.append(Candidate(node, workload, kept, offering.price))
    out.sort(key=lambda c: (len(c.kept), -c.price, c.node.name))
    return out


@dataclass(slots=True)
class Consolidation:
    """What one pass chose: the removals, and the nodes that took pods (they stay)."""

    removals: list[Removal]
    landed: set[str]


def consolidate(
    found: Sequence[Candidate],
    snapshot: Snapshot,
    index: OfferingIndex,
    *,
    engine: Engine,
    staying: Collection[str],
    total: Usage,
    evicting: dict[tuple[str, str], int],
    replace: bool,
) -> Consolidation:
    """Removals for ``found`` (see the module): into the room of the nodes that exist, then onto new nodes
    when ``replace``. ``staying`` are the nodes no pod may move to (held, leaving); ``total`` what counts
    against the cluster limits with every node up and this plan's launches made; ``evicting`` the pods
    already being evicted per PodDisruptionBudget, which this pass adds to."""
    cfg = index.config
    out = Consolidation([], set())
    removed: set[str] = set()
    for c in found:
        if c.node.name in out.landed:
            continue
        counted = dict(evicting)
        if eviction_blocker(c.workload, snapshot.pdbs, counted):
            continue
        targets = [
            b
            for b in engine.bins
            if b.kind == Kind.NODE
            and b.name != c.node.name
            and b.name not in staying
            and b.name not in removed
        ]
        landed: set[str] = set()
        if underutilised.move(c.kept, c.node, engine, targets, cfg, landed):
            continue
        evicting.update(counted)
        removed.add(c.node.name)
        out.landed |= landed
        where = ", ".join(sorted(landed)[:3]) + (", ..." if len(landed) > 3 else "")
        out.removals.append(
            Removal(
                c.node.name,
                f"multi-node: its {count(len(c.kept), 'pod')} fit on {where}, which stay",
                False,
                tuple(p.key for p in c.workload),
                Method.UNDERUTILISED,
                gpus=node_gpus(c.node),
            )
        )
    if not replace or cfg.scale_down.replace_savings >= 1.0:
        return out
    left = [c for c in found if c.node.name not in removed and c.node.name not in out.landed][:MAX_SET]
    best = _largest_set(left, snapshot, index, total, evicting)
    if best is not None:
        chosen, plan = best
        price = sum(c.price for c in chosen)
        lead = chosen[0]
        names = ", ".join(c.node.name for c in chosen[1:4]) + (", ..." if len(chosen) > 4 else "")
        eviction_blocker(lead.workload, snapshot.pdbs, evicting)
        out.removals.append(
            Removal(
                lead.node.name,
                (
                    f"multi-node: {count(len(plan.launches), 'new node')} hold the pods of {len(chosen)} nodes "
                    f"(this one, {names}) for ${plan.cost:.4f}/h instead of ${price:.4f}/h"
                ),
                False,
                tuple(p.key for p in lead.workload),
                Method.REPLACE,
                plan.launches,
                gpus=node_gpus(lead.node),
            )
        )
    return out


def _largest_set(
    left: Sequence[Candidate],
    snapshot: Snapshot,
    index: OfferingIndex,
    total: Usage,
    evicting: Mapping[tuple[str, str], int],
) -> tuple[Sequence[Candidate], NewNodes] | None:
    """The largest leading set of at least two of ``left`` that new nodes replace cheaply enough, by binary
    search on its size (as Karpenter does: a set that fails is not proof that every larger one fails, but the
    search stays at a handful of plans)."""
    lo, hi = 2, len(left)
    best: tuple[Sequence[Candidate], NewNodes] | None = None
    while lo <= hi:
        mid = (lo + hi) // 2
        chosen = left[:mid]
        plan = _replaces(chosen, snapshot, index, total, evicting)
        if plan is None:
            hi = mid - 1
        else:
            best = (chosen, plan)
            lo = mid + 1
    return best


def _replaces(
    chosen: Sequence[Candidate],
    snapshot: Snapshot,
    index: OfferingIndex,
    total: Usage,
    evicting: Mapping[tuple[str, str], int],
) -> NewNodes | None:
    """New nodes for every pod of ``chosen`` that cost at least ``replaceSavings`` less than they do and fit
    the cluster limits beside them; None when there are none."""
    cfg = index.config
    pods = [p for c in chosen for p in c.workload]
    if eviction_blocker(pods, snapshot.pdbs, dict(evicting)):
        return None  # each node's pods may go, but a budget's allowance does not cover them all
    plan = new_nodes([p for c in chosen for p in c.kept], index)
    if plan.blocker:
        return None
    price = sum(c.price for c in chosen)
    # At any saving, strictly cheaper: new nodes at the same price would be just as consolidatable, and
    # their pods would be moved again and again.
    if plan.cost > price * (1 - cfg.scale_down.replace_savings) or plan.cost >= price:
        return None
    if not within_limits(plan.usage, total, cfg):
        return None
    return plan
