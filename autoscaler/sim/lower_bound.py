"""The lower bound: the LP relaxation of the cheapest capacity holding the demand that ran, integrated exactly.

At any moment the cheapest capacity for the running pods, with nodes bought in fractions and pods split
across them, is a linear program whose demand appears only on the right-hand side. Its dual is therefore
the same for every moment: node resource prices ``mu`` with ``alloc . mu <= price`` for every offering, each
pod worth ``min over its eligible offerings of requests . mu``. Any such ``mu`` bounds every moment from
below, and the LP's own dual is exact at the moment it was solved for. So the bound solves the LP at up to
``SAMPLES`` moments, keeps their duals, and integrates ``max over duals`` of the demand's worth over every
interval between two pod starts or ends: a true lower bound at every instant, exact at the sampled ones.

Launch and scale-down delays cost nothing and nodes come in fractions, so no real policy can beat it. A pod
asking KAI for part of a GPU needs that part of a GPU on each of its devices: a 0.25 ``gpu-fraction`` pod
0.25 of a GPU, a ``gpu-memory`` pod its memory over the GPU's, and on a partial-GPU size (a device that is
itself part of a GPU) its share of a whole GPU over the part the device is.

Needs scipy (the ``bench`` environment has it); without it there is no bound.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autoscaler.config.values import Config
from autoscaler.core.fit import AnnotationError, Constraints, pod_constraints
from autoscaler.core.gpu.share import GpuShare
from autoscaler.core.offering import Offering
from autoscaler.core.planning.offerings import OfferingIndex, price_order
from autoscaler.core.resources import Resources
from autoscaler.sim.cluster import SimPod
from autoscaler.sim.scenario import Outage

SAMPLES = 200
# Slices of time whose least demand gets an integer program, and how many branch-and-bound nodes one may
# take: a count of work, not of seconds, so the bound is the same on a busy machine as on an idle one (the
# programs of the benchmark scenarios close within a few dozen nodes; the count only stops a runaway one).
WINDOWS = 200
MILP_NODES = 2000
# HiGHS's primal heuristics look for good node sets; the bound needs none (it reads the dual bound), and the
# incumbents they find set off restart after restart of the root. Without them the same programs close to the
# same optimum in about half the time. scipy hands options it does not know to HiGHS as they are.
NO_HEURISTICS = {
    "mip_heuristic_effort": 0.0,
    "mip_heuristic_run_feasibility_jump": False,
    "mip_heuristic_run_rins": False,
    "mip_heuristic_run_rens": False,
    "mip_heuristic_run_root_reduced_cost": False,
}
RESOURCES = ("cpu", "memory", "nvidia.com/gpu", "pods")
GPU = RESOURCES.index("nvidia.com/gpu")
Class = tuple[Constraints, Resources, tuple[Outage, ...]]  # what a run asked for, and what was out then


@dataclass(frozen=True, slots=True)
class Boot:
    """Seconds from a launch to a node that runs pods: CPU-only pods, and pods that need its GPUs."""

    cpu: float = 0.0
    gpu: float = 0.0


NO_BOOT = Boot()


def share_need(share: GpuShare, o: Offering) -> float | None:
    """The GPUs (devices) of offering ``o`` one pod of ``share`` needs at the least, or None when it cannot
    run there: its part of each of its devices."""
    if o.gpu_count < share.devices:
        return None
    if share.portion is not None:
        device = o.gpu_fraction / o.gpu_count if o.partial_gpu else 1.0  # the part of a GPU one device is
        part = share.portion / device
    elif o.gpu_memory_mib:
        assert share.memory_mib is not None
        part = share.memory_mib / o.gpu_memory_mib
    else:
        return None
    return part * share.devices if part <= 1 + 1e-9 else None


class Columns:
    """The LP's node columns (cheapest zone of each instance type and capacity type) and who may use them."""

    def __init__(self, index: OfferingIndex, classes: Sequence[Class]):
        import numpy as np

        best: dict[tuple[str, str], Offering] = {}
        for o in index.offerings:
            k = (o.instance_type, o.capacity_type)
            if k not in best or o.price < best[k].price:
                best[k] = o
        self.offers = sorted(best.values(), key=price_order)
        col = {(o.instance_type, o.capacity_type): j for j, o in enumerate(self.offers)}
        self.zones: list[set[str]] = [set() for _ in self.offers]
        for o in index.offerings:
            self.zones[col[(o.instance_type, o.capacity_type)]].add(o.zone)
        self.price = np.array([o.price for o in self.offers])
        self.alloc = np.array(
            [[index.allocatable(o).get(r, 0) / 1000 for r in RESOURCES] for o in self.offers]
        ).reshape(len(self.offers), len(RESOURCES))
        self.req = np.array(
            [[1.0 if r == "pods" else req.get(r, 0) / 1000 for r in RESOURCES] for _, req, _ in classes]
        ).reshape(len(classes), len(RESOURCES))
        # A share of a GPU is no request the node sees: what it needs depends on the offering's GPUs.
        self.shared = [ci for ci, (c, _, _) in enumerate(classes) if c.gpu_share is not None]
        self.share = np.zeros((len(classes), len(self.offers)))
        for ci in self.shared:
            share = classes[ci][0].gpu_share
            assert share is not None
            for j, o in enumerate(self.offers):
                need = share_need(share, o)
                self.share[ci, j] = np.inf if need is None else need
        # What a pod of each class counts as on an ordinary GPU, to weigh moments by (GPUs).
        self.nominal_gpus = self.req[:, GPU].copy()
        for ci in self.shared:
            share = classes[ci][0].gpu_share
            assert share is not None
            self.nominal_gpus[ci] = (share.portion if share.portion is not None else 0.0) * share.devices
        # Each resource in units of the largest node's: memory in bytes beside cpu in cores left HiGHS
        # calling some of these LPs unbounded. Scaling a resource only rescales its dual; the bound is the same.
        self.unit = self.alloc.max(axis=0, initial=0.0)
        self.unit[self.unit <= 0] = 1.0
        self.alloc = self.alloc / self.unit
        self.req = self.req / self.unit
        self.share = self.share / self.unit[GPU]
        self.eligible: list[list[int]] = []
        for ci, (c, _req, outages) in enumerate(classes):
            eligible, _ = index.eligible(c)
            cols = sorted({col[(o.instance_type, o.capacity_type)] for o in eligible})
            out = self.unavailable(outages)
            # A column whose allocatable cannot hold one pod of the class, or that had no capacity when the
            # run started (its node was bought then), is no place for it.
            self.eligible.append(
                [
                    j
                    for j in cols
                    if not out[j]
                    and all(self.alloc[j] >= self.req[ci] - 1e-9)
                    and self.alloc[j, GPU] >= self.share[ci, j] - 1e-9
                ]
            )
        self.mask = np.ones((len(classes), len(self.offers)), dtype=bool)  # True = not eligible
        for ci, cols in enumerate(self.eligible):
            self.mask[ci, cols] = False

    def unavailable(self, outages: tuple[Outage, ...]) -> Any:
        """Columns with no capacity in any zone while ``outages`` last (True = out)."""
        import numpy as np

        out = np.zeros(len(self.offers), dtype=bool)
        for j, o in enumerate(self.offers if outages else ()):
            hit = [
                x
                for x in outages
                if x.instance_type in (None, "", o.instance_type)
                and x.capacity_type in (None, "", o.capacity_type)
            ]
            out[j] = bool(hit) and all(any(x.zone in (None, "", z) for x in hit) for z in self.zones[j])
        return out

    def _matrices(self, demand: dict[int, int], slots: bool = False) -> tuple[Any, Any, list[float], int]:
        """The LP's constraints for ``demand`` {class: pods}: capacity rows (``A_ub x <= 0``), one row per class
        (``A_eq x = pods``), and the number of placement columns; node columns come first. With ``slots``, a
        row more per placement column: no more pods of a class on a type's nodes than one node holds of them
        alone, times the nodes (true of every real packing: a pod is never split across nodes)."""
        import numpy as np
        from scipy.sparse import coo_matrix

        nx, nr = len(self.offers), len(RESOURCES)
        classes = sorted(demand)
        # The placement columns y = (class, node column), class by class: whole arrays, not one at a time (a
        # week's trace has hundreds of classes and columns, and the bound solves hundreds of these).
        y_class = np.array([ci for ci in classes for _ in self.eligible[ci]], dtype=int)
        y_col = np.array([j for ci in classes for j in self.eligible[ci]], dtype=int)
        ny = len(y_class)
        # What one pod of a placement column takes of each resource on its node column.
        need = self.req[y_class].reshape(ny, nr)
        need[:, GPU] += self.share[y_class, y_col]
        v, r = np.nonzero(need)
        rows = [y_col[v] * nr + r, np.arange(nx * nr)]
        cols = [nx + v, np.repeat(np.arange(nx), nr)]
        vals = [need[v, r], -self.alloc.reshape(nx * nr)]
        height = nx * nr
        if slots and ny:
            used = need > 1e-12
            alloc = self.alloc[y_col]
            ratio = np.divide(alloc, need, out=np.full_like(need, np.inf), where=used)
            fits = np.floor(ratio.min(axis=1) + 1e-9)
            kept = np.nonzero(used.any(axis=1) & np.isfinite(fits))[0]
            row = height + np.arange(len(kept))
            rows += [row, row]
            cols += [nx + kept, y_col[kept]]
            vals += [np.ones(len(kept)), -np.maximum(fits[kept], 1.0)]
            height += len(kept)
        a_ub = coo_matrix(
            (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(height, nx + ny)
        ).tocsr()
        pos = {ci: i for i, ci in enumerate(classes)}
        a_eq = coo_matrix(
            ([1.0] * ny, ([pos[int(ci)] for ci in y_class], [nx + v for v in range(ny)])),
            shape=(len(classes), nx + ny),
        ).tocsr()
        return a_ub, a_eq, [float(demand[ci]) for ci in classes], ny

    def solve(self, demand: dict[int, int]) -> Any:
        """The node resource prices ``mu`` (offerings x resources) of the LP for ``demand`` {class: pods}."""
        import numpy as np
        from scipy.optimize import linprog

        nx, nr = len(self.offers), len(RESOURCES)
        a_ub, a_eq, b_eq, ny = self._matrices(demand)
        res = linprog(
            np.concatenate([self.price, np.zeros(ny)]),
            A_ub=a_ub,
            b_ub=np.zeros(nx * nr),
            A_eq=a_eq,
            b_eq=b_eq,
            bounds=(0, None),
            method="highs",
        )
        if not res.success:
            return None
        mu = np.maximum(-np.asarray(res.ineqlin.marginals), 0.0).reshape(nx, nr)
        # Scale into exact dual feasibility (alloc . mu <= price) so solver tolerance never inflates the bound.
        worth = (self.alloc * mu).sum(axis=1)
        over = np.max(np.where(self.price > 0, worth / np.maximum(self.price, 1e-12), 0.0), initial=0.0)
        return mu / over if over > 1.0 else mu

    def solve_whole(self, demand: dict[int, int]) -> float | None:
        """A lower bound (USD/hour) on whole nodes holding ``demand`` {class: pods}: the same program with
        node counts integer, pods still free to spread over the nodes of one type. The solver's own bound
        (never its best answer, which may sit within its gap above the optimum) after at most ``MILP_NODES``
        branch-and-bound nodes; None when it has none."""
        import numpy as np
        from scipy.optimize import Bounds, LinearConstraint, milp

        nx = len(self.offers)
        a_ub, a_eq, b_eq, ny = self._matrices(demand, slots=True)
        with _quiet(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the options scipy passes on as they are, said each time
            res = milp(
                np.concatenate([self.price, np.zeros(ny)]),
                constraints=[
                    LinearConstraint(a_ub, -np.inf, np.zeros(a_ub.shape[0])),
                    LinearConstraint(a_eq, b_eq, b_eq),
                ],
                integrality=np.concatenate([np.ones(nx), np.zeros(ny)]),
                bounds=Bounds(0, np.inf),
                options={"node_limit": MILP_NODES, **NO_HEURISTICS},
            )
        bound = getattr(res, "mip_dual_bound", None)
        if bound is None or not np.isfinite(bound):
            return None
        return max(0.0, float(bound))

    def pod_worth(self, mu: Any) -> Any:
        """What one pod of each class is worth under node resource prices ``mu``: its cheapest eligible slot."""
        import numpy as np

        per = self.req @ mu.T  # classes x offerings
        if self.shared:
            share = self.share[self.shared]
            per[self.shared] += np.where(np.isfinite(share), share, 0.0) * mu[:, GPU]
        per[self.mask] = np.inf
        worth = per.min(axis=1)
        # A class with nowhere to go is left out, which only lowers the bound.
        worth[~np.isfinite(worth)] = 0.0
        return worth


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Standard output and error closed to the solver: HiGHS's MIP solver writes debugging lines itself (file
    descriptors 1 and 2, past Python), which would bury the timeline."""
    try:
        saved = [os.dup(1), os.dup(2)]
    except OSError:
        yield
        return
    try:
        with open(os.devnull, "w") as null:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(null.fileno(), 1)
            os.dup2(null.fileno(), 2)
            yield
    finally:
        for fd, copy in enumerate(saved, start=1):
            os.dup2(copy, fd)
            os.close(copy)


def moment_bound(demand: Mapping[tuple[Constraints, Resources], int], index: OfferingIndex) -> float | None:
    """The LP bound in USD/hour for one moment's demand, ``{(constraints, requests): pods}``, over
    ``index``'s offerings; None when the LP has no solution. Pods no offering can hold are left out."""
    classes: list[Class] = [(c, req, ()) for c, req in demand]
    columns = Columns(index, classes)
    counts = {ci: n for ci, n in enumerate(demand.values()) if n > 0 and columns.eligible[ci]}
    if not counts:
        return 0.0
    mu = columns.solve(counts)
    if mu is None:
        return None
    worth = columns.pod_worth(mu)
    return float(sum(worth[ci] * n for ci, n in counts.items()))


def lower_bound(
    pods: Sequence[SimPod],
    offerings: Sequence[Offering],
    config: Config,
    end: float,
    outages: Sequence[Outage] = (),
    boot: Boot = NO_BOOT,
) -> dict[str, Any]:
    """``{"cost": USD or None, "fractional": USD, "wholeNodes": USD, "boot": USD, ...}``: the bound integrated
    over [0, end) with whole nodes and, with ``boot`` (seconds from launch to a node that runs pods: CPU-only
    pods, pods needing GPUs), the capacity every run needs that long before it starts. A run that started
    during a capacity outage cannot have used the offerings it took away."""
    try:
        import scipy  # noqa: F401
    except ImportError:
        return {"cost": None, "why": "scipy is not installed (pip install 'tidal-autoscaler[dev]')"}
    doc, _ = bound_rates(pods, offerings, config, end, outages, boot)
    return doc


def bound_rates(
    pods: Sequence[SimPod],
    offerings: Sequence[Offering],
    config: Config,
    end: float,
    outages: Sequence[Outage] = (),
    boot: Boot = NO_BOOT,
) -> tuple[dict[str, Any], Any]:
    """The bound's summary and its rate (USD/hour) over time: an array of (start, end, fractional rate, whole
    nodes rate) rows between consecutive pod starts and ends (the boot lookahead is in the summary only)."""
    import numpy as np

    index = OfferingIndex(offerings, config)
    class_of: dict[Class, int] = {}
    spans: list[tuple[float, float, int]] = []
    for sp in pods:
        if sp.started is None:
            continue
        stop = sp.ended if sp.ended is not None else end
        if stop <= sp.started:
            continue
        try:
            constraints = pod_constraints(sp.pod, config)
        except AnnotationError:
            continue
        active = tuple(o for o in outages if o.at <= sp.started < o.until)
        key = (constraints, sp.pod.requests, active)
        spans.append((sp.started, min(stop, end), class_of.setdefault(key, len(class_of))))
    if not spans:
        return {"cost": 0.0, "samples": 0, "intervals": 0}, np.zeros((0, 4))
    classes = sorted(class_of, key=class_of.__getitem__)
    columns = Columns(index, classes)
    placeable = [ci for ci in range(len(classes)) if columns.eligible[ci]]
    unbounded = sum(1 for _, _, ci in spans if not columns.eligible[ci])

    # Demand between consecutive pod starts and ends: constant, one row per interval.
    times = np.unique(np.array([t for s, e, _ in spans for t in (s, e)]))
    delta = np.zeros((len(times), len(classes)))
    for s, e, ci in spans:
        delta[np.searchsorted(times, s), ci] += 1
        delta[np.searchsorted(times, e), ci] -= 1
    demand = np.rint(np.cumsum(delta, axis=0)[:-1])
    seconds = np.diff(times)
    demand[:, [ci for ci in range(len(classes)) if not columns.eligible[ci]]] = 0

    # Sample the LP where the demand is heaviest in each of SAMPLES equal slices of time, deduplicated.
    cores = (columns.req * columns.unit)[:, 0]
    weight = demand @ np.maximum(columns.nominal_gpus, cores / 64)
    edges = np.linspace(times[0], times[-1], SAMPLES + 1)
    picks: set[int] = set()
    for lo, hi in itertools.pairwise(edges):
        inside = np.nonzero((times[:-1] >= lo) & (times[:-1] < hi) & (weight > 0))[0]
        if len(inside):
            picks.add(int(inside[np.argmax(weight[inside])]))
    seen: set[bytes] = set()
    worths = []
    for i in sorted(picks):
        row = demand[i]
        sig = row.tobytes()
        if sig in seen:
            continue
        seen.add(sig)
        mu = columns.solve({ci: int(row[ci]) for ci in placeable if row[ci] > 0})
        if mu is None:
            continue
        worths.append(columns.pod_worth(mu))
    if not worths:
        return {"cost": None, "why": "no sampled LP had a solution"}, np.zeros((0, 4))
    rate = (demand @ np.array(worths).T).max(axis=1)  # USD/hour in each interval
    whole = np.maximum(rate, _whole_nodes(columns, demand, times, placeable))
    cpu_only = any(columns.nominal_gpus[ci] == 0 for ci in placeable)
    ahead = boot.cpu if cpu_only else boot.gpu
    fractional = float(rate @ seconds) / 3600
    integer = float(whole @ seconds) / 3600
    total = lookahead_cost(times, whole, ahead)
    doc: dict[str, Any] = {
        "cost": round(total, 4),
        "fractional": round(fractional, 4),
        "wholeNodes": round(integer - fractional, 4),
        "boot": round(total - integer, 4),
        "bootSeconds": ahead,
        "samples": len(worths),
        "intervals": len(seconds),
    }
    if unbounded:
        doc["podsWithoutEligibleOffering"] = unbounded
    return doc, np.column_stack([times[:-1], times[1:], rate, whole])


def _whole_nodes(columns: Columns, demand: Any, times: Any, placeable: Sequence[int]) -> Any:
    """A whole-node bound (USD/hour) for every interval: integer programs for the least demand of each of
    WINDOWS slices of time, each applied to every interval whose demand holds at least that much of every
    class (more pods never need less capacity)."""
    import numpy as np

    out = np.zeros(len(demand))
    edges = np.linspace(times[0], times[-1], WINDOWS + 1)
    slice_of = np.clip(np.searchsorted(edges, times[:-1], side="right") - 1, 0, WINDOWS - 1)
    solved: set[bytes] = set()
    for w in range(WINDOWS):
        rows = np.nonzero(slice_of == w)[0]
        if not len(rows):
            continue
        least = demand[rows].min(axis=0)
        if not least.any() or least.tobytes() in solved:
            continue
        solved.add(least.tobytes())
        value = columns.solve_whole({ci: int(least[ci]) for ci in placeable if least[ci] > 0})
        if value is None:
            continue
        holds = (demand >= least).all(axis=1)
        out[holds] = np.maximum(out[holds], value)
    return out


def lookahead_cost(times: Any, rate: Any, ahead: float) -> float:
    """USD of ``rate`` (USD/hour between consecutive ``times``) when every moment must also pay for the
    largest rate of the next ``ahead`` seconds: a node that runs a pod at ``t`` was launched by ``t - ahead``
    and runs at every moment in between, so the capacity up at ``s`` holds the demand of any one moment of
    [s, s + ahead] (not of all of them together: one node may serve them one after another)."""
    import numpy as np

    starts, ends = times[:-1], times[1:]
    if not len(rate):
        return 0.0
    if ahead <= 0:
        return float(rate @ (ends - starts)) / 3600
    points = np.unique(np.concatenate([times, times - ahead]))
    mids = (points[:-1] + points[1:]) / 2
    # The intervals meeting [m, m + ahead]: from the first ending after m to the last starting by m + ahead.
    lo = np.searchsorted(ends, mids, side="right")
    hi = np.searchsorted(starts, mids + ahead, side="right") - 1
    table = [np.asarray(rate, dtype=float)]
    while (1 << len(table)) <= len(rate):
        prev, half = table[-1], 1 << (len(table) - 1)
        table.append(np.maximum(prev[:-half], prev[half:]))
    ok = (lo <= hi) & (lo < len(rate)) & (hi >= 0)
    lo_ok, hi_ok = lo[ok], hi[ok]
    level = np.floor(np.log2(hi_ok - lo_ok + 1)).astype(int)
    best = np.zeros(len(mids))
    picked = np.empty(len(lo_ok))
    for k in np.unique(level):
        sel = level == k
        row = table[k]
        picked[sel] = np.maximum(row[lo_ok[sel]], row[hi_ok[sel] - (1 << k) + 1])
    best[ok] = picked
    return float(best @ np.diff(points)) / 3600
