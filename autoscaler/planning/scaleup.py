"""Scale-up: the cheapest set of node launches that places the counted demand, within every limit.

The pipeline, one small step each (pure; same input, same plan):

1. group identical pods (same constraints and requests) into classes, gangs kept whole;
2. for each class, in priority/size order: fit onto free room of existing and launching nodes;
3. then onto room left in nodes this plan already opened for the same constraints;
4. then open new nodes: *bin-selection* picks, per class, the offering with the lowest price per pod placed
   (a dedicated right-sized node unless sharing is cheaper); *bin-packing* puts small unconstrained pods on
   shared nodes at least the configured ``binPackingNode*`` size, again the lowest price per pod placed;
5. enforce ``clusterGPULimit`` / ``clusterCPULimit`` / ``maxNodes`` as nodes are opened; a gang that does not
   fit entirely is rolled back;
6. finally each node takes the cheapest offering of its capacity type that holds its pods (the instance type is
   chosen late), with fallbacks for capacity errors.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from autoscaler.demand import Demand, Gang, Ignored, Reason
from autoscaler.fit import Constraints, affinity_matches, tolerates_all
from autoscaler.model import Offering, Pod
from autoscaler.planning.offerings import OfferingIndex, Shape, price_order
from autoscaler.planning.plan import (
    BIN_PACKING,
    BIN_SELECTION,
    NO_USAGE,
    Capacity,
    Launch,
    LaunchPlan,
    Unplaced,
    Usage,
)
from autoscaler.quantity import format_quantity
from autoscaler.resources import CPU, GPU_RESOURCES, MEMORY, PODS, Resources

MAX_ALTERNATIVES = 20
_GroupKey = tuple[Constraints, str]


@dataclass(slots=True)
class _Bin:
    """A node this plan opens."""

    offering: Offering
    alloc: Resources
    group: _GroupKey
    used: Resources = field(default_factory=Resources)
    pods: list[str] = field(default_factory=list)
    gang: str = ""

    def room(self) -> Resources:
        return self.alloc - self.used


@dataclass(slots=True)
class _Budget:
    gpus: int | None
    cpu_milli: int | None
    nodes: int | None

    def allows(self, o: Offering) -> bool:
        return (
            (self.gpus is None or o.gpu_count <= self.gpus)
            and (self.cpu_milli is None or o.vcpu * 1000 <= self.cpu_milli)
            and (self.nodes is None or self.nodes >= 1)
        )

    def count(self, o: Offering) -> int:
        """How many nodes of ``o`` still fit in the budget."""
        n = 1 << 30
        if self.gpus is not None and o.gpu_count:
            n = min(n, self.gpus // o.gpu_count)
        if self.cpu_milli is not None and o.vcpu:
            n = min(n, self.cpu_milli // (o.vcpu * 1000))
        if self.nodes is not None:
            n = min(n, self.nodes)
        return n

    def take(self, o: Offering, n: int = 1) -> None:
        if self.gpus is not None:
            self.gpus -= o.gpu_count * n
        if self.cpu_milli is not None:
            self.cpu_milli -= o.vcpu * 1000 * n
        if self.nodes is not None:
            self.nodes -= n


def pod_mode(pod: Pod, c: Constraints, index: OfferingIndex) -> str:
    """Luna's split: small unconstrained CPU pods share bin-packing nodes; the rest get bin-selection."""
    cfg = index.config
    r = pod.requests
    if c.gpu_resource or c.constrained or r.gpus:
        return BIN_SELECTION
    if r.cpu >= cfg.bin_select_pod_cpu_threshold or r.memory >= cfg.bin_select_pod_memory_threshold:
        return BIN_SELECTION
    return BIN_PACKING


def describe(req: Resources) -> str:
    """``"2 nvidia.com/gpu, cpu 8, memory 64Gi"`` for messages."""
    from autoscaler.quantity import format_memory

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


class _Planner:
    def __init__(self, index: OfferingIndex, capacity: Sequence[Capacity], usage: Usage) -> None:
        cfg = index.config
        self.index = index
        self.caps: list[Capacity] = sorted(capacity, key=lambda c: (c.launching, c.name))
        self.free: list[Resources] = [c.free for c in self.caps]
        self.cap_match: dict[tuple[Constraints, int], bool] = {}
        self.usage = usage
        self.budget = _Budget(
            gpus=None if cfg.cluster_gpu_limit is None else max(0, cfg.cluster_gpu_limit - usage.gpus),
            cpu_milli=None
            if cfg.cluster_cpu_limit is None
            else max(0, cfg.cluster_cpu_limit - usage.cpu_milli),
            nodes=None if cfg.max_nodes is None else max(0, cfg.max_nodes - usage.managed_nodes),
        )
        self.open: dict[_GroupKey, list[_Bin]] = defaultdict(list)
        self.bins: list[_Bin] = []
        self.absorbed: list[Ignored] = []
        self.unplaced: list[Unplaced] = []
        self.modes: dict[str, str] = {}

    # -- step 2: existing and launching nodes ---------------------------------------------------------

    def _cap_ok(self, c: Constraints, i: int) -> bool:
        key = (c, i)
        ok = self.cap_match.get(key)
        if ok is None:
            cap = self.caps[i]
            ok = (
                all(cap.labels.get(k) == v for k, v in c.node_selector)
                and affinity_matches(c.affinity, cap.labels)
                and tolerates_all(c.tolerations, cap.taints)
                and cap.labels.get("tidal.dev/capacity-type", c.capacity_types[0]) in c.capacity_types
            )
            self.cap_match[key] = ok
        return ok

    def _absorb(
        self, pods: list[Pod], c: Constraints, req: Resources, undo: list[tuple[int, Resources]]
    ) -> list[Pod]:
        remaining = pods
        for i, cap in enumerate(self.caps):
            if not remaining:
                break
            if not self._cap_ok(c, i):
                continue
            k = min(req.times_fits_in(self.free[i]), len(remaining))
            if k <= 0:
                continue
            undo.append((i, self.free[i]))
            self.free[i] = self.free[i] - req.scaled(k)
            where = "launching node" if cap.launching else "node"
            for pod in remaining[:k]:
                self.absorbed.append(
                    Ignored(
                        pod.key, Reason.FITS_EXISTING, f"fits free capacity on {where} {cap.name}", cap.name
                    )
                )
            remaining = remaining[k:]
        return remaining

    # -- step 3: room in nodes this plan opened --------------------------------------------------------

    def _fill(self, bins: list[_Bin], pods: list[Pod], req: Resources) -> list[Pod]:
        remaining = pods
        for b in bins:
            if not remaining:
                break
            k = min(req.times_fits_in(b.room()), len(remaining))
            if k <= 0:
                continue
            b.used = b.used + req.scaled(k)
            b.pods.extend(p.key for p in remaining[:k])
            remaining = remaining[k:]
        bins[:] = [b for b in bins if _has_room(b)]
        return remaining

    # -- step 4: new nodes -----------------------------------------------------------------------------

    def _choose(
        self, c: Constraints, req: Resources, mode: str, remaining: int
    ) -> tuple[Shape, int] | Unplaced:
        """The shape to open and how many pods each node takes; or why none (``Unplaced`` with no pod)."""
        eligible, reason = self.index.eligible(c)
        if not eligible:
            return Unplaced("", reason)
        fits_somewhere = False
        best: tuple[float, int, tuple[float, str, str, str]] | None = None
        chosen: tuple[Shape, int] | None = None
        # Across every capacity type the pod allows, the lowest price per pod placed wins; the pod's order
        # of preference (spot first, usually) breaks ties. Spot is nearly always the cheaper, but a spot
        # 8-GPU machine never beats an on-demand 1-GPU one for a 1-GPU pod.
        for tier, ctype in enumerate(c.capacity_types):
            for shape in self.index.shapes(c, ctype, mode == BIN_PACKING):
                k = req.times_fits_in(shape.alloc)
                if k <= 0:
                    continue
                fits_somewhere = True
                o = shape.cheapest
                if not self.budget.allows(o):
                    continue
                per_pod = o.price / min(k, remaining)
                floor = o.price / remaining
                if best is not None and floor > best[0]:
                    break  # shapes are in price order: none later in this tier can beat the best
                score = (per_pod, tier, price_order(o))
                if best is None or score < best:
                    best, chosen = score, (shape, k)
        if chosen is not None:
            return chosen
        if fits_somewhere:
            return Unplaced("", self._limit_reason(), limited=True)
        return Unplaced("", self._no_fit_reason(c, req, mode))

    def _limit_reason(self) -> str:
        cfg = self.index.config
        if self.budget.nodes is not None and self.budget.nodes < 1:
            return f"maxNodes {cfg.max_nodes} reached"
        if self.budget.gpus is not None and cfg.cluster_gpu_limit is not None:
            used = cfg.cluster_gpu_limit - self.budget.gpus
            if self.budget.cpu_milli is None or self.budget.cpu_milli > 0:
                return f"clusterGPULimit {cfg.cluster_gpu_limit} reached ({used} GPUs in use, launching or planned)"
        return f"clusterCPULimit {format_quantity(cfg.cluster_cpu_limit or 0)} reached"

    def _no_fit_reason(self, c: Constraints, req: Resources, mode: str) -> str:
        shapes = [s for ct in c.capacity_types for s in self.index.shapes(c, ct, mode == BIN_PACKING)]
        if not shapes:
            return (
                "no bin-packing node matches binPackingNode* settings"
                if mode == BIN_PACKING
                else "no offerings"
            )
        excluded = self.index.excluded_fit_reason(c, req, mode == BIN_PACKING)
        if excluded:
            return excluded
        for name in sorted(req, key=lambda k: (k not in GPU_RESOURCES, k != CPU, k != MEMORY, k)):
            if req[name] > max(s.alloc.get(name, 0) for s in shapes):
                return f"no offering fits {describe(Resources({name: req[name]}))}"
        return f"no offering fits {describe(req)} together"

    def _open(
        self, pods: list[Pod], c: Constraints, req: Resources, mode: str, gang: str, bins: list[_Bin]
    ) -> list[Pod]:
        group = (c, mode)
        remaining = pods
        while remaining:
            choice = self._choose(c, req, mode, len(remaining))
            if isinstance(choice, Unplaced):
                self.unplaced.extend(replace(choice, pod=p.key) for p in remaining)
                return []
            shape, k = choice
            o = shape.cheapest
            n = max(1, min(len(remaining) // k, self.budget.count(o))) if k <= len(remaining) else 1
            for _ in range(n):
                take = min(k, len(remaining))
                b = _Bin(o, shape.alloc, group, req.scaled(take), [p.key for p in remaining[:take]], gang)
                self.budget.take(o)
                self.bins.append(b)
                if _has_room(b):
                    bins.append(b)
                remaining = remaining[take:]
        return remaining

    # -- units -----------------------------------------------------------------------------------------

    def place_class(
        self,
        pods: list[Pod],
        c: Constraints,
        mode: str,
        gang: str = "",
        bins: list[_Bin] | None = None,
        undo: list[tuple[int, Resources]] | None = None,
    ) -> None:
        req = pods[0].requests
        for p in pods:
            self.modes[p.key] = mode
        remaining = self._absorb(pods, c, req, undo if undo is not None else [])
        if not remaining:
            return
        group_bins = bins if bins is not None else self.open[(c, mode)]
        remaining = self._fill(group_bins, remaining, req)
        if remaining:
            self._open(remaining, c, req, mode, gang, group_bins)

    def place_gang(self, gang: Gang, constraints: dict[str, Constraints]) -> None:
        mark = (len(self.bins), len(self.absorbed), len(self.unplaced))
        budget = _Budget(self.budget.gpus, self.budget.cpu_milli, self.budget.nodes)
        undo: list[tuple[int, Resources]] = []
        local: dict[_GroupKey, list[_Bin]] = defaultdict(list)
        for (c, mode), pods in _classes(list(gang.pods), constraints, self.index).items():
            for same in _by_requests(pods):
                self.place_class(same, c, mode, gang.key, local[(c, mode)], undo)
        failed = self.unplaced[mark[2] :]
        if not failed:
            for key, bins in local.items():
                self.open[key].extend(bins)
            return
        why = failed[0].reason
        del self.bins[mark[0] :]
        del self.absorbed[mark[1] :]
        del self.unplaced[mark[2] :]
        for i, before in reversed(undo):
            self.free[i] = before
        self.budget = budget
        detail = f"gang {gang.key} ({len(gang.pods)} pods) cannot be placed whole: {why}"
        limited = any(u.limited for u in failed)
        self.unplaced.extend(Unplaced(p.key, detail, limited) for p in gang.pods)

    # -- step 6 ----------------------------------------------------------------------------------------

    def finalize(self) -> list[Launch]:
        cache: dict[tuple[Constraints, str, str, Resources, int], tuple[Offering, tuple[Offering, ...]]] = {}
        launches = []
        for b in self.bins:
            c, mode = b.group
            key = (c, mode, b.offering.capacity_type, b.used, b.offering.gpu_count)
            found = cache.get(key)
            if found is None:
                found = self._cheapest_for(b)
                cache[key] = found
            offering, alternatives = found
            launches.append(Launch(offering, tuple(sorted(b.pods)), mode, alternatives, b.gang))
        launches.sort(key=lambda la: (la.gang, la.offering.gpu_count == 0, price_order(la.offering), la.pods))
        return launches

    def _cheapest_for(self, b: _Bin) -> tuple[Offering, tuple[Offering, ...]]:
        c, mode = b.group
        packing = mode == BIN_PACKING
        best = b.offering
        limit_cpu = self.index.config.cluster_cpu_limit is not None
        for shape in self.index.shapes(c, b.offering.capacity_type, packing):
            o = shape.cheapest
            if price_order(o) >= price_order(best):
                break
            if (
                o.gpu_count <= b.offering.gpu_count
                and b.used.fits_in(shape.alloc)
                and (not limit_cpu or o.vcpu <= b.offering.vcpu)
            ):
                best = o
                break
        alternatives: list[tuple[float, int, Offering]] = []
        for tier, ctype in enumerate(c.capacity_types):
            for shape in self.index.shapes(c, ctype, packing):
                o0 = shape.cheapest
                if o0.gpu_count > best.gpu_count or (limit_cpu and o0.vcpu > best.vcpu):
                    continue
                if not b.used.fits_in(shape.alloc):
                    continue
                alternatives.extend((o.price, tier, o) for o in shape.offerings if o != best)
        alternatives.sort(key=lambda a: (a[0], a[1], price_order(a[2])))
        return best, tuple(a[2] for a in alternatives[:MAX_ALTERNATIVES])


def _has_room(b: _Bin) -> bool:
    room = b.room()
    if room.get(PODS, 1) <= 0 or room.cpu <= 0:
        return False
    gpu = next((r for r in GPU_RESOURCES if b.alloc.get(r)), None)
    return gpu is None or room.get(gpu) > 0 or not any(b.used.get(r) for r in GPU_RESOURCES)


def _classes(
    pods: list[Pod], constraints: dict[str, Constraints], index: OfferingIndex
) -> dict[_GroupKey, list[Pod]]:
    groups: dict[_GroupKey, list[Pod]] = {}
    for pod in pods:
        c = constraints[pod.key]
        groups.setdefault((c, pod_mode(pod, c, index)), []).append(pod)
    return groups


def _by_requests(pods: list[Pod]) -> list[list[Pod]]:
    by: dict[Resources, list[Pod]] = {}
    for pod in pods:
        by.setdefault(pod.requests, []).append(pod)
    return list(by.values())


def scale_up(
    demand: Demand,
    index: OfferingIndex,
    *,
    capacity: Sequence[Capacity] = (),
    usage: Usage = NO_USAGE,
) -> LaunchPlan:
    """Plan the cheapest launches for ``demand``; every counted pod is launched for, absorbed or unplaced."""
    planner = _Planner(index, capacity, usage)
    units: list[tuple[tuple[object, ...], Gang | tuple[Constraints, str, list[Pod]]]] = []
    for gang in demand.gangs:
        units.append((_order(gang.pods[0]), gang))
    for (c, mode), pods in _classes(demand.singles, demand.constraints, index).items():
        for same in _by_requests(pods):
            units.append((_order(same[0]), (c, mode, same)))
    units.sort(key=lambda u: u[0])
    for _, unit in units:
        if isinstance(unit, Gang):
            planner.place_gang(unit, demand.constraints)
        else:
            c, mode, pods = unit
            planner.place_class(pods, c, mode)
    launches = planner.finalize()
    gpus_planned = sum(la.offering.gpu_count for la in launches)
    return LaunchPlan(
        launches=tuple(launches),
        unplaced=tuple(sorted(planner.unplaced, key=lambda u: u.pod)),
        absorbed=tuple(sorted(planner.absorbed, key=lambda a: a.pod)),
        gpus_before=usage.gpus,
        gpus_after=usage.gpus + gpus_planned,
    )


def _order(pod: Pod) -> tuple[object, ...]:
    r = pod.requests
    return (-pod.priority, -r.gpus, -r.cpu, -r.memory, pod.created, pod.uid or pod.key)
