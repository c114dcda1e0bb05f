"""The pure decision core's entry point: snapshot + offerings + config + now → one plan."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Protocol

from autoscaler.config.values import Config
from autoscaler.core import capacity_buffer, provisioning
from autoscaler.core.census import PodCensus
from autoscaler.core.demand import Demand, Ignored, select
from autoscaler.core.demand_memo import DemandMemo
from autoscaler.core.disruption.choose import disrupt
from autoscaler.core.gpu.dra_demand import resolve_claims
from autoscaler.core.model import Pod, Snapshot
from autoscaler.core.offering import Offering
from autoscaler.core.planning.cluster import build_engine, pods_by_node, usage
from autoscaler.core.planning.decisions import NO_USAGE, Launching, LaunchPlan, RemovalPlan, Usage
from autoscaler.core.planning.estimates import Estimate, estimate
from autoscaler.core.planning.offerings import OfferingIndex, OfferingsMemo
from autoscaler.core.planning.queues import QueueView, queue_costs, queue_views
from autoscaler.core.planning.rooms import NodeRooms
from autoscaler.core.planning.scaleup import scale_up
from autoscaler.core.planning.stories import pod_story
from autoscaler.core.planning.why import PodStory

__all__ = ["Plan", "PlanInput", "Planner", "plan"]


@dataclass(frozen=True, slots=True)
class Plan:
    """One reconcile's decisions: launches, removals, and a verdict for every pending pod."""

    demand: Demand
    launch: LaunchPlan
    removal: RemovalPlan
    # The whole story of each pod ``PlanInput.explain`` asked about, by pod key.
    stories: Mapping[str, PodStory] = field(default_factory=dict)
    # What pods gated for a cost estimate would get (they are never launched for).
    estimates: tuple[Estimate, ...] = ()
    # Every KAI queue: GPUs it holds, waits for and has launching, and what the nodes serving it cost.
    queues: tuple[QueueView, ...] = ()
    # The conditions for each ProvisioningRequest and the status of each CapacityBuffer.
    provisioning: tuple[provisioning.Answer, ...] = ()
    buffers: tuple[capacity_buffer.BufferAnswer, ...] = ()

    @property
    def gpus_after(self) -> int:
        """GPUs once this plan is carried out: those counted before, plus launches, minus removals."""
        return self.launch.gpus_after - sum(r.gpus for r in self.removal.removals)

    @property
    def ignored(self) -> list[Ignored]:
        """Pending pods that need no new node, with why (including those that fit existing room)."""
        return sorted([*self.demand.ignored, *self.launch.absorbed], key=lambda i: i.pod)


@dataclass(frozen=True, slots=True)
class PlanInput:
    """Everything one plan is made from; the same input gives the same plan.

    ``launching`` are nodes the cloud is still bringing up that have no Node yet (the fleet knows them);
    ``launching_usage`` is what it counts against the limits. ``memo`` keeps the offerings prepared by an
    earlier plan (an :class:`~autoscaler.core.planning.offerings.OfferingsMemo`), reused while the offerings and
    config stay the same; ``index`` is such a preparation made by the caller. ``explain`` names pods
    (namespace/name) whose whole story the plan should tell. ``node_template`` is the digest of what a node
    launched now is made from (a node launched from another has drifted); ``draining`` the nodes whose drains
    are under way. ``launched_for`` names, by pod key, the launching (or registered, not yet Ready) node a
    pending pod was launched for: that node takes that pod before any other. ``by_node`` is
    :func:`~autoscaler.core.planning.cluster.pods_by_node` of the snapshot's pods when the caller already has
    it (a cache whose pods did not change since the last plan); the plan only reads it, and not when it
    resolves pods' ResourceClaims (those pods are then new ones). ``rooms`` keeps each node's room for pending
    pods from the last plan made with it (:class:`~autoscaler.core.planning.rooms.NodeRooms`), worked out again
    only for the nodes that changed; not used either when pods' ResourceClaims are resolved. ``census`` is
    :func:`~autoscaler.core.census.census` of the snapshot's pods, kept with them by the caller. ``screened``
    keeps what demand read of each pending pod at the last plan made with it
    (:class:`~autoscaler.core.demand_memo.DemandMemo`), read again only for pods that changed.
    """

    snapshot: Snapshot
    offerings: Sequence[Offering]
    config: Config
    now: float
    _: KW_ONLY
    launching: Sequence[Launching] = ()
    launching_usage: Usage = NO_USAGE
    unneeded_since: Mapping[str, float] | None = None
    memo: OfferingsMemo[OfferingIndex] | None = None
    index: OfferingIndex | None = None
    explain: Collection[str] = ()
    node_template: str = ""
    draining: Collection[str] = ()
    launched_for: Mapping[str, str] = field(default_factory=dict)
    by_node: Mapping[str, list[Pod]] | None = None
    rooms: NodeRooms | None = None
    census: PodCensus | None = None
    screened: DemandMemo | None = None


class Planner(Protocol):
    """A planning policy: tidal's :func:`plan`, or a baseline the simulator compares it with."""

    def __call__(self, request: PlanInput, /) -> Plan: ...


def plan(request: PlanInput) -> Plan:
    """Decide scale-up and scale-down for one snapshot. Pure: same input, same plan."""
    snapshot, offerings, config, now = request.snapshot, request.offerings, request.config, request.now
    launching, launching_usage = request.launching, request.launching_usage
    index = request.index
    if index is None and request.memo is not None:
        index = request.memo.get(offerings, config, snapshot.daemonsets)
    if index is None or index.config is not config or index.daemonsets != tuple(snapshot.daemonsets):
        index = OfferingIndex(offerings, config, snapshot.daemonsets)
    given = snapshot
    snapshot = resolve_claims(snapshot, index.dra_types(), census=request.census)
    requests = provisioning.requested(snapshot, now)
    buffers = capacity_buffer.standby(snapshot)
    demand = select(
        snapshot,
        config,
        gpu_memory_mib=index.smallest_gpu_memory(),
        requested=requests.gangs,
        standby=buffers.pods,
        census=request.census,
        memo=request.screened,
    )
    # The caller's grouping is of the pods it gave: pods whose claims were resolved just now are new ones.
    by_node = (
        request.by_node if request.by_node is not None and snapshot is given else pods_by_node(snapshot.pods)
    )
    facts = None
    if request.rooms is not None and snapshot is given:
        engine = request.rooms.engine(snapshot, index, launching=launching, by_node=by_node)
        facts, base = request.rooms.facts, request.rooms.usage
    else:
        engine = build_engine(snapshot, index, launching=launching, by_node=by_node)
        base = usage(snapshot)
    total = base + launching_usage
    spend = queue_costs(snapshot, index, launching, by_node=by_node, facts=facts)
    launch = scale_up(
        demand, index, engine, usage=total, queue_spend=spend, now=now, launched_for=request.launched_for
    )
    needed = {a.node for a in launch.absorbed}
    # A replacement is planned within what this plan's launches leave of the limits; and while a limit keeps
    # pending pods out, none at all: the budget a replaced node frees would go to them, and its own pods, back
    # to pending, would find the same node again, and be moved again.
    total += Usage.of(la.offering for la in launch.launches)
    # Standby capacity held back by a limit contends with nothing: it yields to every other pod.
    placeholders = {p.key for p in demand.standby}
    contended = next((u.reason for u in launch.unplaced if u.limited and u.pod not in placeholders), "")
    removal = disrupt(
        snapshot,
        index,
        now,
        unneeded_since=request.unneeded_since,
        needed=needed,
        by_node=by_node,
        engine=engine,
        total=total,
        contended=contended,
        template=request.node_template,
        draining=request.draining,
        census=request.census,
        facts=facts,
    )
    stories = {key: pod_story(key, snapshot, demand, launch, index) for key in request.explain}
    # The queue of every pod counted as demand was read by select (those of no queue are not kept there).
    known = {p.key: demand.queues.get(p.key, "") for p in demand.counted}
    queues = queue_views(snapshot, launch, index, launching, spend, request.census, known)
    return Plan(
        demand,
        launch,
        removal,
        stories,
        estimate(demand, index),
        queues,
        provisioning.answer(requests, demand, launch, now),
        capacity_buffer.answer(buffers, demand, launch, now),
    )
