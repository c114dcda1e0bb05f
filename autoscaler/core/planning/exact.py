"""The exact plan for one batch of pods that need new nodes: which offerings to buy, how many of each, and
which pods go on each node, at the least $/h, as a mixed-integer program.

The model is written from the offerings' own data, not from the heuristic's packing: a node of an offering
gives its pods what the offering's node template leaves them (:meth:`OfferingIndex.allocatable`: capacity
less kubelet reservations and DaemonSet overhead, with MIG and other layouts' resources), and a pod may go
on an offering when the offering filters of the placement engine allow it there
(:meth:`OfferingIndex.allowed`: selectors, node affinity, taints, instance annotations, capacity types).
KAI GPU shares are packed per device: the shares on one device take at most 100 hundredths of it (a
``gpu-fraction`` as KAI rounds it, a ``gpu-memory`` as its part of the device's memory), compute modes never
share a device, a partial-GPU device holds one share, a share on several devices takes one slot on each of
that many, and every device that holds shares is held whole by KAI's reservation pod. Pods of bin-packing and
bin-selection never share a node, and ``clusterGPULimit``, ``clusterCPULimit`` and ``maxNodes`` bound what is
bought.

Two uses: ``bench/plan_optimality.py`` measures the heuristic against this optimum, and scale-up replaces the
heuristic's nodes with the exact ones when a batch is small and they are strictly cheaper
(:mod:`autoscaler.core.planning.exact_step`). SciPy (HiGHS) solves it; without SciPy :func:`solve` says so
and the heuristic's plan stands.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from autoscaler.core.fit import Constraints
from autoscaler.core.gpu.share import ComputeMode, GpuShare
from autoscaler.core.model import Pod
from autoscaler.core.offering import Offering
from autoscaler.core.placement.bins import shape_key
from autoscaler.core.placement.fits import request
from autoscaler.core.planning.decisions import BIN_PACKING
from autoscaler.core.planning.offerings import OfferingIndex, price_order
from autoscaler.core.resources import NVIDIA_GPU, Resources

__all__ = ["Limits", "NodeType", "PodGroup", "Problem", "Solution", "problem", "solve", "verify"]

FULL = 100  # hundredths of a device, as KAI accounts shares


@dataclass(frozen=True, slots=True)
class Limits:
    """What the cluster limits leave for new nodes (``None``: no limit)."""

    gpus: int | None = None
    cpu_milli: int | None = None
    nodes: int | None = None


@dataclass(frozen=True, slots=True)
class PodGroup:
    """Identical pods: one constraint set, one mode, one request."""

    pods: tuple[Pod, ...]
    c: Constraints
    mode: str
    request: Resources

    @property
    def share(self) -> GpuShare | None:
        return self.c.gpu_share


@dataclass(frozen=True, slots=True)
class NodeType:
    """Offerings a new node may be bought as that are the same to the model: one size, price and node
    template, allowed to the same pod groups (the zones of one instance type, mostly). ``offerings`` are
    cheapest first; a node of the type costs the first one's price."""

    offerings: tuple[Offering, ...]
    alloc: Resources
    mode: str
    groups: frozenset[int]  # the pod groups that may go on it

    @property
    def offering(self) -> Offering:
        return self.offerings[0]

    @property
    def price(self) -> float:
        return self.offerings[0].price


@dataclass(frozen=True, slots=True)
class Problem:
    groups: tuple[PodGroup, ...]
    types: tuple[NodeType, ...]
    limits: Limits

    @property
    def pods(self) -> int:
        return sum(len(g.pods) for g in self.groups)


@dataclass(frozen=True, slots=True)
class Bought:
    """One node to buy: its type (index into ``Problem.types``), how many pods of each group it holds (pairs
    of group index and count), and for GPU shares, the same per device (one tuple per device that holds
    shares)."""

    type: int
    counts: tuple[tuple[int, int], ...]
    devices: tuple[tuple[tuple[int, int], ...], ...] = ()


@dataclass(frozen=True, slots=True)
class Solution:
    """Nodes to buy, in a deterministic order, and their cost in $/h."""

    nodes: tuple[Bought, ...]
    cost: float


class SolverMissing(RuntimeError):
    """SciPy, which solves the model, is not installed (the ``exact`` extra)."""


def problem(
    pods: Sequence[tuple[Pod, Constraints, str]], index: OfferingIndex, limits: Limits = Limits()
) -> Problem:
    """The model for ``pods`` (each with its constraints and mode) on new nodes of the index's offerings.
    Reserved offerings are left out: their counts and windows are the heuristic's to spend."""
    by_key: dict[tuple[object, ...], list[Pod]] = {}
    heads: dict[tuple[object, ...], tuple[Constraints, str, Resources]] = {}
    for pod, c, mode in pods:
        key = (c, mode, pod.requests)
        by_key.setdefault(key, []).append(pod)
        heads.setdefault(key, (c, mode, request(pod)))
    groups = []
    for group_key, members in by_key.items():
        c, mode, req = heads[group_key]
        groups.append(PodGroup(tuple(sorted(members, key=lambda p: p.key)), c, mode, req))
    groups.sort(key=lambda g: g.pods[0].key)
    allowed = [index.allowed(g.c, g.mode == BIN_PACKING) for g in groups]
    # Offerings that are the same to the model become one node type (its cheapest offering first).
    alike: dict[tuple[object, ...], tuple[Resources, str, frozenset[int], list[Offering]]] = {}
    for o in index.offerings:
        if o.reservation is not None:
            continue
        sk = shape_key(o)
        for mode in sorted({g.mode for g in groups}):
            fits = frozenset(
                i for i, g in enumerate(groups) if g.mode == mode and o in allowed[i].get(sk, frozenset())
            )
            if not fits:
                continue
            alloc = index.allocatable(o)
            same = (alloc, o.price, _devices(o), o.gpu_count, o.vcpu, mode, fits)
            alike.setdefault(same, (alloc, mode, fits, []))[3].append(o)
    types = [
        NodeType(tuple(sorted(offerings, key=price_order)), alloc, mode, fits)
        for alloc, mode, fits, offerings in alike.values()
    ]
    types = _undominated(types, limits)
    types.sort(key=lambda t: price_order(t.offering))
    return Problem(tuple(groups), tuple(types), limits)


def _devices(o: Offering) -> tuple[int, int, float]:
    """An offering's GPU devices as shares see them: how many, one's memory, the part of a GPU one is."""
    if o.gpu_count and 0 < o.gpu_fraction < o.gpu_count:
        return (o.gpu_count, o.gpu_memory_mib, o.gpu_fraction / o.gpu_count)
    return (o.gpu_count, o.gpu_memory_mib, 1.0)


def need(share: GpuShare, devices: tuple[int, int, float]) -> int | None:
    """Hundredths of one device of ``devices`` a share takes (None: it cannot go on such a device)."""
    _, memory, fraction = devices
    if fraction < 1.0:  # a partition of a GPU holds one share that it covers
        if share.portion is not None:
            return FULL if share.portion <= fraction + 1e-9 else None
        return FULL if memory and share.memory_mib is not None and share.memory_mib <= memory else None
    if share.portion is not None:
        return math.floor(share.portion * FULL + 0.5)
    if not memory or share.memory_mib is None or share.memory_mib > memory:
        return None
    return max(1, math.ceil(share.memory_mib * FULL / memory))


def _undominated(types: list[NodeType], limits: Limits) -> list[NodeType]:
    """Drop a type when another of its mode is no dearer, holds at least as much of everything, takes every
    pod group it takes and counts no more against the limits (the first in price order wins a tie)."""
    ordered = sorted(types, key=lambda t: price_order(t.offering))
    kept: list[NodeType] = []
    for t in ordered:
        if not any(_dominates(k, t, limits) for k in kept):
            kept.append(t)
    return kept


def _dominates(a: NodeType, b: NodeType, limits: Limits) -> bool:
    if a.mode != b.mode or a.price > b.price or not b.groups <= a.groups:
        return False
    if any(a.alloc.get(r) < v for r, v in b.alloc.items()):
        return False
    if _devices(a.offering) != _devices(b.offering):
        return False  # shares pack per device: another device size is not simply more room
    oa, ob = a.offering, b.offering
    if limits.gpus is not None and oa.gpu_count > ob.gpu_count:
        return False
    return limits.cpu_milli is None or oa.vcpu <= ob.vcpu


def verify(p: Problem, s: Solution) -> str:
    """Why ``s`` is not a plan of ``p`` in whole numbers ("" when it is): every pod placed once, on a type
    its group may take, within each node's resources and GPU devices, and within the limits."""
    placed = [0] * len(p.groups)
    gpus = cpu = 0
    for node in s.nodes:
        t = p.types[node.type]
        why = _node_fault(p, t, node)
        if why:
            return why
        for g_index, n in node.counts:
            placed[g_index] += n
        gpus += t.offering.gpu_count
        cpu += t.offering.vcpu * 1000
    if any(n != len(g.pods) for n, g in zip(placed, p.groups, strict=True)):
        return f"pods placed per group {placed}, pods per group {[len(g.pods) for g in p.groups]}"
    lim = p.limits
    if lim.gpus is not None and gpus > lim.gpus:
        return f"{gpus} GPUs bought, over the {lim.gpus} the limit leaves"
    if lim.cpu_milli is not None and cpu > lim.cpu_milli:
        return f"{cpu}m cpu bought, over the {lim.cpu_milli}m the limit leaves"
    if lim.nodes is not None and len(s.nodes) > lim.nodes:
        return f"{len(s.nodes)} nodes bought, over the {lim.nodes} the limit leaves"
    return ""


def _node_fault(p: Problem, t: NodeType, node: Bought) -> str:
    used = Resources()
    for g_index, n in node.counts:
        if g_index not in t.groups:
            return f"pods of group {g_index} on a {t.offering.key}, which they may not get"
        used = used + p.groups[g_index].request.scaled(n)
    devices = _devices(t.offering)
    if len(node.devices) > devices[0]:
        return f"{len(node.devices)} GPUs shared on a {t.offering.key}"
    on_devices = dict.fromkeys((g for g, _ in node.counts if p.groups[g].share is not None), 0)
    for device in node.devices:
        load, modes = 0, set()
        for g_index, n in device:
            share = p.groups[g_index].share
            k = None if share is None else need(share, devices)
            if share is None or k is None or n > dict(node.counts).get(g_index, 0):
                return f"group {g_index} cannot have {n} shares on one GPU of a {t.offering.key}"
            load += k * n
            modes.add(share.compute_mode)
            on_devices[g_index] = on_devices.get(g_index, 0) + n
        if load > FULL or len(modes) > 1:
            return f"a GPU of a {t.offering.key} holds {load} hundredths in modes {sorted(modes)}"
    for g_index, n in node.counts:
        share = p.groups[g_index].share
        if share is not None and on_devices.get(g_index, 0) != n * share.devices:
            return f"group {g_index} has {n} pods but {on_devices.get(g_index, 0)} device shares"
    if node.devices:
        used = used + {NVIDIA_GPU: len(node.devices) * 1000}
    if not used.fits_in(t.alloc):
        return f"a {t.offering.key} cannot hold {dict(used)}"
    return ""


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the solver found: the optimum (``optimal``), none cheaper than the bound (``infeasible``), or
    nothing it could prove within its time limit (``limit``, with the best plan found, if any)."""

    status: str
    solution: Solution | None = None


def solve(p: Problem, *, cost_bound: float | None = None, time_limit: float | None = None) -> Outcome:
    """The cheapest plan of ``p`` that costs at most ``cost_bound`` $/h. ``time_limit`` (seconds) only
    makes the solver give up: a plan it returns is proven optimal or marked ``limit``."""
    try:
        import numpy as np
        from scipy.optimize import LinearConstraint, milp
        from scipy.sparse import csr_array
    except ImportError as err:  # the "exact" extra is not installed
        raise SolverMissing(f"the exact plan needs SciPy ({err})") from None
    m = _Model(p, cost_bound)
    if not m.slots:
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
    return Outcome("optimal" if res.status == 0 else "limit", solution)


class _Model:
    """The mixed-integer program of a :class:`Problem`: variables (cost, upper bound) and rows (sparse
    entries, lower and upper sides), all in whole numbers (a row is divided by the gcd of its numbers)."""

    def __init__(self, p: Problem, cost_bound: float | None) -> None:
        self.p = p
        self.cost: list[float] = []
        self.upper: list[int] = []
        self.entries: list[tuple[int, int, int]] = []
        self.lo: list[float] = []
        self.hi: list[float] = []
        # Per slot: (type index, used variable, {group: count variable}, [per device: (shared variable,
        # {group: share variable})]).
        self.slots: list[tuple[int, int, dict[int, int], list[tuple[int, dict[int, int]]]]] = []
        counts: dict[int, list[int]] = {i: [] for i in range(len(p.groups))}
        lim = p.limits
        for t_index, t in enumerate(p.types):
            fitting = self._fitting(t)
            if not fitting:
                continue
            room = sum(len(p.groups[g].pods) for g in fitting)
            k = room
            if cost_bound is not None and t.price > 0:
                k = min(k, int(cost_bound / t.price + 1e-9))
            o = t.offering
            if lim.gpus is not None and o.gpu_count:
                k = min(k, lim.gpus // o.gpu_count)
            if lim.cpu_milli is not None and o.vcpu:
                k = min(k, lim.cpu_milli // (o.vcpu * 1000))
            if lim.nodes is not None:
                k = min(k, lim.nodes)
            previous = -1
            for _ in range(k):
                slot = self._slot(t_index, t, fitting)
                for g, var in slot[2].items():
                    counts[g].append(var)
                if previous >= 0:  # nodes of a type are bought in order: no two plans differ by naming
                    self._row([(previous, 1), (slot[1], -1)], 0, math.inf)
                previous = slot[1]
        for g, variables in counts.items():
            n = len(p.groups[g].pods)
            self._row([(v, 1) for v in variables], n, n)
        used = [(s[1], p.types[s[0]]) for s in self.slots]
        if lim.gpus is not None:
            self._row([(v, t.offering.gpu_count) for v, t in used], 0, lim.gpus)
        if lim.cpu_milli is not None:
            self._row([(v, t.offering.vcpu * 1000) for v, t in used], 0, lim.cpu_milli)
        if lim.nodes is not None:
            self._row([(v, 1) for v, _ in used], 0, lim.nodes)
        if cost_bound is not None:
            # In cents ×10⁴ so the row stays whole; a plan at the bound itself is allowed.
            self._row([(v, round(t.price * 1e6)) for v, t in used], 0, round(cost_bound * 1e6))

    def _fitting(self, t: NodeType) -> dict[int, int]:
        """The groups a node of ``t`` takes, with how many of each fit on it alone."""
        out = {}
        devices = _devices(t.offering)
        for g in sorted(t.groups):
            group = self.p.groups[g]
            k = group.request.times_fits_in(t.alloc)
            share = group.share
            if share is not None and k > 0:
                hundredths = need(share, devices)
                if hundredths is None or devices[0] < share.devices:
                    continue
                whole = t.alloc.get(NVIDIA_GPU) // 1000
                k = min(k, (FULL // hundredths) * min(devices[0], whole) // share.devices)
            if k > 0:
                out[g] = min(k, len(group.pods))
        return out

    def _var(self, cost: float, upper: int) -> int:
        self.cost.append(cost)
        self.upper.append(upper)
        return len(self.cost) - 1

    def _row(self, terms: list[tuple[int, int]], lo: float, hi: float) -> None:
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
        self.lo.append(int(lo) // scale if math.isfinite(lo) else -math.inf)
        self.hi.append(int(hi) // scale if math.isfinite(hi) else math.inf)

    def _slot(
        self, t_index: int, t: NodeType, fitting: dict[int, int]
    ) -> tuple[int, int, dict[int, int], list[tuple[int, dict[int, int]]]]:
        p = self.p
        u = self._var(t.price, 1)
        n = {g: self._var(0.0, k) for g, k in fitting.items()}
        for g, var in n.items():
            self._row([(var, 1), (u, -fitting[g])], -math.inf, 0)
        devices = _devices(t.offering)
        sharing = {g: p.groups[g].share for g in n if p.groups[g].share is not None}
        per_device: list[tuple[int, dict[int, int]]] = []
        if sharing:
            modes = {s.compute_mode for s in sharing.values() if s is not None}
            previous = -1
            for _ in range(devices[0]):
                z = self._var(0.0, 1)
                shares = {}
                load = []
                for g, share in sharing.items():
                    assert share is not None
                    k = need(share, devices)
                    assert k is not None
                    shares[g] = self._var(0.0, min(fitting[g], FULL // k))
                    load.append((shares[g], k))
                self._row([*load, (z, -FULL)], -math.inf, 0)
                if len(modes) > 1:
                    q = self._var(0.0, 1)  # 1: the device's shares are sm-sharing
                    for g, share in sharing.items():
                        assert share is not None
                        cap = FULL
                        if share.compute_mode == ComputeMode.SM_SHARING:
                            self._row([(shares[g], 1), (q, -cap)], -math.inf, 0)
                        else:
                            self._row([(shares[g], 1), (q, cap)], -math.inf, cap)
                if previous >= 0:
                    self._row([(previous, 1), (z, -1)], 0, math.inf)
                previous = z
                per_device.append((z, shares))
            for g, share in sharing.items():
                assert share is not None
                terms = [(d[1][g], 1) for d in per_device]
                self._row([*terms, (n[g], -share.devices)], 0, 0)
                if share.devices > 1:  # one slot on each of that many different devices
                    for d in per_device:
                        self._row([(d[1][g], 1), (n[g], -1)], -math.inf, 0)
        names = sorted({r for g in n for r in p.groups[g].request} | ({NVIDIA_GPU} if sharing else set()))
        for r in names:
            terms = [(var, p.groups[g].request.get(r)) for g, var in n.items()]
            if r == NVIDIA_GPU:
                terms += [(z, 1000) for z, _ in per_device]
            self._row([*terms, (u, -t.alloc.get(r))], -math.inf, 0)
        slot = (t_index, u, n, per_device)
        self.slots.append(slot)
        return slot

    def read(self, x: list[int]) -> Solution:
        nodes = []
        cost = 0.0
        for t_index, u, n, per_device in self.slots:
            if not x[u]:
                continue
            counts = tuple((g, x[v]) for g, v in n.items() if x[v])
            if not counts:
                continue  # bought for nothing: an optimum never does, a plan cut short might
            devices = tuple(
                tuple((g, x[v]) for g, v in shares.items() if x[v])
                for z, shares in per_device
                if any(x[v] for v in shares.values())
            )
            nodes.append(Bought(t_index, counts, devices))
            cost += self.p.types[t_index].price
        return Solution(tuple(nodes), round(cost, 6))
