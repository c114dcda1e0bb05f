"""Replace: new nodes for a node's pods, planned by the scale-up planner, for the methods that launch first
(a cheaper node, an expired or drifted one), and the price test of the cheaper replacement.

A replacement is launched, and Ready with its GPUs visible, before any pod leaves the old node, so for a
while both are up: it goes first only when the cluster limits hold both. When they hold the new nodes only
with the old one gone, a cheaper replacement still happens, drain first (its pods then get the new nodes from
the ordinary scale-up, within the limits); an expired or drifted node then waits.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from autoscaler.config.values import Config
from autoscaler.core.demand import Demand
from autoscaler.core.fit import AnnotationError, pod_constraints
from autoscaler.core.model import LABEL_CAPACITY_TYPE, LABEL_INSTANCE_TYPE, LABEL_ZONE, Node, Pod
from autoscaler.core.offering import Offering
from autoscaler.core.placement.engine import Engine
from autoscaler.core.planning.cluster import node_gpus
from autoscaler.core.planning.decisions import NO_USAGE, Launch, PlannedReplacement, Usage
from autoscaler.core.planning.offerings import OfferingIndex
from autoscaler.core.planning.scaleup import scale_up

__all__ = [
    "NewNodes",
    "Replacement",
    "cheaper",
    "new_nodes",
    "node_offering",
    "replacement",
    "unlimited",
    "within_limits",
    "without",
]


@dataclass(frozen=True, slots=True)
class Replacement:
    """New nodes for a node's pods: what they cost, the launches, and whether they may go up while the old
    node still runs (``first``); or why there are none (``blocker``)."""

    blocker: str = ""
    cost: float = float("inf")
    launches: tuple[Launch, ...] = ()
    first: bool = False
    # The blocker is a pod's annotation tidal cannot read (an error message, not a clause about new nodes).
    unreadable: bool = False


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


def without(total: Usage, node: Node) -> Usage:
    """What counts against the limits once ``node`` is gone."""
    return Usage(
        gpus=max(0, total.gpus - node_gpus(node)),
        cpu_milli=max(0, total.cpu_milli - (node.capacity.cpu or node.allocatable.cpu)),
        managed_nodes=max(0, total.managed_nodes - node.managed),
    )


def within_limits(needs: Usage, used: Usage, cfg: Config) -> bool:
    """Whether ``needs`` more fit the cluster limits on top of ``used``."""
    return (
        (cfg.cluster_gpu_limit is None or used.gpus + needs.gpus <= cfg.cluster_gpu_limit)
        and (cfg.cluster_cpu_limit is None or used.cpu_milli + needs.cpu_milli <= cfg.cluster_cpu_limit)
        and (cfg.max_nodes is None or used.managed_nodes + needs.managed_nodes <= cfg.max_nodes)
    )


def _planned(demand: Demand, index: OfferingIndex, usage: Usage) -> PlannedReplacement:
    launch = scale_up(demand, index, Engine(index), usage=usage)
    if launch.unplaced:
        return PlannedReplacement(float("inf"), launch.unplaced[0].reason, NO_USAGE, ())
    # The pods the launches name are this pod set's shapes, not these pods: a replacement is for the node.
    launches = tuple(dataclasses.replace(la, pods=()) for la in launch.launches)
    return PlannedReplacement(
        launch.cost_per_hour, "", Usage.of(la.offering for la in launch.launches), launches
    )


@dataclass(frozen=True, slots=True)
class NewNodes:
    """The cheapest new nodes for a set of pods, planned without the cluster limits: what they cost, the
    launches and what they count against the limits; or why there are none (``blocker``)."""

    blocker: str = ""
    cost: float = float("inf")
    launches: tuple[Launch, ...] = ()
    usage: Usage = NO_USAGE
    unreadable: bool = False


def new_nodes(pods: Sequence[Pod], index: OfferingIndex) -> NewNodes:
    """The cheapest new nodes for ``pods`` alone, planned by the scale-up planner without limits (once per
    offering index for the same pod shapes: a node keeps the same pods for hours)."""
    found, _ = unlimited(pods, index)
    if isinstance(found, str):
        return NewNodes(found, unreadable=True)
    if found.unplaced:
        return NewNodes(f"no offering holds them ({found.unplaced})")
    return NewNodes("", found.cost, found.launches, found.usage)


def unlimited(
    pods: Sequence[Pod], index: OfferingIndex
) -> tuple[PlannedReplacement | str, tuple[object, ...]]:
    """(the cheapest new nodes for ``pods`` alone, planned without limits, and the key that plan is kept
    under in the index's memo), or (why the pods cannot be read, ()). What :func:`replacement` starts from: a
    caller that asks again about the same pods may keep it and hand it back as ``planned``."""
    try:
        constraints = {p.key: pod_constraints(p, index.config) for p in pods}
    except AnnotationError as err:
        return str(err), ()
    memo = index.memo.replacements
    key = tuple(sorted(((constraints[p.key], p.requests) for p in pods), key=repr))
    found = memo.get(key)
    if found is None:
        found = memo[key] = _planned(Demand(singles=list(pods), constraints=constraints), index, NO_USAGE)
    return found, key


def replacement(
    node: Node,
    pods: Sequence[Pod],
    index: OfferingIndex,
    total: Usage,
    *,
    planned: tuple[PlannedReplacement | str, tuple[object, ...]] | None = None,
) -> Replacement:
    """New nodes for ``pods`` (``total``: what counts against the limits with ``node`` still up).
    ``planned`` is :func:`unlimited` of ``pods``, when the caller kept it."""
    if any(p.topological for p in pods):
        # New nodes are planned for them alone, without the rest of the cluster their affinity or spread is
        # about: such pods only move to nodes that exist.
        return Replacement("their affinity or topology spread keeps them off new nodes")
    # The same node keeps the same pods for hours: plan its replacement once per offering index, without
    # limits; only when that plan would not fit what the limits leave is it planned again within them.
    free_plan, key = planned if planned is not None else unlimited(pods, index)
    if isinstance(free_plan, str):
        return Replacement(free_plan, unreadable=True)
    found = free_plan
    if found.unplaced:
        return Replacement(f"no offering holds them ({found.unplaced})")
    memo = index.memo.replacements
    cfg = index.config
    if within_limits(found.usage, total, cfg):
        return Replacement("", found.cost, found.launches, first=True)
    after = without(total, node)
    if not within_limits(found.usage, after, cfg):
        limited_key = (*key, after)
        limited = memo.get(limited_key)
        if limited is None:
            demand = Demand(singles=list(pods), constraints={p.key: pod_constraints(p, cfg) for p in pods})
            limited = memo[limited_key] = _planned(demand, index, after)
        found = limited
        if found.unplaced:
            return Replacement(f"no offering holds them ({found.unplaced})")
    return Replacement("", found.cost, found.launches, first=within_limits(found.usage, total, cfg))


def cheaper(
    node: Node,
    pods: Sequence[Pod],
    index: OfferingIndex,
    savings: float,
    total: Usage,
    *,
    planned: tuple[PlannedReplacement | str, tuple[object, ...]] | None = None,
) -> tuple[str, str, Replacement]:
    """(why not, "", _) or ("", how, replacement): new nodes may take ``pods`` when they cost at least
    ``savings`` less than ``node`` (Karpenter's single-node replace).

    The new nodes must fit the cluster limits with ``node`` gone (``total`` is the usage with it): a
    replacement the limits forbid would leave its pods to the node that fits, the same as this one, which
    would be replaced again, and again. ``planned`` as for :func:`replacement`."""
    current = node_offering(node, index)
    if current is None:
        return "nowhere to move its pods, and its price is unknown", "", Replacement()
    found = replacement(node, pods, index, total, planned=planned)
    if found.blocker:
        if found.unreadable:
            return f"nowhere to move its pods ({found.blocker})", "", found
        return f"nowhere to move its pods, and {found.blocker}", "", found
    cost = found.cost
    if cost > current.price * (1 - savings):
        return (
            (
                f"nowhere to move its pods; new nodes for them would cost ${cost:.4f}/h against "
                f"${current.price:.4f}/h now, less than {savings:.0%} saved"
            ),
            "",
            found,
        )
    if cost >= current.price:
        # Even at replaceSavings 0 a move must save something: a replacement at the same price is just as
        # under-used and would be replaced in turn, restarting its pods over and over for nothing.
        return (
            (
                f"nowhere to move its pods; new nodes for them would cost ${cost:.4f}/h, "
                f"no less than ${current.price:.4f}/h now"
            ),
            "",
            found,
        )
    return "", f"new nodes hold its pods for ${cost:.4f}/h instead of ${current.price:.4f}/h", found
