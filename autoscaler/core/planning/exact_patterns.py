"""The exact plan's problem by node patterns: every way one node of a type can be filled that leaves no room
for one more pod of the batch, and how many nodes of each way to buy.

A pattern is checked whole when it is enumerated (the node's resources, and its GPU shares packed device by
device onto the fewest devices, each held whole by KAI's reservation pod), so the program's optimum is always
a plan: nothing is relaxed, no node is numbered, and no second program is needed. Each group's pods are covered at least
once; a pattern with more of a group than is left gives the surplus back, which only frees room. That makes
the program small where nodes hold few pods (GPU shares on one to a few devices, the batches the program by
counts in :mod:`autoscaler.core.planning.exact_solve` often cannot split), and large where a node holds many
small pods, so the enumeration stops at ``MAX_PATTERNS`` patterns or ``MAX_STEPS`` steps (counted, never
timed, so the same batch gets the same answer on every machine) and the caller uses the program by counts,
as it does for a share spread over several devices (``gpu-fraction-num-devices``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from autoscaler.core.planning.exact import FULL, Bought, Problem, Solution, device_shape, need
from autoscaler.core.planning.exact_model import Outcome, Rows, fitting, most_nodes, run
from autoscaler.core.resources import NVIDIA_GPU

__all__ = ["MAX_PATTERNS", "MAX_STEPS", "Pattern", "Patterns", "patterns", "solve"]

MAX_PATTERNS = 3000  # patterns over all types, past which the batch is left to the program by counts
MAX_STEPS = 40_000  # node fillings and device packings tried, the same bound on the work everywhere


@dataclass(frozen=True, slots=True)
class Pattern:
    """One way to fill a node of type ``type``: pods per group (pairs of group index and count) and, for GPU
    shares, the pods of each group on each device that holds shares."""

    type: int
    counts: tuple[tuple[int, int], ...]
    devices: tuple[tuple[tuple[int, int], ...], ...] = ()


class _OverBudget(Exception):
    """The enumeration took more steps than its budget: the batch is left to the program by counts."""


class _Budget:
    def __init__(self, steps: int) -> None:
        self.left = steps

    def spend(self) -> None:
        self.left -= 1
        if self.left < 0:
            raise _OverBudget


def patterns(
    p: Problem,
    *,
    cost_bound: float | None = None,
    max_patterns: int = MAX_PATTERNS,
    max_steps: int = MAX_STEPS,
) -> list[Pattern] | None:
    """The maximal patterns of every type (none holds one more pod of a group it may take without breaking
    the node), types in order, leaving out the types no plan within
    ``cost_bound`` and the limits may buy; None past ``max_patterns`` or ``max_steps``, or when a share
    spans several devices."""
    if any(g.share is not None and g.share.devices > 1 for g in p.groups):
        return None
    budget = _Budget(max_steps)
    nodes: dict[tuple[object, ...], _Node] = {}  # types of one size share what was learnt about it
    out: list[Pattern] = []
    try:
        for t_index, t in enumerate(p.types):
            if most_nodes(p, t, p.pods, cost_bound) <= 0:
                continue  # dearer alone than the bound, or past a limit: no plan buys it
            size = (t.alloc, device_shape(t.offering))
            node = nodes.get(size)
            if node is None:
                node = nodes[size] = _Node(p, t_index, budget)
            out.extend(_of_type(p, t_index, node, budget))
            if len(out) > max_patterns:
                return None
    except _OverBudget:
        return None
    return out


def _of_type(p: Problem, t_index: int, node: _Node, budget: _Budget) -> list[Pattern]:
    fits = fitting(p, p.types[t_index])
    groups = sorted(fits, key=lambda g: (fits[g], g))  # the widest range last, where one count is tried
    found: list[Pattern] = []
    counts = [0] * len(p.groups)

    def fill(i: int) -> None:
        """Every maximal filling of ``groups[i:]``, the ones before fixed."""
        if i == len(groups):
            key = tuple(counts)
            on = node.devices(key)
            if on is None or not any(key):
                return
            for g in groups:  # maximal: no group's pod fits besides
                if counts[g] < fits[g]:
                    counts[g] += 1
                    more = node.devices(tuple(counts))
                    counts[g] -= 1
                    if more is not None:
                        return
            found.append(Pattern(t_index, tuple((g, n) for g, n in enumerate(key) if n), on))
            return
        g = groups[i]
        # A node that holds some pods holds any fewer of them: search the most of this group that fit beside
        # the ones before, then every count from there down (only that one for the last group, as fewer of
        # it would leave room for one more).
        low, high = 0, fits[g]
        while low < high:
            mid = (low + high + 1) // 2
            counts[g] = mid
            budget.spend()
            if node.devices(tuple(counts)) is None:
                high = mid - 1
            else:
                low = mid
        for n in range(low, -1 if i < len(groups) - 1 else low - 1, -1):
            budget.spend()
            counts[g] = n
            fill(i + 1)
        counts[g] = 0

    fill(0)
    return found


_Devices = tuple[tuple[tuple[int, int], ...], ...]


class _Node:
    """Whether pods (a count per group of the problem) fill one node of a size: its resources, and its GPU
    shares on its devices (the fewest devices they pack onto, each held whole by KAI's reservation pod)."""

    def __init__(self, p: Problem, t_index: int, budget: _Budget) -> None:
        t = p.types[t_index]
        self.budget = budget
        self.shape = device_shape(t.offering)
        self.whole = min(self.shape[0], t.alloc.get(NVIDIA_GPU) // 1000)
        names = sorted({r for g in p.groups for r in g.request} | {NVIDIA_GPU})
        self.gpu = names.index(NVIDIA_GPU)
        self.alloc = [t.alloc.get(r) for r in names]
        self.requests = [[g.request.get(r) for r in names] for g in p.groups]
        self.shares = [g.share for g in p.groups]
        self.need = [0 if s is None else (need(s, self.shape) or FULL + 1) for s in self.shares]
        self.memo: dict[tuple[int, ...], _Devices | None] = {}
        self.packed: dict[tuple[int, ...], tuple[dict[int, int], ...] | None] = {}

    def devices(self, counts: tuple[int, ...]) -> _Devices | None:
        """The node's shares on its devices (group index and pods per device), None when ``counts`` break
        the node."""
        if counts in self.memo:
            return self.memo[counts]
        self.budget.spend()
        used = [0] * len(self.alloc)
        for n, req in zip(counts, self.requests, strict=True):
            if n:
                for r, v in enumerate(req):
                    used[r] += n * v
        on: _Devices | None = ()
        shared = tuple(n if s is not None else 0 for n, s in zip(counts, self.shares, strict=True))
        if any(shared):
            on = self._pack(shared)
        if on is not None:
            used[self.gpu] += 1000 * len(on)
            if any(u > a for u, a in zip(used, self.alloc, strict=True)):
                on = None
        self.memo[counts] = on
        return on

    def _pack(self, shared: tuple[int, ...]) -> _Devices | None:
        if any(n and self.need[g] > FULL for g, n in enumerate(shared)):
            return None  # a share no device of the node can take
        load: dict[object, int] = {}
        for g, n in enumerate(shared):
            share = self.shares[g]
            if n and share is not None:
                load[share.compute_mode] = load.get(share.compute_mode, 0) + n * self.need[g]
        if sum(-(-x // FULL) for x in load.values()) > self.whole:
            return None  # more hundredths than the devices hold, whatever the packing
        found = self._first_fit(shared) or self._fewest(shared)
        if found is None:
            return None
        return tuple(tuple(sorted((g, n) for g, n in device.items() if n)) for device in found)

    def _first_fit(self, shared: tuple[int, ...]) -> tuple[dict[int, int], ...] | None:
        """Biggest shares first, each on the first device of its mode with room: mostly enough."""
        devices: list[dict[int, int]] = []
        loads: list[int] = []
        modes: list[object] = []
        for g in sorted(range(len(shared)), key=lambda g: (-self.need[g], g)):
            share = self.shares[g]
            for _ in range(shared[g]):
                assert share is not None
                for d in range(len(devices)):
                    if modes[d] == share.compute_mode and loads[d] + self.need[g] <= FULL:
                        break
                else:
                    if len(devices) >= self.whole:
                        return None
                    devices.append({})
                    loads.append(0)
                    modes.append(share.compute_mode)
                    d = len(devices) - 1
                devices[d][g] = devices[d].get(g, 0) + 1
                loads[d] += self.need[g]
        return tuple(devices)

    def _fewest(self, shared: tuple[int, ...]) -> tuple[dict[int, int], ...] | None:
        """The shares on the fewest devices (at most the node's), the first share left on the first device
        with the most that fit beside it; None when they need more devices than the node has."""
        if shared in self.packed:
            return self.packed[shared]
        best: tuple[dict[int, int], ...] | None = None
        if not any(shared):
            best = ()
        else:
            first = next(g for g, n in enumerate(shared) if n)
            for device in self._fillings(shared, first):
                rest = self._fewest(tuple(n - device.get(g, 0) for g, n in enumerate(shared)))
                if (
                    rest is not None
                    and len(rest) < self.whole
                    and (best is None or len(rest) + 1 < len(best))
                ):
                    best = (device, *rest)
        self.packed[shared] = best
        return best

    def _fillings(self, shared: tuple[int, ...], first: int) -> list[dict[int, int]]:
        """The ways to fill one device holding a share of ``first`` with shares of its compute mode, each
        leaving no room for another share that is left."""
        share = self.shares[first]
        assert share is not None
        mode = share.compute_mode
        order = [
            g
            for g, n in enumerate(shared)
            if n and (s := self.shares[g]) is not None and s.compute_mode == mode
        ]
        out: list[dict[int, int]] = []
        device: dict[int, int] = {}

        def go(at: int, load: int) -> None:
            self.budget.spend()
            if at == len(order):
                if any(device.get(g, 0) < shared[g] and load + self.need[g] <= FULL for g in order):
                    return
                out.append(dict(device))
                return
            g = order[at]
            low = 1 if g == first else 0
            for n in range(min(shared[g], (FULL - load) // self.need[g]), low - 1, -1):
                device[g] = n
                go(at + 1, load + n * self.need[g])
            device.pop(g, None)

        go(0, 0)
        return out


class Patterns(Rows):
    """The program: nodes bought per pattern, each group's pods covered, within the limits and the cost
    bound."""

    def __init__(self, p: Problem, found: list[Pattern], cost_bound: float | None) -> None:
        super().__init__()
        self.p = p
        self.found = found
        covering: dict[int, list[tuple[int, int]]] = {g: [] for g in range(len(p.groups))}
        used = []
        for pattern in found:
            t = p.types[pattern.type]
            pods = sum(len(p.groups[g].pods) for g in t.groups)
            # No more nodes of a pattern than its fullest group needs, nor than the limits and bound allow.
            need = max(math.ceil(len(p.groups[g].pods) / n) for g, n in pattern.counts)
            v = self.var(t.price, min(need, most_nodes(p, t, pods, cost_bound)))
            for g, n in pattern.counts:
                covering[g].append((v, n))
            used.append((v, t, 1))
        for g, terms in covering.items():
            self.row(terms, len(p.groups[g].pods), math.inf)
        self.limits(p, used, cost_bound)

    def read(self, x: list[int]) -> Solution | None:
        """The nodes bought, each pattern's surplus pods given back (from the last nodes first)."""
        nodes: list[tuple[int, dict[int, int], list[dict[int, int]]]] = []
        for pattern, bought_of_it in zip(self.found, x, strict=True):  # one variable per pattern, in order
            for _ in range(bought_of_it):
                nodes.append((pattern.type, dict(pattern.counts), [dict(d) for d in pattern.devices]))
        surplus = [-len(g.pods) for g in self.p.groups]
        for _, counts, _ in nodes:
            for g, n in counts.items():
                surplus[g] += n
        for _, counts, devices in reversed(nodes):
            for g in list(counts):
                while surplus[g] > 0 and counts[g] > 0:
                    counts[g] -= 1
                    surplus[g] -= 1
                    _give_back(self.p, g, devices)
        bought = [
            Bought(
                t,
                tuple(sorted((g, n) for g, n in counts.items() if n)),
                tuple(tuple(sorted((g, n) for g, n in d.items() if n)) for d in devices if any(d.values())),
            )
            for t, counts, devices in nodes
            if any(counts.values())
        ]
        bought.sort(key=lambda b: b.type)
        return Solution(tuple(bought), round(sum(self.p.types[b.type].price for b in bought), 6))


def _give_back(p: Problem, g: int, devices: list[dict[int, int]]) -> None:
    """Take one pod of group ``g`` off a node's devices: one slot on each of as many devices as its share
    spans, from the devices holding most of it (so the rest still split into pods on distinct devices)."""
    share = p.groups[g].share
    if share is None:
        return
    holding = sorted((i for i, d in enumerate(devices) if d.get(g)), key=lambda i: (-devices[i][g], i))
    for i in holding[: share.devices]:
        devices[i][g] -= 1


def solve(
    p: Problem,
    *,
    cost_bound: float | None = None,
    time_limit: float | None = None,
    work_limit: float | None = None,
    max_patterns: int = MAX_PATTERNS,
    max_steps: int = MAX_STEPS,
) -> Outcome | None:
    """The cheapest plan of ``p`` at most ``cost_bound`` $/h by patterns (``optimal`` when proven so,
    ``feasible`` when the work budget ran out first); None when the batch has too many patterns."""
    if not p.groups:
        return Outcome("optimal", Solution((), 0.0))
    found = patterns(p, cost_bound=cost_bound, max_patterns=max_patterns, max_steps=max_steps)
    if found is None:
        return None
    if {g for f in found for g, _ in f.counts} != set(range(len(p.groups))):
        return Outcome("infeasible")  # a group no node within the bound and the limits takes
    return run(Patterns(p, found, cost_bound), time_limit, work_limit, linearized=True)
