"""The exact plan's problem (:mod:`autoscaler.core.planning.exact`) as a mixed-integer program in whole
numbers, solved with OR-Tools CP-SAT (on these models it proves optima several times faster than HiGHS; see
``bench/plan_optimality.py --compare-solvers``).

Nodes of each type are numbered slots, bought in order. KAI shares are first packed per node in aggregate:
the shares of one compute mode take at most 100 hundredths per device the node gives that mode, and a share
over half a device (a third, ...) needs a device of its own (of two, ...). That is a relaxation of packing
device by device, so its optimum is the exact optimum when every node's shares pack onto its devices
(:func:`autoscaler.core.planning.exact.pack` decides, exhaustively); when one does not, the model is solved
again device by device, which is exact but slower.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from autoscaler.core.gpu.share import ComputeMode, GpuShare
from autoscaler.core.planning.exact import FULL, Bought, NodeType, Problem, Solution, device_shape, need, pack
from autoscaler.core.resources import NVIDIA_GPU

__all__ = [
    "Model",
    "Outcome",
    "Program",
    "Rows",
    "SolverMissing",
    "fitting",
    "most_nodes",
    "run",
    "run_highs",
]

NO_LOWER = -math.inf


class SolverMissing(RuntimeError):
    """The solver is not installed (OR-Tools, the ``exact`` extra)."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the solver found: the optimum (``optimal``), the best plan it found within its work budget, not
    proven optimal (``feasible``: the same on every machine), no plan at or under the bound
    (``infeasible``), or nothing usable within its time limit (``limit``, with the best plan found, if any;
    the clock stopped it, so another machine may find another)."""

    status: str
    solution: Solution | None = None


class Program(Protocol):
    """A mixed-integer program over whole numbers from 0 (see :class:`Model`), and how to read a plan from
    the solver's values (None: the values are no plan, and a finer program must be solved)."""

    cost: list[float]
    upper: list[int]
    entries: list[tuple[int, int, int]]
    lo: list[float]
    hi: list[float]

    def read(self, x: list[int]) -> Solution | None: ...


def run(
    m: Program, time_limit: float | None, work_limit: float | None = None, *, linearized: bool = False
) -> Outcome:
    """Solve ``m`` with OR-Tools CP-SAT on one worker (deterministic): ``optimal``, ``infeasible``,
    ``limit`` or ``finer`` (the optimum read as no plan). ``work_limit`` bounds the solver's deterministic
    time (the same on every machine), ``time_limit`` its wall-clock seconds (a safety net only).
    ``linearized`` gives the solver the program's whole linear relaxation, which proves a covering program
    (:mod:`autoscaler.core.planning.exact_patterns`) optimal in a fraction of the work."""
    try:
        from ortools.sat.python import cp_model
    except ImportError as err:  # the "exact" extra is not installed
        raise SolverMissing(f"the exact plan needs OR-Tools ({err})") from None
    if not m.cost:
        return Outcome("infeasible")
    model = cp_model.CpModel()
    xs = [model.new_int_var(0, u, f"x{i}") for i, u in enumerate(m.upper)]
    rows: list[list[tuple[int, int]]] = [[] for _ in m.lo]
    for r, v, a in m.entries:
        rows[r].append((v, a))
    for r, terms in enumerate(rows):
        expr = cp_model.LinearExpr.weighted_sum([xs[v] for v, _ in terms], [a for _, a in terms])
        if math.isfinite(m.lo[r]):
            model.add(expr >= int(m.lo[r]))
        if math.isfinite(m.hi[r]):
            model.add(expr <= int(m.hi[r]))
    priced = [(x, round(c * 1e6)) for x, c in zip(xs, m.cost, strict=True) if c]
    model.minimize(cp_model.LinearExpr.weighted_sum([x for x, _ in priced], [c for _, c in priced]))
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1  # one worker searches the same way every time
    if linearized:
        solver.parameters.linearization_level = 2
    if work_limit is not None:
        solver.parameters.max_deterministic_time = work_limit
    if time_limit is not None:
        solver.parameters.max_time_in_seconds = time_limit
    status = solver.solve(model)
    if status == cp_model.INFEASIBLE:
        return Outcome("infeasible")
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return Outcome("limit")
    solution = m.read([int(solver.value(x)) for x in xs])
    if solution is None:
        return Outcome("finer")
    if status == cp_model.OPTIMAL:
        return Outcome("optimal", solution)
    # Stopped by the work budget, the best plan found is the same on any machine; by the clock, it is not.
    worked = work_limit is not None and solver.deterministic_time >= work_limit * 0.999
    return Outcome("feasible" if worked else "limit", solution)


def run_highs(m: Program, time_limit: float | None, work_limit: float | None = None) -> Outcome:
    """Solve ``m`` with HiGHS through SciPy, as :func:`run` does with CP-SAT (to compare the two; HiGHS has
    no deterministic time, so ``work_limit`` is not used)."""
    try:
        import numpy as np
        from scipy.optimize import LinearConstraint, milp
        from scipy.sparse import csr_array
    except ImportError as err:
        raise SolverMissing(f"HiGHS needs SciPy ({err})") from None
    if not m.cost:
        return Outcome("infeasible")
    rows, cols, vals = zip(*m.entries, strict=True) if m.entries else ((), (), ())
    a = csr_array((vals, (rows, cols)), shape=(len(m.lo), len(m.cost)))
    options: dict[str, object] = {"disp": False, "mip_rel_gap": 1e-9, "presolve": True}
    if time_limit is not None:
        options["time_limit"] = time_limit
    res = milp(
        np.array(m.cost),
        integrality=np.ones(len(m.cost)),
        bounds=(np.zeros(len(m.cost)), np.array(m.upper, dtype=float)),
        constraints=LinearConstraint(a, np.array(m.lo, dtype=float), np.array(m.hi, dtype=float)),
        options=options,
    )
    if res.x is None:
        return Outcome("infeasible" if res.status == 2 else "limit")
    solution = m.read([round(v) for v in res.x])
    if solution is None:
        return Outcome("finer")
    return Outcome("optimal" if res.status == 0 else "limit", solution)


class Rows:
    """Variables and rows of a program, all in whole numbers (a row is divided by the gcd of its numbers)."""

    def __init__(self) -> None:
        self.cost: list[float] = []
        self.upper: list[int] = []
        self.entries: list[tuple[int, int, int]] = []
        self.lo: list[float] = []
        self.hi: list[float] = []

    def var(self, cost: float, upper: int) -> int:
        self.cost.append(cost)
        self.upper.append(upper)
        return len(self.cost) - 1

    def row(self, terms: list[tuple[int, int]], lo: float, hi: float) -> None:
        terms = [(v, a) for v, a in terms if a]
        if not terms:
            return
        scale = 0
        for _, a in terms:
            scale = math.gcd(scale, a)
        for x in (lo, hi):
            if math.isfinite(x):
                scale = math.gcd(scale, int(x))
        r = len(self.lo)
        self.entries.extend((r, v, a // scale) for v, a in terms)
        self.lo.append(int(lo) // scale if math.isfinite(lo) else NO_LOWER)
        self.hi.append(int(hi) // scale if math.isfinite(hi) else math.inf)

    def limits(self, p: Problem, used: list[tuple[int, NodeType, int]], cost_bound: float | None) -> None:
        """The cluster limits and the cost bound over ``used``: (variable, type, nodes one unit is)."""
        lim = p.limits
        if lim.gpus is not None:
            self.row([(v, t.offering.gpu_count) for v, t, _ in used], 0, lim.gpus)
        if lim.cpu_milli is not None:
            self.row([(v, t.offering.vcpu * 1000) for v, t, _ in used], 0, lim.cpu_milli)
        if lim.nodes is not None:
            self.row([(v, 1) for v, _, _ in used], 0, lim.nodes)
        if cost_bound is not None:
            # In millionths of a dollar so the row stays whole; a plan at the bound itself is allowed.
            self.row([(v, round(t.price * 1e6)) for v, t, _ in used], 0, math.floor(cost_bound * 1e6 + 1e-6))


def most_nodes(p: Problem, t: NodeType, pods: int, cost_bound: float | None) -> int:
    """Most nodes of ``t`` a plan may buy: one per pod it may hold, within the cost bound and the limits."""
    k = pods
    if cost_bound is not None and t.price > 0:
        k = min(k, int(cost_bound / t.price + 1e-9))
    lim, o = p.limits, t.offering
    if lim.gpus is not None and o.gpu_count:
        k = min(k, lim.gpus // o.gpu_count)
    if lim.cpu_milli is not None and o.vcpu:
        k = min(k, lim.cpu_milli // (o.vcpu * 1000))
    if lim.nodes is not None:
        k = min(k, lim.nodes)
    return k


def fitting(p: Problem, t: NodeType) -> dict[int, int]:
    """The groups a node of ``t`` takes, with how many of each fit on it alone."""
    out = {}
    devices = device_shape(t.offering)
    whole = min(devices[0], t.alloc.get(NVIDIA_GPU) // 1000)
    for g in sorted(t.groups):
        group = p.groups[g]
        k = group.request.times_fits_in(t.alloc)
        share = group.share
        if share is not None and k > 0:
            hundredths = need(share, devices)
            if hundredths is None or whole < share.devices:
                continue
            k = min(k, (FULL // hundredths) * whole // share.devices)
        if k > 0:
            out[g] = min(k, len(group.pods))
    return out


# A slot: its type, its "bought" variable, its count variable per group, and its devices: per device (or, in
# aggregate, per compute mode) the variable of devices taken and the share variables per group.
_Slot = tuple[int, int, dict[int, int], list[tuple[int, dict[int, int]]]]


class Model(Rows):
    """The program of a :class:`Problem` node by node: each type's nodes are numbered slots, bought in
    order, each with the count of each group's pods on it; shares are packed per node in aggregate (see the
    module), or ``per_device``."""

    def __init__(self, p: Problem, cost_bound: float | None, *, per_device: bool = False) -> None:
        super().__init__()
        self.p = p
        self.per_device = per_device
        self.slots: list[_Slot] = []
        counts: dict[int, list[int]] = {i: [] for i in range(len(p.groups))}
        for t_index, t in enumerate(p.types):
            fits = fitting(p, t)
            if fits:
                most = most_nodes(p, t, sum(len(p.groups[g].pods) for g in fits), cost_bound)
                self.add_slots(t_index, t, fits, most, counts)
        self.cover(counts)
        self.limits(p, [(s[1], p.types[s[0]], 1) for s in self.slots], cost_bound)

    def cover(self, counts: dict[int, list[int]]) -> None:
        """Every pod of each group placed once: ``counts`` are the variables counting a group's pods."""
        for g, variables in counts.items():
            n = len(self.p.groups[g].pods)
            self.row([(v, 1) for v in variables], n, n)

    def add_slots(
        self, t_index: int, t: NodeType, fits: dict[int, int], most: int, counts: dict[int, list[int]]
    ) -> None:
        """``most`` numbered nodes of type ``t``, bought in order."""
        previous = -1
        for _ in range(most):
            slot = self._slot(t_index, t, fits)
            for g, var in slot[2].items():
                counts[g].append(var)
            if previous >= 0:  # nodes of a type are bought in order: no two plans differ by naming
                self.row([(previous, 1), (slot[1], -1)], 0, math.inf)
            previous = slot[1]

    def _slot(self, t_index: int, t: NodeType, fitting: dict[int, int]) -> _Slot:
        p = self.p
        u = self.var(t.price, 1)
        n = {g: self.var(0.0, k) for g, k in fitting.items()}
        for g, var in n.items():
            self.row([(var, 1), (u, -fitting[g])], NO_LOWER, 0)
        sharing: dict[int, GpuShare] = {}
        for g in n:
            share = p.groups[g].share
            if share is not None:
                sharing[g] = share
        devices: list[tuple[int, dict[int, int]]] = []
        if sharing:
            if self.per_device:
                devices = self._devices(t, n, fitting, sharing)
            else:
                devices = self._modes(t, n, sharing)
        names = sorted({r for g in n for r in p.groups[g].request} | ({NVIDIA_GPU} if sharing else set()))
        for r in names:
            terms = [(var, p.groups[g].request.get(r)) for g, var in n.items()]
            if r == NVIDIA_GPU:  # each device holding shares is held whole by KAI's reservation pod
                terms += [(z, 1000) for z, _ in devices]
            self.row([*terms, (u, -t.alloc.get(r))], NO_LOWER, 0)
        slot = (t_index, u, n, devices)
        self.slots.append(slot)
        return slot

    def _modes(
        self, t: NodeType, n: dict[int, int], sharing: dict[int, GpuShare]
    ) -> list[tuple[int, dict[int, int]]]:
        """Shares in aggregate: per compute mode, the devices given to it hold its shares' hundredths, and a
        share over 1/(j+1) of a device leaves room for at most j like it on one."""
        shape = device_shape(t.offering)
        out = []
        for mode in sorted({s.compute_mode for s in sharing.values()}):
            z = self.var(0.0, shape[0])
            mine = {g: s for g, s in sharing.items() if s.compute_mode == mode}
            load = []
            for g, s in mine.items():
                k = need(s, shape)
                assert k is not None
                load.append((n[g], k * s.devices))
            self.row([*load, (z, -FULL)], NO_LOWER, 0)
            for j in range(1, 4):  # shares over a half, a third, a quarter of a device
                big = [(n[g], s.devices) for g, s in mine.items() if (need(s, shape) or 0) * (j + 1) > FULL]
                if big:
                    self.row([*big, (z, -j)], NO_LOWER, 0)
            for g, s in mine.items():
                if s.devices > 1:  # one slot on each of that many different devices
                    self.row([(z, 1), (n[g], -s.devices)], 0, math.inf)
            out.append((z, {g: n[g] for g in mine}))
        return out

    def _devices(
        self, t: NodeType, n: dict[int, int], fitting: dict[int, int], sharing: dict[int, GpuShare]
    ) -> list[tuple[int, dict[int, int]]]:
        """Shares device by device: at most 100 hundredths on each, one compute mode each."""
        shape = device_shape(t.offering)
        modes = {s.compute_mode for s in sharing.values()}
        out: list[tuple[int, dict[int, int]]] = []
        previous = -1
        for _ in range(shape[0]):
            z = self.var(0.0, 1)
            shares = {}
            load = []
            for g, s in sharing.items():
                k = need(s, shape)
                assert k is not None
                shares[g] = self.var(0.0, min(fitting[g], FULL // k))
                load.append((shares[g], k))
            self.row([*load, (z, -FULL)], NO_LOWER, 0)
            if len(modes) > 1:
                q = self.var(0.0, 1)  # 1: the device's shares are sm-sharing
                for g, s in sharing.items():
                    if s.compute_mode == ComputeMode.SM_SHARING:
                        self.row([(shares[g], 1), (q, -FULL)], NO_LOWER, 0)
                    else:
                        self.row([(shares[g], 1), (q, FULL)], NO_LOWER, FULL)
            if previous >= 0:
                self.row([(previous, 1), (z, -1)], 0, math.inf)
            previous = z
            out.append((z, shares))
        for g, s in sharing.items():
            self.row([*((d[1][g], 1) for d in out), (n[g], -s.devices)], 0, 0)
            if s.devices > 1:  # one slot on each of that many different devices
                for d in out:
                    self.row([(d[1][g], 1), (n[g], -1)], NO_LOWER, 0)
        return out

    def read(self, x: list[int]) -> Solution | None:
        """The plan the solver's values say; None when, in aggregate, a node's shares do not pack onto its
        devices."""
        nodes = self.read_slots(x)
        if nodes is None:
            return None
        return Solution(tuple(nodes), round(sum(self.p.types[b.type].price for b in nodes), 6))

    def read_slots(self, x: list[int]) -> list[Bought] | None:
        """The numbered nodes bought, with their pods; None when some node's shares do not pack."""
        nodes = []
        for t_index, u, n, devices in self.slots:
            if not x[u]:
                continue
            counts = tuple((g, x[v]) for g, v in n.items() if x[v])
            if not counts:
                continue  # bought for nothing: an optimum never does, a plan cut short might
            t = self.p.types[t_index]
            if self.per_device:
                on = tuple(
                    tuple((g, x[v]) for g, v in shares.items() if x[v])
                    for _, shares in devices
                    if any(x[v] for v in shares.values())
                )
            else:
                shares_here = [
                    (g, share, c) for g, c in counts if (share := self.p.groups[g].share) is not None
                ]
                packed = pack(shares_here, device_shape(t.offering)) if shares_here else ()
                if packed is None:
                    return None
                on = packed
            nodes.append(Bought(t_index, counts, on))
        return nodes
