"""Solving the exact plan's problem: a small program first, finer ones only where its answer is no plan.

The first program counts nodes per type and pods per (group, type), with each type's resources in aggregate
over its nodes (each group at most as many per node as fit on one alone). It is a relaxation of the real
problem, and has none of the symmetry of numbered nodes, so it is small and quick to prove. Its optimum is
split onto that many nodes of each type, biggest pods first; when every split succeeds it is a plan, and so
the exact optimum. The types whose split failed are then modelled node by node
(:class:`autoscaler.core.planning.exact_model.Model`), the others still by counts, and the program solved
again, until the optimum is a plan (at worst every type is numbered; past that, device by device).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from autoscaler.core.gpu.share import GpuShare
from autoscaler.core.planning.exact import FULL, Bought, NodeType, Problem, Solution, device_shape, need, pack
from autoscaler.core.planning.exact_model import (
    NO_LOWER,
    Model,
    Outcome,
    Program,
    Rows,
    fitting,
    most_nodes,
    run,
)
from autoscaler.core.resources import NVIDIA_GPU, Resources

__all__ = ["Counts", "solve", "split"]

Runner = Callable[[Program, float | None, float | None], Outcome]


def solve(
    p: Problem,
    *,
    cost_bound: float | None = None,
    time_limit: float | None = None,
    rounds: int | None = None,
    work_limit: float | None = None,
    runner: Runner = run,
    tight: bool = False,
) -> Outcome:
    """The cheapest plan of ``p`` that costs at most ``cost_bound`` $/h. At most ``rounds`` programs are
    solved (None: as many as it takes; past them the outcome is ``limit``), each within ``work_limit`` of the
    solver's deterministic time and ``time_limit`` seconds, which only make it give up: a plan it returns as
    ``optimal`` is proven so. ``runner`` solves one program (CP-SAT; HiGHS to compare). ``tight`` numbers
    only one node more of a type than the counts wanted when its counts did not split: a far smaller program
    that still finds plans, but proves nothing (its answer is at best ``feasible``)."""
    if not p.groups:
        return Outcome("optimal", Solution((), 0.0))
    slotted: dict[int, int | None] = {}
    done = 0
    while rounds is None or done < rounds:
        done += 1
        m = Counts(p, cost_bound, slotted)
        outcome = runner(m, time_limit, work_limit)
        if outcome.status != "finer":
            cut = any(n is not None for n in slotted.values())
            return Outcome("feasible", outcome.solution) if cut and outcome.status == "optimal" else outcome
        if not m.failed:  # the numbered nodes' shares do not pack in aggregate: device by device
            if rounds is not None and done >= rounds:
                break
            return runner(Model(p, cost_bound, per_device=True), time_limit, work_limit)
        for t_index, wanted in m.failed.items():
            slotted[t_index] = wanted + 1 if tight else None
    return Outcome("limit")


class Counts(Model):
    """The program by counts for the types not ``slotted`` (nodes of each type, pods of each group on each
    type), and by numbered nodes for those that are (at most as many as ``slotted`` says, None: as many as
    may be bought)."""

    def __init__(
        self, p: Problem, cost_bound: float | None, slotted: Mapping[int, int | None] | None = None
    ) -> None:
        slotted = slotted or {}
        Rows.__init__(self)
        self.p = p
        self.per_device = False
        self.slots = []
        # The types whose counts did not split onto their nodes, with how many nodes the counts wanted.
        self.failed: dict[int, int] = {}
        # Per type counted: (type index, nodes variable, count variable per group).
        self.types: list[tuple[int, int, dict[int, int]]] = []
        counts: dict[int, list[int]] = {i: [] for i in range(len(p.groups))}
        for t_index, t in enumerate(p.types):
            fits = fitting(p, t)
            if not fits:
                continue
            most = most_nodes(p, t, sum(len(p.groups[g].pods) for g in fits), cost_bound)
            if most <= 0:
                continue
            if t_index in slotted:
                cap = slotted[t_index]
                self.add_slots(t_index, t, fits, most if cap is None else min(most, cap), counts)
                continue
            y = self.var(t.price, most)
            x = {g: self.var(0.0, min(len(p.groups[g].pods), k * most)) for g, k in fits.items()}
            for g, var in x.items():
                self.row([(var, 1), (y, -fits[g])], NO_LOWER, 0)
                counts[g].append(var)
            devices = self._shares(t, x, most)
            names = sorted({r for g in x for r in p.groups[g].request} | ({NVIDIA_GPU} if devices else set()))
            for r in names:
                terms = [(var, p.groups[g].request.get(r)) for g, var in x.items()]
                if r == NVIDIA_GPU:  # each device holding shares is held whole by KAI's reservation pod
                    terms += [(z, 1000) for z in devices]
                self.row([*terms, (y, -t.alloc.get(r))], NO_LOWER, 0)
            self.types.append((t_index, y, x))
        self.cover(counts)
        used = [(y, p.types[t], 1) for t, y, _ in self.types] + [(s[1], p.types[s[0]], 1) for s in self.slots]
        self.limits(p, used, cost_bound)

    def _shares(self, t: NodeType, x: dict[int, int], most: int) -> list[int]:
        """Per compute mode, the devices of the type's nodes given to it hold its shares' hundredths, and a
        share over 1/(j+1) of a device leaves room for at most j like it on one."""
        shape = device_shape(t.offering)
        sharing: dict[int, GpuShare] = {}
        for g in x:
            share = self.p.groups[g].share
            if share is not None:
                sharing[g] = share
        out = []
        for mode in sorted({s.compute_mode for s in sharing.values()}):
            z = self.var(0.0, shape[0] * most)
            mine = {g: s for g, s in sharing.items() if s.compute_mode == mode}
            load = []
            for g, s in mine.items():
                k = need(s, shape)
                assert k is not None
                load.append((x[g], k * s.devices))
            self.row([*load, (z, -FULL)], NO_LOWER, 0)
            for j in range(1, 4):
                big = [(x[g], s.devices) for g, s in mine.items() if (need(s, shape) or 0) * (j + 1) > FULL]
                if big:
                    self.row([*big, (z, -j)], NO_LOWER, 0)
            out.append(z)
        return out

    def read(self, x: list[int]) -> Solution | None:
        nodes = self.read_slots(x)
        if nodes is None:
            return None
        failed = {}
        for t_index, y, counts in self.types:
            if not x[y]:
                continue
            on = split(self.p, t_index, {g: x[v] for g, v in counts.items() if x[v]}, x[y])
            if on is None:
                failed[t_index] = x[y]
            else:
                nodes.extend(on)
        if failed:
            self.failed = failed
            return None
        nodes.sort(key=lambda b: b.type)
        return Solution(tuple(nodes), round(sum(self.p.types[b.type].price for b in nodes), 6))


def split(p: Problem, t_index: int, counts: dict[int, int], nodes: int) -> list[Bought] | None:
    """``counts`` pods (by group) on at most ``nodes`` nodes of type ``t_index``, biggest first, each on the
    first node it fits on (resources and GPU devices); None when one fits on none."""
    t = p.types[t_index]
    shape = device_shape(t.offering)
    pods = sorted((g for g, n in counts.items() for _ in range(n)), key=lambda g: (-_size(p, t, g, shape), g))
    used: list[Resources] = []
    held: list[dict[int, int]] = []
    on_devices: list[tuple[tuple[tuple[int, int], ...], ...]] = []
    for g in pods:
        group = p.groups[g]
        for i in range(len(used) + 1):
            if i == len(used):
                if len(used) >= nodes:
                    return None
                used.append(Resources())
                held.append({})
                on_devices.append(())
            mine = dict(held[i])
            mine[g] = mine.get(g, 0) + 1
            devices: tuple[tuple[tuple[int, int], ...], ...] = ()
            shares = [(h, s, n) for h, n in mine.items() if (s := p.groups[h].share) is not None]
            if shares:
                packed = pack(shares, shape)
                if packed is None:
                    continue
                devices = packed
            after = used[i] + group.request
            if not (after + {NVIDIA_GPU: 1000 * len(devices)}).fits_in(t.alloc):
                continue
            used[i], held[i], on_devices[i] = after, mine, devices
            break
    return [Bought(t_index, tuple(sorted(h.items())), d) for h, d in zip(held, on_devices, strict=True) if h]


def _size(p: Problem, t: NodeType, g: int, shape: tuple[int, int, float]) -> float:
    """How much of a node of ``t`` one pod of group ``g`` takes, by its largest part."""
    group = p.groups[g]
    parts = [v / t.alloc.get(r) for r, v in group.request.items() if t.alloc.get(r)]
    share = group.share
    if share is not None and shape[0]:
        parts.append((need(share, shape) or FULL) * share.devices / (FULL * shape[0]))
    return max(parts, default=0.0)
