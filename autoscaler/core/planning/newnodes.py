"""New nodes: which instance type to open one as, what else it may still become, and the final choice.

*Bin-selection* picks, per pod class, the shape with the lowest price per pod placed (a dedicated right-sized
node unless sharing is cheaper); *bin-packing* does the same among shapes of at least the configured
``binPackingNode*`` size. The node then keeps every option that still holds its pods at no higher price
(and no more GPUs or cpu than were counted against the limits), so pods of other classes may join it, and
it takes the cheapest of them when the plan is final.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from autoscaler.core.fit import Constraints, last_candidate
from autoscaler.core.gpu.share import GpuShare
from autoscaler.core.offering import Offering
from autoscaler.core.placement.bins import Bin, Option
from autoscaler.core.placement.filters import insufficient_all
from autoscaler.core.placement.gpus import GpuSlots, device_model, device_slots
from autoscaler.core.placement.reasons import TOO_MANY_PODS, Filter, Rejection
from autoscaler.core.planning.decisions import BIN_PACKING
from autoscaler.core.planning.offerings import OfferingIndex, price_order
from autoscaler.core.planning.reserved import ReservedRoom, rank
from autoscaler.core.quantity import format_memory, format_quantity
from autoscaler.core.resources import CPU, GPU_RESOURCES, MEMORY, PODS, Resources
from autoscaler.core.spot_risk import node_hours, risk_price
from autoscaler.core.words import count

MAX_ALTERNATIVES = 20


@dataclass(slots=True)
class Budget:
    """What the cluster limits leave for new nodes (``None``: no limit), and the $/h each KAI queue with a
    budget may still spend on them (``queues``: what its budget leaves, ``spent``: what it spends already)."""

    gpus: int | None
    cpu_milli: int | None
    nodes: int | None
    queues: dict[str, float] = field(default_factory=dict)
    spent: dict[str, float] = field(default_factory=dict)
    # What each reservation still takes: a reserved offering is a node of its reservation's count.
    reserved: ReservedRoom = field(default_factory=lambda: ReservedRoom({}, {}))

    def within_limits(self, o: Offering) -> bool:
        """The cluster limits leave room for a node of ``o``."""
        return (
            (self.gpus is None or o.gpu_count <= self.gpus)
            and (self.cpu_milli is None or o.vcpu * 1000 <= self.cpu_milli)
            and (self.nodes is None or self.nodes >= 1)
        )

    def allows(self, o: Offering) -> bool:
        """The cluster limits, and the reservation of a reserved offering, leave room for a node of ``o``."""
        return self.within_limits(o) and self.reserved.left(o) >= 1

    def affords(self, o: Offering, queue: str) -> bool:
        """A new node of ``o`` for pods of ``queue`` keeps that queue within its budget (a node opened for a
        queue's pods is all theirs when it is opened)."""
        left = self.queues.get(queue)
        return left is None or o.price <= left + 1e-9

    def count(self, o: Offering, queue: str = "") -> int:
        """How many nodes of ``o`` still fit in the budget."""
        n = self.reserved.left(o)
        if self.gpus is not None and o.gpu_count:
            n = min(n, self.gpus // o.gpu_count)
        if self.cpu_milli is not None and o.vcpu:
            n = min(n, self.cpu_milli // (o.vcpu * 1000))
        if self.nodes is not None:
            n = min(n, self.nodes)
        left = self.queues.get(queue)
        if left is not None and o.price > 0:
            n = min(n, int((left + 1e-9) // o.price))
        return n

    def take(self, o: Offering, sign: int = 1, queue: str = "") -> None:
        self.reserved.take(o, sign)
        if self.gpus is not None:
            self.gpus -= o.gpu_count * sign
        if self.cpu_milli is not None:
            self.cpu_milli -= o.vcpu * 1000 * sign
        if self.nodes is not None:
            self.nodes -= sign
        if queue in self.queues:
            self.queues[queue] -= o.price * sign


def describe(req: Resources) -> str:
    """``"2 nvidia.com/gpu, cpu 8, memory 64Gi"`` for messages."""
    parts = []
    for name in sorted(req, key=lambda k: (k not in GPU_RESOURCES, k != CPU, k != MEMORY, k)):
        if name == PODS:
            continue
        if name == MEMORY or name.startswith("hugepages") or name == "ephemeral-storage":
            parts.append(f"{name} {format_memory(req[name])}")
        elif name == CPU:
            parts.append(f"cpu {format_quantity(req[name])}")
        else:
            parts.append(f"{format_quantity(req[name])} {name}")
    return ", ".join(parts) or "nothing"


@dataclass(frozen=True, slots=True)
class Choice:
    """The shape to open new nodes as, and how many pods of the class each takes."""

    shape: Option
    per_node: int


# ``choose``'s verdicts that an offering fits but may not be launched now; any other says no offering holds
# the pod (its constraints, the configuration or its size left none).
HELD_BACK = frozenset({Filter.CLUSTER_LIMIT, Filter.QUEUE_BUDGET, Filter.RESERVATION})


def choose(
    index: OfferingIndex,
    c: Constraints,
    req: Resources,
    mode: str,
    remaining: int,
    budget: Budget,
    queue: str = "",
) -> Choice | Rejection:
    """The shape with the lowest price per pod placed across every capacity type the pod allows (the pod's
    order of preference breaks ties: spot is nearly always cheaper, but a spot 8-GPU machine never beats an
    on-demand 1-GPU one for a 1-GPU pod), within the limits and ``queue``'s budget; or why there is none."""
    eligible, reason = index.eligible(c)
    if not eligible:
        return reason or Rejection(Filter.CONFIGURATION, "no offerings")
    packing = mode == BIN_PACKING
    fits_somewhere = limited = False
    held: list[Offering] = []  # reserved offerings that fit but whose reservation takes no more
    best: tuple[float, int, float, tuple[float, str, str, str]] | None = None
    chosen: Choice | None = None
    over_budget: Offering | None = None  # the cheapest the limits allow but the queue's budget does not
    share, counts = c.gpu_share, index.memo.share_counts
    for tier, ctype in enumerate(c.capacity_types):
        for shape in index.shapes(c, ctype, packing):
            o = shape.offerings[0]
            if best is not None and o.price / remaining > best[0]:
                # Shapes are in price order: none later in this tier can beat the best (and once a shape is
                # chosen, what the others would have said of the limits is not asked for).
                break
            # (per_node, without the call for the pods of no GPU share: most, weighed on every shape.)
            k = (
                req.times_fits_in(shape.alloc)
                if share is None
                else per_node(shape, req, share, remaining, counts)
            )
            if k <= 0:
                continue
            fits_somewhere = True
            if best is not None and o.price / min(k, remaining) > best[0]:
                continue  # dearer per pod: the rest of its score cannot make it better
            if not budget.allows(o):
                if budget.within_limits(o):
                    held.append(o)
                else:
                    limited = True
                continue
            if not budget.affords(o, queue):
                if over_budget is None or price_order(o) < price_order(over_budget):
                    over_budget = o
                continue
            per_pod = risk_price(o, c.interruption_hours) / min(k, remaining)
            score = (per_pod, tier, rank(o, min(k, remaining)), price_order(o))
            if best is None or score < best:
                best, chosen = score, Choice(shape, k)
    if chosen is not None:
        return _whole_batch(index, c, req, packing, remaining, budget, queue, chosen)
    if over_budget is not None:
        return budget_rejection(index, budget, queue, over_budget)
    if held and not limited:
        return budget.reserved.rejection(held)
    if fits_somewhere:
        return limit_rejection(index, budget)
    return no_fit(index, c, req, mode)


TAIL_NODES = 3  # a batch the chosen shape holds on at most this many nodes is priced whole


def _whole_batch(
    index: OfferingIndex,
    c: Constraints,
    req: Resources,
    packing: bool,
    remaining: int,
    budget: Budget,
    queue: str,
    chosen: Choice,
) -> Choice:
    """For a batch a few nodes hold, the shape that holds all of it for least, when that beats the shape
    cheapest per pod: 8 pods of a quarter GPU, 1 cpu and 4Gi fill three g4dn.xlarge (3 per node, memory-bound:
    $1.578/h) but two g4dn.2xlarge (4 per node, GPU-bound: $1.504/h), though the smaller is cheaper per pod.
    The chosen shape's cost counts its last node as the cheapest shape for what is left on it."""
    k = chosen.per_node
    if k >= remaining or -(-remaining // k) > TAIL_NODES:
        return chosen
    memo = index.memo.share_counts
    hours = c.interruption_hours

    def candidates(below: Callable[[], float]) -> Iterator[tuple[Option, int]]:
        """The shapes that fit and the budget allows, with how many pods each holds, in the pods' order of
        capacity types and then cheapest first, up to the first whose one node costs ``below()`` or more
        (nodes of it, and of every later one of that capacity type, cost at least that much: interruptions only
        add to a price)."""
        for ctype in c.capacity_types:
            for shape in index.shapes(c, ctype, packing):
                o = shape.cheapest
                if o.price >= below():
                    break
                if not budget.allows(o) or not budget.affords(o, queue):
                    continue
                n = per_node(shape, req, c.gpu_share, remaining, memo)
                if n > 0:
                    yield shape, n

    rest = remaining % k
    tail = 0.0
    if rest:
        # The cheapest nodes for the pods the last node of the chosen shape would hold (the chosen shape is
        # one candidate, so there is one).
        least = [math.inf]
        for s, n in candidates(lambda: least[0]):
            least[0] = min(least[0], -(-rest // n) * risk_price(s.cheapest, hours))
        tail = least[0] if least[0] < math.inf else 0.0
    best = [(remaining // k) * risk_price(chosen.shape.cheapest, hours) + tail]
    found = chosen
    for shape, n in candidates(lambda: best[0] - 1e-9):
        whole = -(-remaining // n) * risk_price(shape.cheapest, hours)
        if whole < best[0] - 1e-9 and -(-remaining // n) <= budget.count(shape.cheapest, queue):
            best[0], found = whole, Choice(shape, n)
    return found


def budget_rejection(index: OfferingIndex, budget: Budget, queue: str, cheapest: Offering) -> Rejection:
    """Why a queue's pods get no new node: its budget, what it spends, and the cheapest node that would do."""
    limit = index.config.queue_budgets[queue]
    planned = limit - budget.queues.get(queue, limit) - budget.spent.get(queue, 0.0)
    spending = f"${budget.spent.get(queue, 0.0):.2f}/h serving it"
    if planned > 1e-9:
        spending += f" + ${planned:.2f}/h planned"
    return Rejection(
        Filter.QUEUE_BUDGET,
        f"queue {queue} would exceed its budget: {spending} + ${cheapest.price:.4f}/h for a "
        f"{cheapest.instance_type} > queueBudgets.{queue} ${limit:.2f}/h",
        f"queueBudgets.{queue}",
    )


def per_node(
    shape: Option,
    req: Resources,
    share: GpuShare | None,
    cap: int = 1 << 30,
    memo: dict[tuple[GpuSlots, GpuShare, int], int] | None = None,
) -> int:
    """How many pods of ``req`` (and ``share``) an empty node of ``shape`` takes, counting at most ``cap``.
    ``memo`` keeps how many shares empty devices take (many instance types have the same GPUs)."""
    k = req.times_fits_in(shape.alloc)
    if share is not None and k > 0:
        key = (shape.devices, share, min(k, cap))
        found = memo.get(key) if memo is not None else None
        if found is None:
            found = key[0].take_many(share, key[2])[1]
            if memo is not None:
                memo[key] = found
        k = found
    return k


def limit_rejection(index: OfferingIndex, budget: Budget) -> Rejection:
    """Which cluster limit is used up."""
    cfg = index.config
    if budget.nodes is not None and budget.nodes < 1:
        return Rejection(Filter.CLUSTER_LIMIT, f"maxNodes {cfg.max_nodes} reached", "maxNodes")
    if budget.gpus is not None and cfg.cluster_gpu_limit is not None:
        used = cfg.cluster_gpu_limit - budget.gpus
        if budget.cpu_milli is None or budget.cpu_milli > 0:
            return Rejection(
                Filter.CLUSTER_LIMIT,
                f"clusterGPULimit {cfg.cluster_gpu_limit} reached ({count(used, 'GPU')} in use, launching or planned)",
                "clusterGPULimit",
            )
    return Rejection(
        Filter.CLUSTER_LIMIT,
        f"clusterCPULimit {format_quantity(cfg.cluster_cpu_limit or 0)} reached",
        "clusterCPULimit",
    )


def no_fit(index: OfferingIndex, c: Constraints, req: Resources, mode: str) -> Rejection:
    """Why no eligible offering holds ``req``, naming the resource and the nearest offering."""
    packing = mode == BIN_PACKING
    shapes = [s for ct in c.capacity_types for s in index.shapes(c, ct, packing)]
    if not shapes:
        message = "no bin-packing node matches binPackingNode* settings" if packing else "no offerings"
        return Rejection(Filter.CONFIGURATION, message)
    excluded = index.excluded_fit_reason(c, req, packing)
    if excluded:
        return excluded
    for name in sorted(req, key=lambda k: (k not in GPU_RESOURCES, k != CPU, k != MEMORY, k)):
        if req[name] > max(s.alloc.get(name, 0) for s in shapes):
            return Rejection(
                Filter.NODE_RESOURCES_FIT, f"no offering fits {describe(Resources({name: req[name]}))}", name
            )
    return Rejection(Filter.NODE_RESOURCES_FIT, f"no offering fits {describe(req)} together")


def nearest(index: OfferingIndex, c: Constraints, req: Resources, mode: str) -> Offering | None:
    """The eligible offering that comes closest to holding ``req``: the largest share of its shortest resource,
    then the cheapest."""
    shapes = [s for ct in c.capacity_types for s in index.shapes(c, ct, mode == BIN_PACKING)]
    best: tuple[float, tuple[float, str, str, str]] | None = None
    found = None
    for s in shapes:
        share = min((s.alloc.get(n, 0) / v for n, v in req.items() if v > 0), default=1.0)
        key = (-share, price_order(s.cheapest))
        if best is None or key < best:
            best, found = key, s.cheapest
    return found


def nearest_miss(index: OfferingIndex, c: Constraints, req: Resources, mode: str, why: Rejection) -> str:
    """For a pod no offering takes: the offering that came closest, and what kept it out."""
    if why.filter == Filter.NODE_RESOURCES_FIT:
        o = nearest(index, c, req, mode)
        if o is None:
            return ""
        short = insufficient_all(req, index.allocatable(o))
        return f"{o.key} (${o.price:.4f}/h): {', '.join(TOO_MANY_PODS if r == PODS else f'Insufficient {r}' for r in short)}"
    if why.filter in (Filter.OFFERING, Filter.NODE_AFFINITY, Filter.TAINT_TOLERATION):
        o = last_candidate(c, index.offerings, index.config, index.nodes)
        return f"{o.key} (${o.price:.4f}/h): {why.message}" if o is not None else ""
    return ""


def options_for(
    index: OfferingIndex,
    c: Constraints,
    mode: str,
    chosen: Offering,
    used: Resources,
    cpu_limited: bool,
    shares: int = 0,
) -> list[Option]:
    """Every shape a node opened as ``chosen`` could still be: eligible for ``c``, holding ``used`` (and
    ``shares`` pods of ``c``'s GPU share, on the same GPUs as ``chosen``), at no higher price, with no more
    GPUs (and, under a cpu limit, no more cpu) than ``chosen`` was counted for."""
    out = []
    packing = mode == BIN_PACKING
    ceiling = price_order(chosen)
    model = device_model(device_slots(chosen))
    for ctype in c.capacity_types:
        for shape in index.shapes(c, ctype, packing):
            if price_order(shape.cheapest) > ceiling:
                break
            o = shape.cheapest
            if o.gpu_count > chosen.gpu_count or (cpu_limited and o.vcpu > chosen.vcpu):
                continue
            if not used.fits_in(shape.alloc):
                continue
            if c.gpu_share is not None and (
                device_model(shape.devices) != model
                or shape.devices.take_many(c.gpu_share, shares)[1] < shares
            ):
                continue
            out.append(shape)
    return out


def has_room(b: Bin) -> bool:
    """A new node may take more pods: some option has a pod slot and cpu left, and a GPU node whose GPUs its
    pods use still has a GPU, or part of a shared one, free."""
    for opt in b.options:
        room = b.room(opt)
        if room.get(PODS, 1) <= 0 or room.cpu <= 0:
            continue
        if b.devices is not None and (b.devices.whole or any(d.free for d in b.devices.shared)):
            return True
        gpu = next((r for r in GPU_RESOURCES if opt.alloc.get(r)), None)
        if gpu is None or room.get(gpu) > 0 or not any(b.used.get(r) for r in GPU_RESOURCES):
            return True
    return False


def cheapest(b: Bin, classes: Sequence[Constraints]) -> Offering:
    """The offering a new node is launched as: its cheapest option with spot interruptions counted, in the
    pods' order of capacity types."""
    tiers = _tiers(classes)
    hours = node_hours(c.interruption_hours for c in classes)
    return min(
        (o for opt in b.options for o in opt.offerings),
        key=lambda o: (risk_price(o, hours), tiers.get(o.capacity_type, len(tiers)), price_order(o)),
    )


@dataclass(frozen=True, slots=True)
class Fallbacks:
    """A new node's fallbacks, cheapest first; ``cap`` is the most one may cost (``maxFallbackPriceRatio``
    × the chosen offering's price, or less when a queue's budget says so: ``capped_by`` names which) and
    ``left_out`` the cheapest that would have held the node's pods above it, if any."""

    offerings: tuple[Offering, ...]
    cap: float | None = None
    left_out: Offering | None = None
    capped_by: str = ""


def fallbacks(
    b: Bin,
    best: Offering,
    index: OfferingIndex,
    classes: Sequence[Constraints],
    budget: tuple[str, float] | None = None,
    memo: dict[tuple[object, ...], list[tuple[Option, list[Offering]]]] | None = None,
) -> Fallbacks:
    """What to try when the cloud has no capacity for ``best``, cheapest first (interruptions counted): every offering that holds the
    node's pods, suits all of them and keeps the topology domains chosen for them, within what was counted
    against the limits, and at most ``maxFallbackPriceRatio`` times ``best``'s price (a $0.29/h pod must not
    end up on a $6.88/h node because the cheap one was out of stock). ``budget`` is (queue, most a fallback
    may cost) when the node was opened for a queue with a budget: a fallback must not take it past it.
    ``memo`` keeps, for the nodes of one plan, the shapes each kind of node may fall back to at all."""
    tiers = _tiers(classes)
    hours = node_hours(c.interruption_hours for c in classes)
    limit_cpu = index.config.cluster_cpu_limit is not None
    ratio = index.config.max_fallback_price_ratio
    # A reserved node costs nothing more; its fallbacks are bought, so they are held to what it would cost bought.
    base = best.reservation.on_demand_price if best.reservation is not None else best.price
    cap = None if ratio is None else base * ratio
    capped_by = "maxFallbackPriceRatio" if cap is not None else ""
    if budget is not None and (cap is None or budget[1] < cap):
        cap, capped_by = budget[1], f"queueBudgets.{budget[0]}"
    found: list[tuple[float, int, tuple[float, str, str, str], Offering]] = []
    model = device_model(b.devices) if b.devices is not None else None
    left_out: Offering | None = None
    packing = b.mode == BIN_PACKING
    settled = b.settled
    key = (tuple(classes), packing, best.gpu_count, best.vcpu if limit_cpu else None, model)
    kept = memo.get(key) if memo is not None else None
    if kept is None:
        # The shapes no more GPUs (or cpu, under a cpu limit) than the chosen one and, for a node of GPU shares,
        # the very same devices: all that does not depend on the node's pods, the same for every node alike.
        kept = [
            (shape, offerings)
            for shape, offerings in index.shared(classes, packing)
            if not (
                shape.cheapest.gpu_count > best.gpu_count
                or (limit_cpu and shape.cheapest.vcpu > best.vcpu)
                or (model is not None and device_model(shape.devices) != model)
            )
        ]
        if memo is not None:
            memo[key] = kept
    # Passing over the shapes left out above changes nothing: the list ends at a dearer shape either way.
    for shape, offerings in kept:
        o0 = shape.cheapest
        if len(found) >= MAX_ALTERNATIVES and o0.price > found[MAX_ALTERNATIVES - 1][0]:
            break  # shapes come cheapest first: none later can enter the list
        if left_out is not None and o0.price > left_out.price:
            break  # past the cap, and the cheapest one left out is known
        if not b.used.fits_in(shape.alloc):
            continue
        for o in offerings:
            # (An offering of another type is never the chosen one: its fields are not compared one by one.)
            if (o.instance_type == best.instance_type and o == best) or (
                settled and any(index.labels(o).get(k) != v for k, v in settled.items())
            ):
                continue
            if cap is not None and o.price > cap + 1e-9:
                if left_out is None or price_order(o) < price_order(left_out):
                    left_out = o
                continue
            found.append((risk_price(o, hours), tiers.get(o.capacity_type, len(tiers)), price_order(o), o))
        found.sort(key=lambda a: a[:3])
    return Fallbacks(tuple(a[3] for a in found[:MAX_ALTERNATIVES]), cap, left_out, capped_by)


def _tiers(classes: Iterable[Constraints]) -> dict[str, int]:
    first = next(iter(classes), None)
    return {ct: i for i, ct in enumerate(first.capacity_types)} if first else {}
