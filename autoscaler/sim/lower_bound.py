"""The lower bound: per interval, the LP relaxation of the cheapest capacity holding the demand that ran.

Demand is sampled at each interval's middle (5 minutes, or 1/200 of a long run), so the bound is an
estimate good to about one interval per pod lifetime, not an exact integral.

Nodes may be bought in fractions and pods split across them, and launch and scale-down delays cost nothing,
so no real policy can beat it. Needs scipy (the ``bench`` environment has it); without it there is no bound.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from autoscaler.config import Config
from autoscaler.fit import AnnotationError, Constraints, pod_constraints
from autoscaler.model import Offering
from autoscaler.planning.offerings import OfferingIndex, price_order
from autoscaler.resources import Resources
from autoscaler.sim.cluster import SimPod

INTERVAL = 300.0
RESOURCES = ("cpu", "memory", "nvidia.com/gpu", "pods")


def _lp(classes: Sequence[tuple[Constraints, Resources, int]], index: OfferingIndex) -> float | None:
    from scipy.optimize import linprog
    from scipy.sparse import lil_matrix

    columns: dict[tuple[str, str], Offering] = {}
    for o in index.offerings:
        k = (o.instance_type, o.capacity_type)
        if k not in columns or o.price < columns[k].price:
            columns[k] = o
    offers = sorted(columns.values(), key=price_order)
    col = {(o.instance_type, o.capacity_type): j for j, o in enumerate(offers)}
    y: list[tuple[int, int]] = []
    for ci, (c, _req, _n) in enumerate(classes):
        eligible, _ = index.eligible(c)
        y += [(ci, j) for j in sorted({col[(o.instance_type, o.capacity_type)] for o in eligible})]
    nx, nr = len(offers), len(RESOURCES)
    cost = [o.price for o in offers] + [0.0] * len(y)
    a_ub = lil_matrix((nx * nr, nx + len(y)))
    for v, (ci, j) in enumerate(y):
        req = classes[ci][1]
        for r, name in enumerate(RESOURCES):
            amount = 1000 if name == "pods" else req.get(name, 0)
            if amount:
                a_ub[j * nr + r, nx + v] = amount / 1000
    for j, o in enumerate(offers):
        alloc = index.allocatable(o)
        for r, name in enumerate(RESOURCES):
            a_ub[j * nr + r, j] = -alloc.get(name, 0) / 1000
    a_eq = lil_matrix((len(classes), nx + len(y)))
    for v, (ci, _j) in enumerate(y):
        a_eq[ci, nx + v] = 1
    res = linprog(
        cost,
        A_ub=a_ub.tocsr(),
        b_ub=[0.0] * (nx * nr),
        A_eq=a_eq.tocsr(),
        b_eq=[float(n) for _, _, n in classes],
        bounds=(0, None),
        method="highs",
    )
    return float(res.fun) if res.success else None


def lower_bound(
    pods: Sequence[SimPod], offerings: Sequence[Offering], config: Config, end: float
) -> dict[str, Any]:
    """``{"cost": USD or None, "gpuHours": …, "intervals": n}`` over [0, end) in 5-minute steps."""
    try:
        import scipy  # noqa: F401
    except ImportError:
        return {"cost": None, "why": "scipy is not installed (pip install 'tidal-autoscaler[dev]')"}
    index = OfferingIndex(offerings, config)
    keys: dict[str, Constraints] = {}
    for sp in pods:
        try:
            keys[sp.pod.uid] = pod_constraints(sp.pod, config)
        except AnnotationError:
            continue
    cache: dict[frozenset[tuple[Any, int]], float | None] = {}
    total = 0.0
    intervals = 0
    t = 0.0
    step = max(INTERVAL, end / 200)  # at most 200 LPs, so a simulated week stays quick
    while t < end:
        running: Counter[tuple[Constraints, Resources]] = Counter()
        mid = t + min(step, end - t) / 2  # the interval's demand, sampled at its middle
        for sp in pods:
            ran = sp.started is not None and sp.started <= mid < (sp.ended if sp.ended is not None else end)
            if ran and sp.pod.uid in keys:
                running[(keys[sp.pod.uid], sp.pod.requests)] += 1
        if running:
            sig = frozenset(running.items())
            if sig not in cache:
                cache[sig] = _lp([(c, r, n) for (c, r), n in running.items()], index)
            rate = cache[sig]
            if rate is None:
                return {"cost": None, "why": f"the LP at t={t:.0f}s has no solution"}
            total += rate * min(step, end - t) / 3600
        intervals += 1
        t += step
    return {
        "cost": round(total, 4),
        "intervals": intervals,
        "intervalSeconds": step,
        "distinctDemands": len(cache),
    }
