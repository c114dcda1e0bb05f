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
(:mod:`autoscaler.core.planning.exact_step`). This module states the problem and checks a plan of it in whole
numbers; :mod:`autoscaler.core.planning.exact_model` writes it as a mixed-integer program and
:mod:`autoscaler.core.planning.exact_solve` solves it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from autoscaler.core.fit import Constraints
from autoscaler.core.gpu.share import ComputeMode, GpuShare
from autoscaler.core.model import Pod
from autoscaler.core.offering import Offering
from autoscaler.core.placement.fits import request
from autoscaler.core.planning.decisions import BIN_PACKING
from autoscaler.core.planning.offerings import OfferingIndex, price_order
from autoscaler.core.resources import NVIDIA_GPU, Resources
from autoscaler.core.spot_risk import node_hours, risk_price

__all__ = [
    "Bought",
    "Limits",
    "NodeType",
    "PodGroup",
    "Problem",
    "Solution",
    "device_shape",
    "need",
    "pack",
    "problem",
    "verify",
]

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
    # Hours of its price a spot interruption costs the pods that may go on it (the most any group loses).
    risk_hours: float = 0.0

    @property
    def offering(self) -> Offering:
        return self.offerings[0]

    @property
    def price(self) -> float:
        """What the model pays for a node of it: its price, with spot interruptions' expected cost."""
        return risk_price(self.offerings[0], self.risk_hours)


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
    # Which groups may go on each offering, by mode (from the offerings each group may get).
    fits_of: dict[tuple[Offering, str], set[int]] = {}
    for i, g in enumerate(groups):
        for offerings in index.allowed(g.c, g.mode == BIN_PACKING).values():
            for o in offerings:
                fits_of.setdefault((o, g.mode), set()).add(i)
    modes = sorted({g.mode for g in groups})
    # Offerings that are the same to the model become one node type (its cheapest offering first).
    alike: dict[tuple[object, ...], tuple[Resources, str, frozenset[int], list[Offering]]] = {}
    for o in index.offerings:
        if o.reservation is not None:
            continue
        for mode in modes:
            found = fits_of.get((o, mode))
            if not found:
                continue
            fits = frozenset(found)
            alloc = index.allocatable(o)
            same = (alloc, o.price, o.interruption_rate, device_shape(o), o.gpu_count, o.vcpu, mode, fits)
            alike.setdefault(same, (alloc, mode, fits, []))[3].append(o)
    types = [
        NodeType(
            tuple(sorted(offerings, key=price_order)),
            alloc,
            mode,
            fits,
            node_hours(groups[i].c.interruption_hours for i in fits),
        )
        for alloc, mode, fits, offerings in alike.values()
    ]
    types = _undominated(types, limits)
    types.sort(key=lambda t: price_order(t.offering))
    return Problem(tuple(groups), tuple(types), limits)


def device_shape(o: Offering) -> tuple[int, int, float]:
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
    """Drop a type when another of its mode is no dearer, holds at least as much of everything on the same
    GPU devices, takes every pod group it takes and counts no more against the limits (the first in price
    order wins a tie)."""
    names = sorted({r for t in types for r in t.alloc})
    kept: list[tuple[NodeType, tuple[int, ...], tuple[int, int, float]]] = []
    for t in sorted(types, key=lambda t: price_order(t.offering)):
        mine = (t, tuple(t.alloc.get(n) for n in names), device_shape(t.offering))
        if not any(_dominates(k, mine, limits) for k in kept):
            kept.append(mine)
    return [k[0] for k in kept]


def _dominates(
    a: tuple[NodeType, tuple[int, ...], tuple[int, int, float]],
    b: tuple[NodeType, tuple[int, ...], tuple[int, int, float]],
    limits: Limits,
) -> bool:
    ta, tb = a[0], b[0]
    if ta.mode != tb.mode or ta.price > tb.price or a[2] != b[2] or not tb.groups <= ta.groups:
        return False  # shares pack per device: another device size is not simply more room
    oa, ob = ta.offering, tb.offering
    if limits.gpus is not None and oa.gpu_count > ob.gpu_count:
        return False
    if limits.cpu_milli is not None and oa.vcpu > ob.vcpu:
        return False
    return all(x >= y for x, y in zip(a[1], b[1], strict=True))


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
    devices = device_shape(t.offering)
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


def pack(
    shares: Sequence[tuple[int, GpuShare, int]], devices: tuple[int, int, float]
) -> tuple[tuple[tuple[int, int], ...], ...] | None:
    """The GPU devices of one node holding ``shares`` (group index, share, pods), each device as (group,
    pods) pairs; None when they do not fit on ``devices``. Exhaustive over assignments (a node has a few
    devices and its pods are few), biggest shares first, an empty device tried once."""
    items: list[tuple[int, ComputeMode, int, int]] = []  # need, mode, spread, group
    for g, share, n in shares:
        k = need(share, devices)
        if k is None or share.devices > devices[0]:
            return None
        items.extend([(k, share.compute_mode, share.devices, g)] * n)
    items.sort(key=lambda i: (-i[0] * i[2], i[3]))
    loads: list[list[int]] = []  # per device: hundredths used, then one count per item placed
    modes: list[ComputeMode] = []
    placed: list[list[int]] = []  # per device: the items' groups
    budget = [_PACK_STEPS]

    def place(i: int) -> bool:
        if i == len(items):
            return True
        budget[0] -= 1
        if budget[0] < 0:
            return False
        k, mode, spread, g = items[i]
        return _spread(i, k, mode, spread, g, 0, set())

    def _spread(i: int, k: int, mode: ComputeMode, left: int, g: int, start: int, used: set[int]) -> bool:
        if left == 0:
            return place(i + 1)
        tried_empty = False
        for d in range(start, len(loads) + 1):
            if d == len(loads):
                if len(loads) >= devices[0] or tried_empty:
                    return False
                loads.append([k])
                modes.append(mode)
                placed.append([g])
                if _spread(i, k, mode, left - 1, g, d + 1, used | {d}):
                    return True
                loads.pop()
                modes.pop()
                placed.pop()
                return False
            if d in used or modes[d] != mode or loads[d][0] + k > FULL:
                continue
            loads[d][0] += k
            placed[d].append(g)
            if _spread(i, k, mode, left - 1, g, d + 1, used | {d}):
                return True
            loads[d][0] -= k
            placed[d].pop()
        return False

    if not place(0):
        return None
    return tuple(tuple(sorted((g, device.count(g)) for g in set(device))) for device in placed)


_PACK_STEPS = 20_000  # assignments tried before a node's shares count as not fitting
