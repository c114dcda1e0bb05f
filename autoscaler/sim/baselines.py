"""Baseline policies for comparison, run by the same controller in the same simulator.

- ``ca-like``: cluster-autoscaler's shape — one node group per allowed instance type (on-demand, first zone),
  reacts to every unschedulable pod, first-fit-decreasing with the least-waste expander, scale-down after
  10 minutes under 50% utilisation, and never a node replaced by cheaper ones (cluster-autoscaler only
  removes nodes whose pods fit elsewhere).
- ``karpenter-like``: first-fit-decreasing into nodes that keep a flexible set of instance types, the
  cheapest offering chosen at the end, spot and on-demand as the pod allows; no queue awareness. Scale-down
  is tidal's, replacing nodes by cheaper ones included, as Karpenter's consolidation does.

Reserved capacity: karpenter-like uses it as Karpenter does (a capacity type priced near zero, preferred,
never past a reservation's free count, an empty reserved node deleted like any other); ca-like as
cluster-autoscaler users run it, a node group of the reservation's size kept full for as long as the
reservation lasts, whatever the demand. Both drain Capacity Block nodes before the block ends (the
controller does that for every policy).

Both honour ``clusterGPULimit`` (cluster-autoscaler's ``--gpu-total``, a NodePool limit in Karpenter). What
they lack is what tidal adds: a pending pod held back by its KAI queue is demand to them, and they read no
KAI annotation: a pod asking KAI for part of a GPU is, to them, a pod of its CPU and memory (which may fit a
node KAI can never put it on), and they buy GPUs for it only through the scaling pods of KAI's
node-scale-adjuster (:mod:`autoscaler.sim.scale_adjuster`), which they see as ordinary pending GPU pods.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from autoscaler.config.values import Config
from autoscaler.core.census import PodCensus
from autoscaler.core.demand import select
from autoscaler.core.demand_memo import DemandMemo
from autoscaler.core.disruption.choose import held_nodes
from autoscaler.core.gpu.kai_pods import (
    SCALE_ADJUST_NAMESPACE,
    SHARED_POD_NAME_LABEL,
    SHARED_POD_NAMESPACE_LABEL,
    is_scale_adjuster_pod,
)
from autoscaler.core.model import CapacityType, Pod, Snapshot
from autoscaler.core.offering import Offering
from autoscaler.core.planning.cluster import pods_by_node
from autoscaler.core.planning.decisions import (
    BIN_SELECTION,
    Launch,
    Launching,
    LaunchPlan,
    Unplaced,
    Usage,
)
from autoscaler.core.planning.offerings import OfferingIndex, OfferingsMemo, price_order
from autoscaler.core.planning.planner import Plan, PlanInput, Planner
from autoscaler.core.planning.reserved import ReservedRoom
from autoscaler.core.planning.rooms import NodeRooms
from autoscaler.core.planning.scaledown import scale_down
from autoscaler.core.planning.scaleup import scale_up
from autoscaler.core.resources import PODS, Resources

POLICIES = ("tidal", "ca-like", "karpenter-like")
FIRST_FIT_WINDOW = 64


@dataclass(slots=True)
class _Node:
    options: list[Offering]  # offerings that still hold every pod placed so far
    used: Resources
    pods: list[str] = field(default_factory=list)
    # The most of each resource any of the options has: a pod that overflows it fits none of them.
    ceiling: Resources = field(default_factory=Resources)


def _ceiling(options: Sequence[Offering], index: OfferingIndex) -> Resources:
    top: dict[str, int] = {}
    for o in options:
        for k, v in index.allocatable(o).items():
            if v > top.get(k, 0):
                top[k] = v
    return Resources(top)


@dataclass(frozen=True, slots=True)
class _Prepared:
    """What a baseline derives from one set of offerings and one config, reused while neither changes."""

    config: Config
    blind: Config
    index: OfferingIndex
    room_only: OfferingIndex
    reserved: tuple[Offering, ...] = ()  # the reservations' offerings (ca-like keeps their nodes up)


def _prepare(
    policy: str, offerings: Sequence[Offering], config: Config, daemonsets: Sequence[Any]
) -> _Prepared:
    """The baseline's view of the offerings and config: queue-blind, and for ca-like, fixed node groups."""
    # What a queue-unaware autoscaler sees: every unschedulable pod is demand.
    blind = replace(config, pending_pod_reason_regexp=re.compile(".*"), scheduler_names=())
    usable = offerings
    reserved = tuple(o for o in offerings if o.reservation is not None)
    if policy == "karpenter-like":
        blind = replace(blind, reservations=replace(config.reservations, reserved_nodes="release"))
    if policy == "ca-like":
        groups: dict[str, Offering] = {}
        first_zone = config.zones[0] if config.zones else ""
        for o in sorted(offerings, key=price_order):
            if o.capacity_type == CapacityType.ON_DEMAND and (not first_zone or o.zone in ("", first_zone)):
                groups.setdefault(o.instance_type, o)
        # The reservations stay listed (their node groups' nodes are kept), though no pod launches into them.
        usable = [*groups.values(), *reserved]
        blind = replace(
            blind,
            capacity_types=(CapacityType.ON_DEMAND.value,),
            scale_down=replace(
                config.scale_down,
                node_unneeded_duration=600.0,
                utilization_threshold_bin_packing=0.5,
                utilization_threshold_bin_selection=0.5,
                replace_savings=1.0,
            ),
        )
    # Karpenter's consolidateAfter and cluster-autoscaler's scale-down-unneeded-time are one wait for every
    # node: tidal's shorter wait for empty nodes nobody waits for is not theirs.
    blind = replace(
        blind,
        scale_down=replace(blind.scale_down, unneeded_without_demand=blind.scale_down.node_unneeded_duration),
    )
    return _Prepared(
        config,
        blind,
        OfferingIndex(usable, blind, daemonsets),
        OfferingIndex([], blind),
        reserved,
    )


def _ffd(
    pods: Sequence[Pod],
    constraints: Mapping[str, Any],
    index: OfferingIndex,
    budget_gpus: int | None,
    choose: str,
    room: ReservedRoom | None = None,
) -> tuple[list[Launch], list[Unplaced]]:
    """First-fit-decreasing into new nodes; ``choose`` picks a new node's offering set. ``room`` is what each
    reservation still takes: a node opened into one stays in it."""
    nodes: list[_Node] = []
    unplaced: list[Unplaced] = []
    gpus_left = budget_gpus
    order = sorted(pods, key=lambda p: (-p.requests.gpus, -p.requests.cpu, -p.requests.memory, p.key))
    # The offerings each pod's constraints allow, and what a new node of each can hold, by the offering's
    # identity: every offering here is one of ``index``'s, and hashing an offering's fields for every pod and
    # open node was most of the first fit.
    eligible_sets: dict[Any, set[int]] = {}
    allocs: dict[int, Resources] = {}
    # Per constraints and request: the offerings a new node for such a pod may be, in the order ``choose``
    # ranks them (a burst has thousands of pods of a few shapes, and thousands of offerings to rank).
    ranked: dict[tuple[Any, Resources], list[Offering]] = {}
    # Per key of ``ranked``: the fewest GPUs of its offerings outside reservations, and whether any is in one;
    # once the GPU budget is spent, a pod whose every offering has more GPUs is unplaced without a look.
    floors: dict[tuple[Any, Resources], tuple[float, bool]] = {}
    needs: dict[Resources, Resources] = {}  # what a pod of these requests takes, a pod slot included
    for pod in order:
        need = needs.get(pod.requests)
        if need is None:
            need = needs[pod.requests] = pod.requests + {PODS: 1000}
        eligible, reason = index.eligible(constraints[pod.key])
        allowed = eligible_sets.get(constraints[pod.key])
        if allowed is None:
            allowed = eligible_sets[constraints[pod.key]] = {id(o) for o in eligible}
            allocs.update((id(o), index.allocatable(o)) for o in eligible)
        # First fit over the most recently opened nodes: a bounded window keeps 10,000-pod bursts tractable.
        for node in nodes[-FIRST_FIT_WINDOW:]:
            if need.times_fit(node.ceiling, node.used) < 1:
                continue  # no option of the node has room for it
            after = node.used + need
            options = [o for o in node.options if id(o) in allowed and after.fits_in(allocs[id(o)])]
            if options and (choose != "ca" or options[0] == node.options[0]):
                if len(options) != len(node.options):
                    node.ceiling = _ceiling(options, index)
                node.options, node.used = options, after
                node.pods.append(pod.key)
                break
        else:
            key = (constraints[pod.key], need)
            candidates = ranked.get(key)
            if candidates is None:
                holding = [o for o in eligible if need.fits_in(index.allocatable(o))]
                if choose == "ca":
                    # Least waste: the group whose node is left with the smallest unused share.
                    holding.sort(key=lambda o: (_waste(need, index.allocatable(o)), price_order(o)))
                else:
                    holding.sort(key=price_order)
                candidates = ranked[key] = holding
                floors[key] = (
                    min((o.gpu_count for o in holding if o.reservation is None), default=math.inf),
                    any(o.reservation is not None for o in holding),
                )
            floor, reserved = floors[key]
            if gpus_left is not None and gpus_left < floor and not reserved:
                fitting = []
            else:
                fitting = [
                    o
                    for o in candidates
                    if (gpus_left is None or o.gpu_count <= gpus_left)
                    and (o.reservation is None or (room is not None and room.left(o) >= 1))
                ]
            if not fitting:
                unplaced.append(
                    Unplaced(
                        pod.key,
                        reason.message if reason else "no offering fits or GPU limit reached",
                        rejection=reason,
                        no_offering=not candidates,
                    )
                )
                continue
            if choose == "ca":
                options = fitting[:1]
            else:
                options = fitting
                if options[0].reservation is not None and room is not None:
                    options = options[:1]  # reserved first, as Karpenter prices it near zero
                    room.take(options[0])
                else:
                    options = [o for o in options if o.reservation is None]
            if gpus_left is not None:
                gpus_left -= max(o.gpu_count for o in options[:1])
                options = [o for o in options if o.gpu_count <= options[0].gpu_count]
            nodes.append(_Node(options, need, [pod.key], _ceiling(options, index)))
    launches = [Launch(min(n.options, key=price_order), tuple(sorted(n.pods)), BIN_SELECTION) for n in nodes]
    return launches, unplaced


def _waste(need: Resources, alloc: Resources) -> float:
    shares = [1 - need.get(r, 0) / alloc[r] for r in ("cpu", "memory", "nvidia.com/gpu") if alloc.get(r)]
    return sum(shares) / len(shares)


def peer_view(snapshot: Snapshot) -> Snapshot:
    """The cluster as cluster-autoscaler or Karpenter see it: no KAI queues, no GPU share in any pod's
    annotations, and the node-scale-adjuster's scaling pods as the ordinary pending pods they are to them."""
    pods = []
    changed = False
    for p in snapshot.pods:
        if p.gpu_share is not None or p.gpu_share_error:
            p = replace(p, gpu_share=None, gpu_share_error="")
            changed = True
        elif is_scale_adjuster_pod(p.namespace, p.labels):
            # tidal's own demand leaves scaling pods out (it plans for their pods itself); a peer acts on them.
            hidden = {SHARED_POD_NAME_LABEL, SHARED_POD_NAMESPACE_LABEL}
            if p.namespace == SCALE_ADJUST_NAMESPACE:
                hidden.add("app")
            p = replace(p, labels={k: v for k, v in p.labels.items() if k not in hidden})
            changed = True
        pods.append(p)
    # The very pods, when none differs for a peer: what was worked out of them (a census) still holds.
    return replace(snapshot, pods=tuple(pods) if changed else snapshot.pods, queues=())


def _plan(
    policy: str,
    prepared: _Prepared,
    rooms: NodeRooms,
    snapshot: Snapshot,
    now: float,
    launching: Sequence[Launching],
    launching_usage: Usage,
    draining: Collection[str] = (),
    census: PodCensus | None = None,
    screened: DemandMemo | None = None,
) -> Plan:
    """``census`` is that of the snapshot's pods, when the caller has it."""
    config, blind, index = prepared.config, prepared.blind, prepared.index
    snapshot = peer_view(snapshot)
    if census is not None and not census.describes(snapshot.pods):
        census = None  # a peer sees some pods otherwise
    demand = select(snapshot, blind, census=census, memo=screened)
    by_node = census.by_node if census is not None else pods_by_node(snapshot.pods)
    engine = rooms.engine(snapshot, index, launching=launching, by_node=by_node)
    base = rooms.usage  # usage(snapshot), counted with the rooms
    total = Usage(
        base.gpus + launching_usage.gpus,
        base.cpu_milli + launching_usage.cpu_milli,
        base.managed_nodes + launching_usage.managed_nodes,
    )
    # Existing and launching room first (both real autoscalers simulate scheduling onto them), then FFD.
    absorbed = scale_up(
        replace(demand, singles=demand.counted, gangs=[]),
        prepared.room_only,
        engine,
        usage=total,
    )
    left = {u.pod for u in absorbed.unplaced}
    pods = [p for p in demand.counted if p.key in left]
    limit = config.cluster_gpu_limit
    budget = None if limit is None else max(0, limit - total.gpus)
    room = ReservedRoom.of(prepared.reserved, config, now)
    fixed = _fill(prepared.reserved, room, budget) if policy == "ca-like" else []
    if budget is not None:
        budget -= sum(la.offering.gpu_count for la in fixed)
    launches, unplaced = _ffd(
        pods, demand.constraints, index, budget, "ca" if policy == "ca-like" else "karpenter", room
    )
    launches = fixed + launches
    plan = LaunchPlan(
        tuple(launches),
        tuple(unplaced),
        absorbed.absorbed,
        total.gpus,
        total.gpus + sum(la.offering.gpu_count for la in launches),
    )
    needed = {a.node for a in absorbed.absorbed}
    # Like Karpenter, never consolidate a node that is being replaced or is a replacement still waiting for
    # the pods it was launched for.
    held = held_nodes(snapshot, draining)
    removal = scale_down(
        snapshot,
        index,
        now,
        needed=needed,
        by_node=by_node,
        engine=engine,
        total=base,
        held=held,
        census=census,
        facts=rooms.facts,
    )
    return Plan(demand, plan, removal)


def _fill(reserved: Sequence[Offering], room: ReservedRoom, budget_gpus: int | None) -> list[Launch]:
    """ca-like's node groups of reservations: a node for every instance a reservation has free (within the
    GPU limit), whether pods need it or not, as a group of fixed size would run."""
    out = []
    for o in sorted(reserved, key=lambda o: o.key):
        r = o.reservation
        assert r is not None
        while room.left(o) >= 1 and (budget_gpus is None or o.gpu_count <= budget_gpus):
            slot = r.total - room.left(o)  # a name per place, so each place is launched (and retried) once
            room.take(o)
            if budget_gpus is not None:
                budget_gpus -= o.gpu_count
            out.append(Launch(o, (f"reservation/{r.id}-{slot}",), BIN_SELECTION))
    return out


def planner_for(policy: str) -> Planner | None:
    """The planning policy the controller should use for ``policy`` (None: tidal's own)."""
    if policy == "tidal":
        return None
    if policy not in POLICIES:
        raise ValueError(f"--policy: {policy!r} is not one of {', '.join(POLICIES)}")
    prepared = OfferingsMemo(lambda o, c, d: _prepare(policy, o, c, d))
    rooms = NodeRooms()  # the nodes' room and what scale-down read of them, kept from one plan to the next
    screened = DemandMemo()  # what demand read of each pending pod, kept from one plan to the next

    def planner(request: PlanInput, /) -> Plan:
        ready = prepared.get(request.offerings, request.config, request.snapshot.daemonsets)
        return _plan(
            policy,
            ready,
            rooms,
            request.snapshot,
            request.now,
            request.launching,
            request.launching_usage,
            request.draining,
            request.census,
            screened,
        )

    return planner
