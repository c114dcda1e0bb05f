"""Where a run's cost above its lower bound went, in dollars, cause by cause.

Every instance's life is cut where its pods start and end. The time from its launch until it could run pods is
*boot*; time empty before its first pod (or for ever) is *empty before use*; time empty after a pod ran there is
*idle after pods*. While it holds pods, its price splits into the cheapest node of any capacity type that holds
those same pods together (their *worth* there), what the cheapest node of its own capacity type costs above that
(*on-demand instead of spot*), and its price above that (*oversized*; on a GPU node holding no GPU pod,
*CPU pods on a GPU node* instead). The sum of every node's worth over the run, less the whole-node bound, is
*packing*: pods on separate nodes that could have shared one. A reservation's fee less the worth of the pods
that ran on it is *reservations unused* (below zero when they ran work cheaper than buying it). The bound's own
boot part is what any policy pays to have nodes up before their pods; only the boot above it is a cause.

The causes add up to the cost above the bound, to the cent. "The cheapest node that holds them" fits the pods'
requests and a share of a GPU by its part of each device (not by where KAI placed it on the devices); it is a
measure of where the money went, not a plan any policy could follow at every moment.
"""

from __future__ import annotations

import heapq
import itertools
from collections import defaultdict
from collections.abc import Iterator, Sequence
from typing import Any

from autoscaler.config.values import Config
from autoscaler.core.fit import AnnotationError, pod_constraints
from autoscaler.core.model import CapacityType
from autoscaler.core.offering import Offering
from autoscaler.core.planning.offerings import OfferingIndex
from autoscaler.sim.lower_bound import GPU, Boot, Class, Columns
from autoscaler.sim.pods import SimPod
from autoscaler.sim.record import Record
from autoscaler.sim.scenario import Outage

__all__ = ["CAUSES", "causes", "holdings"]

# The causes, in the order reports list them, with the words a person reads.
CAUSES = {
    "idleAfterPods": "idle after pods finish (scale-down wait, gaps between pods)",
    "boot": "boot and registration beyond the bound's",
    "emptyBeforeUse": "empty before its first pod, or never used",
    "packing": "packing: pods on separate nodes that could share one",
    "oversized": "instance-type premium: a node bigger or dearer than its pods need",
    "onDemandInsteadOfSpot": "on-demand instead of spot",
    "cpuPodsOnGpuNodes": "CPU-only pods on a GPU node",
    "reservationsUnused": "reservations unused (their fee less the worth of what ran on them)",
}

Key = tuple[tuple[int, int], ...]  # a node's pods: (class, count), sorted


class _Worth:
    """The cheapest node (of any capacity type, or of one) holding a given set of pods, remembered per set."""

    def __init__(self, columns: Columns):
        import numpy as np

        self.columns = columns
        self.kind = np.array([str(o.capacity_type) for o in columns.offers])
        self.memo: dict[tuple[Key, str], float | None] = {}

    def cheapest(self, key: Key, capacity_type: str = "") -> float | None:
        """USD/hour of the cheapest column holding the pods ``key``, of ``capacity_type`` when given."""
        import numpy as np

        found = self.memo.get((key, capacity_type), ...)
        if found is not ...:
            return found
        c = self.columns
        need = np.zeros_like(c.alloc)
        ok = np.ones(len(c.offers), dtype=bool)
        for ci, n in key:
            ok &= ~c.mask[ci]
            need += n * c.req[ci]
            need[:, GPU] += n * np.where(np.isfinite(c.share[ci]), c.share[ci], 0.0)
        ok &= (need <= c.alloc + 1e-9).all(axis=1)
        if capacity_type:
            ok &= self.kind == capacity_type
        value = float(c.price[ok].min()) if ok.any() else None
        self.memo[(key, capacity_type)] = value
        return value


def holdings(
    spans: Sequence[tuple[float, float, int]], first: float, gone: float
) -> Iterator[tuple[float, float, dict[int, int]]]:
    """A node's life from ``first`` to ``gone`` cut where its pods (``spans``: start, end, class; sorted)
    start and end: each piece in order, with how many pods of each class ran through the whole of it. One
    sweep over the pieces, each pod counted in from its start and out at its end. The counts are one dict,
    changed in place for the next piece: read them before asking for it."""
    cuts = sorted({t for s, e, _ in spans for t in (s, e) if first <= t <= gone} | {gone})
    count: dict[int, int] = {}
    ends: list[tuple[float, int]] = []  # (end, class) of the pods counted in, the earliest first
    i = 0
    for lo, hi in itertools.pairwise(cuts):
        while i < len(spans) and spans[i][0] <= lo:
            _, e, ci = spans[i]
            heapq.heappush(ends, (e, ci))
            count[ci] = count.get(ci, 0) + 1
            i += 1
        while ends and ends[0][0] < hi:  # ended before this piece does: not through the whole of it
            _, ci = heapq.heappop(ends)
            count[ci] -= 1
            if not count[ci]:
                del count[ci]
        yield lo, hi, count


def causes(
    rec: Record,
    offerings: Sequence[Offering],
    config: Config,
    bound: dict[str, Any],
    *,
    reservations: float = 0.0,
    boot: Boot,
    outages: Sequence[Outage] = (),
) -> dict[str, float]:
    """USD of each cause in :data:`CAUSES` for the run ``rec``; they add up to its cost (instances plus the
    ``reservations`` fee) less ``bound["cost"]``. Empty when the bound has no cost. As in the bound, a pod
    that started during a capacity outage could not have had the offerings it took away."""
    if not bound.get("cost"):
        return {}
    runs = [sp for sp in (*rec.pods, *rec.cut_runs) if sp.started is not None and sp.pod.node_name]
    index = OfferingIndex(offerings, config)
    class_of: dict[Class, int] = {}
    run_class: list[tuple[SimPod, int]] = []
    for sp in runs:
        assert sp.started is not None
        try:
            active = tuple(o for o in outages if o.at <= sp.started < o.until)
            asked: Class = (pod_constraints(sp.pod, config), sp.pod.requests, active)
        except AnnotationError:
            continue
        run_class.append((sp, class_of.setdefault(asked, len(class_of))))
    classes = sorted(class_of, key=class_of.__getitem__)
    columns = Columns(index, classes)
    worth = _Worth(columns)
    gpu_class = [bool(req.gpus) or c.gpu_share is not None for c, req, _ in classes]
    on_node: dict[str, list[tuple[float, float, int]]] = defaultdict(list)
    for sp, ci in run_class:
        assert sp.started is not None
        on_node[sp.pod.node_name].append((sp.started, sp.ended if sp.ended is not None else rec.end, ci))
    out = dict.fromkeys(CAUSES, 0.0)
    boot_paid = worth_total = reserved_worth = 0.0
    for iid, (inst, launched) in sorted(rec.started.items()):
        gone = rec.ended.get(iid, rec.end)
        if gone <= launched:
            continue
        reserved = inst.capacity_type == CapacityType.RESERVED
        price = 0.0 if reserved else inst.price
        ready = launched + (boot.gpu if inst.gpu_count else boot.cpu)
        spans = sorted(on_node.get(iid, ()))
        first = min((s for s, _, _ in spans), default=gone)
        up = min(ready, first, gone)
        boot_paid += price * (up - launched) / 3600
        out["emptyBeforeUse"] += price * (min(first, gone) - up) / 3600
        for lo, hi, count in holdings(spans, first, gone):
            hours = (hi - lo) / 3600
            if not count:
                out["idleAfterPods"] += price * hours
                continue
            held: Key = tuple(sorted(count.items()))
            anywhere = worth.cheapest(held)
            same = worth.cheapest(held, str(inst.capacity_type)) if not reserved else anywhere
            anywhere = price if anywhere is None else anywhere
            same = anywhere if same is None else same
            worth_total += anywhere * hours
            if reserved:
                reserved_worth += anywhere * hours
                continue
            if inst.gpu_count and not any(gpu_class[ci] for ci in count):
                out["cpuPodsOnGpuNodes"] += (price - anywhere) * hours
                continue
            out["onDemandInsteadOfSpot"] += (same - anywhere) * hours
            out["oversized"] += (price - same) * hours
    whole = bound["cost"] - bound.get("boot", 0.0)
    out["boot"] = boot_paid - bound.get("boot", 0.0)
    out["packing"] = worth_total - whole
    out["reservationsUnused"] = reservations - reserved_worth
    return {k: round(v, 4) for k, v in out.items()}
