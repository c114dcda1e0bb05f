"""Why a plan chose what it chose, as data: the candidates a new node was compared with, the filters that
ruled out cheaper offerings, the fallbacks' price cap, GPUs a node leaves idle, and one pod's whole story for
``tidal plan --explain``.

The planner records these (pure, like the plan itself); :mod:`autoscaler.cli.render` turns them into lines.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, TypeVar, cast

from autoscaler.config.values import Config
from autoscaler.core.fit import Constraints, gpu_model_name, offering_filters
from autoscaler.core.model import Pod
from autoscaler.core.offering import Offering
from autoscaler.core.placement.bins import Bin
from autoscaler.core.placement.gpus import device_model, device_slots
from autoscaler.core.placement.reasons import TOO_MANY_PODS, Filter, Rejection
from autoscaler.core.planning.offerings import OfferingIndex, price_order

if TYPE_CHECKING:
    from autoscaler.core.planning.decisions import Launch
    from autoscaler.core.planning.holds import Holds
    from autoscaler.core.planning.newnodes import Fallbacks
from autoscaler.core.planning.decisions import BIN_PACKING
from autoscaler.core.quantity import format_memory, format_quantity
from autoscaler.core.resources import GPU_RESOURCES, PODS, Resources
from autoscaler.core.spot_risk import InterruptionRisk, interruption_risk, node_hours, risk_price
from autoscaler.core.words import count

# Candidates shown around the chosen offering: this many cheaper ones, and this many dearer.
CHEAPER_SHOWN = 4
DEARER_SHOWN = 2
# A node is far bigger than its pods when at least this many of its GPUs, and at least half, stay idle.
IDLE_GPUS_WARNED = 2


@dataclass(frozen=True, slots=True)
class Compared:
    """One candidate (the cheapest offering of an instance type and capacity type) and its verdict."""

    offering: Offering
    verdict: str  # "chosen", "too small for its pods: Insufficient nvidia.com/gpu", "+$0.2788/h"
    chosen: bool = False
    holds: int = 0  # a pod's candidates only: pods like it one node of it holds

    @property
    def per_pod(self) -> float | None:
        """A pod's candidates only: the price per pod of a node of it holding all it can (None otherwise)."""
        return self.offering.price / self.holds if self.holds else None


T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RuledOut:
    """Offerings cheaper than the chosen one that one filter removed: how many, and the cheapest of them."""

    rejection: Rejection
    count: int
    cheapest: Offering


class Later(Generic[T]):
    """A value worked out on first use, then kept."""

    __slots__ = ("_make", "_value")

    def __init__(self, make: Callable[[], T]) -> None:
        self._make: Callable[[], T] | None = make
        self._value: T | None = None

    def __call__(self) -> T:
        make = self._make
        if make is not None:
            self._value, self._make = make(), None
        return cast("T", self._value)


def _nothing_compared() -> tuple[tuple[Compared, ...], int]:
    return (), 0


@dataclass(frozen=True, slots=True, eq=False)
class LaunchWhy:
    """Why a new node is the offering it is.

    What only a reader of the plan needs (the candidates compared, the cheaper offerings ruled out, why no
    smaller node) is worked out when first read (rendering a plan): a plan that is only acted on, or a
    rendering that shows a few kinds of launch, never pays for the rest. Two are equal when everything they
    say is (read for that)."""

    mode_reason: str  # why its pods got bin-selection or bin-packing
    # The candidates nearest the chosen one, and how many were cheaper than it, listed or not.
    comparing: Later[tuple[tuple[Compared, ...], int]] = field(
        default_factory=lambda: Later(_nothing_compared), repr=False
    )
    ruled: Later[tuple[RuledOut, ...]] = field(default_factory=lambda: Later(tuple), repr=False)
    # Fallbacks cost at most this (maxFallbackPriceRatio × the chosen price, or what a queue's budget leaves,
    # as ``capped_by`` says; None: no cap); ``left_out`` is the cheapest that would have held the pods above it.
    fallback_cap: float | None = None
    left_out: Offering | None = None
    capped_by: str = ""
    gpus_used: int = 0  # GPU devices its pods take (a device shared by GPU fractions counts as one)
    idle_gpus: int = 0  # set only when the node is far bigger than its pods: see IDLE_GPUS_WARNED
    # Then, why no smaller node was taken.
    smaller_why: Later[str] = field(default_factory=lambda: Later(str), repr=False)
    # Set on every node of an exact plan (exactPlanMaxPods): the $/h it saves over the heuristic's nodes for
    # the same pods, which it replaced.
    exact_saving: float = 0.0
    # A spot node's interruption rate and the expected cost of its interruptions to its pods (None when the
    # cloud publishes no rate for it, or it is not spot).
    interruption: InterruptionRisk | None = None

    @property
    def compared(self) -> tuple[Compared, ...]:
        """The candidates nearest the chosen one (each as its cheapest offering), with verdicts."""
        return self.comparing()[0]

    @property
    def cheaper_compared(self) -> int:
        """How many candidates were cheaper than the chosen one, listed or not."""
        return self.comparing()[1]

    @property
    def smaller(self) -> str:
        """For a node far bigger than its pods, why no smaller one was taken ("" otherwise)."""
        return self.smaller_why()

    @property
    def ruled_out(self) -> tuple[RuledOut, ...]:
        """The cheaper offerings, grouped by the filter that ruled them out, most first."""
        return self.ruled()

    def _said(self) -> tuple[object, ...]:
        return (
            self.mode_reason,
            self.compared,
            self.cheaper_compared,
            self.fallback_cap,
            self.left_out,
            self.capped_by,
            self.gpus_used,
            self.idle_gpus,
            self.smaller,
            self.exact_saving,
            self.interruption,
        )

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, LaunchWhy)
        return self is other or self._said() == other._said()

    def __hash__(self) -> int:
        return hash(self._said())


@dataclass(frozen=True, slots=True)
class FilterStep:
    """One filter on a pod's way to its offerings: how many it removed, the cheapest of them, what was left."""

    rejection: Rejection
    removed: int
    cheapest: Offering
    left: int


@dataclass(frozen=True, slots=True)
class PodStory:
    """Everything ``tidal plan --explain POD`` says about one pod."""

    pod: str
    requests: str
    queue: str
    outcome: str  # where it went, or why not, in one line
    mode: str = ""
    mode_reason: str = ""
    capacity_types: tuple[str, ...] = ()
    offerings: int = 0  # offerings it was screened from (every one in the catalog)
    steps: tuple[FilterStep, ...] = ()
    candidates: tuple[Compared, ...] = ()
    nearest: str = ""
    launch: Offering | None = None
    fallbacks: tuple[Offering, ...] = ()
    launch_why: LaunchWhy | None = None
    launch_pods: int = 0  # pods on the node it launches, itself included


def mode_reason(pod: Pod, c: Constraints, config: Config) -> str:
    """Why a pod gets bin-selection or bin-packing (Luna's split, see ``scaleup.pod_mode``), in words."""
    r = pod.requests
    cpu_limit = format_quantity(config.bin_select_pod_cpu_threshold)
    memory_limit = format_memory(config.bin_select_pod_memory_threshold)
    if c.gpu_resource or r.gpus:
        return "it requests GPUs"
    if c.constrained:
        return "it asks for specific nodes (node selector, affinity or instance annotations)"
    if r.cpu >= config.bin_select_pod_cpu_threshold:
        return f"cpu {format_quantity(r.cpu)} is at least binSelectPodCpuThreshold {cpu_limit}"
    if r.memory >= config.bin_select_pod_memory_threshold:
        return f"memory {format_memory(r.memory)} is at least binSelectPodMemoryThreshold {memory_limit}"
    return (
        f"cpu {format_quantity(r.cpu)} and memory {format_memory(r.memory)} are below binSelectPodCpuThreshold "
        f"{cpu_limit} and binSelectPodMemoryThreshold {memory_limit}, and it asks for no specific node"
    )


def too_small(short: Sequence[str]) -> str:
    """``"Insufficient nvidia.com/gpu, Too many pods"``, as the scheduler words a shortfall."""
    return ", ".join(TOO_MANY_PODS if r == PODS else f"Insufficient {r}" for r in short)


def idle_warning(offering: Offering, pods: Sequence[str], why: LaunchWhy) -> str:
    """One line about a node far bigger than its pods, for ``tidal plan`` and the daemon's events (a launch
    with no pods yet, a replacement say, is said to be for none)."""
    node = (
        f"{offering.instance_type} ({offering.capacity_type}) with {count(offering.gpu_count, 'GPU')} at "
        f"${offering.price:.4f}/h: {count(why.idle_gpus, 'GPU')} idle"
    )
    if not pods:
        line = f"a launch for no pods gets {node}"
    elif len(pods) == 1:
        line = f"{pods[0]} requests {count(why.gpus_used, 'GPU')} and gets {node}"
    else:
        line = f"{len(pods)} pods ({pods[0]}, ...) request {count(why.gpus_used, 'GPU')} and get {node}"
    return f"{line}; {why.smaller}" if why.smaller else line


_PACKING_SIZE = Rejection(
    Filter.CONFIGURATION,
    "smaller than a bin-packing node, or a GPU node (binPackingNodeCpu, binPackingNodeMemory, "
    "binPackingNodeMinPodCount, binPackingNodeTypeRegexp)",
    "binPackingNode",
)


def per_offering(r: Rejection) -> Rejection:
    """A pod filter's rejection as said of one offering it removes, not of the last one ("no nvidia.com/gpu"
    rather than "no offering has nvidia.com/gpu")."""
    m = r.message
    if r.filter == Filter.OFFERING:
        if r.key in GPU_RESOURCES:
            m = f"no {r.key}"
        elif r.key == "gpu-share":
            m = "its GPUs cannot hold this GPU share"
        elif r.key == "partial-gpu":
            m = "a partial GPU (tidal.dev/instance-partial-gpu allows those)"
        elif r.key == "family":
            m = m.replace("no offering in families ", "family not in ").replace(
                "every fitting family is excluded", "family excluded"
            )
        else:
            for old, new in (
                ("no offering with GPU model ", "GPU model not "),
                ("no instance type matches ", "instance type does not match "),
                ("no offering at or below ", "above the pod's instance-max-cost "),
            ):
                m = m.replace(old, new)
    elif r.filter == Filter.NODE_AFFINITY:
        m = m.replace(" matches no offering", " does not match its labels")
    elif r.filter == Filter.TAINT_TOLERATION:
        m = f"its taint {r.key} is not tolerated" if r.key else "its taints are not tolerated"
    return Rejection(r.filter, m, r.key)


def _checks(
    index: OfferingIndex, classes: Sequence[Constraints], packing: bool
) -> list[tuple[Rejection, Callable[[Offering], bool]]]:
    """Every filter pods of ``classes`` meet on the way to an offering, in the order they apply."""
    checks: list[tuple[Rejection, Callable[[Offering], bool]]] = [
        (f.rejection(), f.keep) for f in index.filters
    ]
    for c in dict.fromkeys(classes):
        checks += [(per_offering(r), keep) for r, keep in offering_filters(c, index.config, index.nodes)]
    if packing:
        checks.append((_PACKING_SIZE, index.packing_node))
    return checks


class _Screening:
    """Offerings screened for pods of some constraint classes, cheapest first, as far as anyone has asked:
    most launches are cheap, so most explanations never look past the cheapest few hundred offerings."""

    def __init__(self, index: OfferingIndex, classes: Sequence[Constraints], packing: bool) -> None:
        self.done: list[tuple[Offering, Rejection | None]] = []
        self._checks = _checks(index, classes, packing)
        self._rest = iter(index.every())

    def until(
        self, ceiling: tuple[float, str, str, str] | None
    ) -> Iterator[tuple[Offering, Rejection | None]]:
        """Screened offerings cheaper than ``ceiling`` (every one with None)."""
        for item in self.done:
            if ceiling is not None and price_order(item[0]) >= ceiling:
                return
            yield item
        for o in self._rest:
            item = (o, next((rejection for rejection, keep in self._checks if not keep(o)), None))
            self.done.append(item)
            if ceiling is not None and price_order(o) >= ceiling:
                return
            yield item


def screened(
    index: OfferingIndex,
    classes: Sequence[Constraints],
    packing: bool,
    ceiling: tuple[float, str, str, str] | None = None,
) -> Iterator[tuple[Offering, Rejection | None]]:
    """Every offering (cheaper than ``ceiling``, when given), cheapest first, with the first filter that
    keeps pods of ``classes`` off it: the configuration's, then each class's own, then the bin-packing node
    size; None when none does."""
    key = (tuple(classes), packing)
    memo = index.memo.screened  # the same classes come back every reconcile
    found = memo.get(key)
    if found is None:
        found = memo[key] = _Screening(index, classes, packing)
    return found.until(ceiling)


def _node_verdict(b: Bin, o: Offering, index: OfferingIndex) -> Rejection | None:
    """Why a new node holding ``b``'s pods cannot be ``o`` (an offering its pods' filters allow)."""
    short = b.used.shortfall(index.allocatable(o))
    if short:
        return Rejection(Filter.NODE_RESOURCES_FIT, f"too small for its pods: {too_small(short)}", short[0])
    if o.gpu_count > b.gpus:
        limit = index.config.cluster_gpu_limit
        return Rejection(
            Filter.CLUSTER_LIMIT,
            f"more GPUs than the {b.gpus} this node was counted for"
            + (f" against clusterGPULimit {limit}" if limit is not None else ""),
            "clusterGPULimit",
        )
    if index.config.cluster_cpu_limit is not None and o.vcpu > b.vcpu:
        return Rejection(
            Filter.CLUSTER_LIMIT,
            f"more cpu than the {b.vcpu} this node was counted for against clusterCPULimit",
            "clusterCPULimit",
        )
    if b.devices is not None and device_model(device_slots(o)) != device_model(b.devices):
        return Rejection(Filter.OFFERING, "other GPUs than its pods' GPU shares were packed for", "gpu-share")
    labels = index.labels(o)
    for k, v in sorted(b.settled.items()):
        if labels.get(k) != v:
            return Rejection(Filter.POD_TOPOLOGY_SPREAD, f"not in {k}={v}, chosen for its pods' topology", k)
    return None


def _keeps(b: Bin, o: Offering, index: OfferingIndex) -> bool:
    labels = index.labels(o)
    return all(labels.get(k) == v for k, v in b.settled.items())


def gpus_used(b: Bin, o: Offering) -> int:
    """Physical GPUs a new node of ``o`` gives its pods: whole GPUs requested, with the KAI reservation pod
    that holds each device GPU fractions share (so a shared device counts once); on a node whose GPUs are cut
    (MIG), replicated (time-slicing, MPS) or published for DRA, the fewest of its GPUs that hold the units its
    pods take (every GPU of a node is cut or replicated alike)."""
    if not o.gpu_count:
        return 0
    shown = {name for name, _ in o.layout.resources} if o.layout is not None else set(GPU_RESOURCES)
    used = 0
    for name, per_node in o.capacity().items():
        if name in shown:
            per_gpu = per_node / o.gpu_count
            used = max(used, math.ceil(b.used.get(name) / per_gpu - 1e-9))
    return min(used, o.gpu_count)


def launch_why(
    b: Bin,
    chosen: Offering,
    classes: Sequence[Constraints],
    index: OfferingIndex,
    reason: str,
    fallbacks: Fallbacks,
) -> LaunchWhy:
    """Why the new node ``b`` is ``chosen``: the candidates around it, the filters that ruled out the cheaper
    offerings, its fallbacks' cap, and the GPUs it leaves idle."""
    packing = b.mode == BIN_PACKING
    ceiling = price_order(chosen)
    settled = dict(b.settled)

    def ruled() -> tuple[RuledOut, ...]:
        tally: dict[Rejection, tuple[int, Offering]] = {}
        # Offerings of one instance type and capacity type (and zone, where topology settled it) share a verdict.
        verdicts: dict[tuple[object, ...], Rejection | None] = {}
        for o, verdict in screened(index, classes, packing, ceiling):
            if verdict is None:
                shape = (o.instance_type, o.capacity_type, o.layout, o.reservation, o.zone if settled else "")
                if shape not in verdicts:
                    verdicts[shape] = _node_verdict(b, o, index)
                verdict = verdicts[shape]
                if verdict is None:
                    continue  # as cheap, but later in the order of preference (another capacity type)
            count, cheapest = tally.get(verdict, (0, o))
            tally[verdict] = (count + 1, cheapest)
        return tuple(
            sorted(
                (RuledOut(r, n, o) for r, (n, o) in tally.items()),
                key=lambda r: (-r.count, price_order(r.cheapest)),
            )
        )

    used = gpus_used(b, chosen)
    idle = chosen.gpu_count - used
    oversized = idle >= IDLE_GPUS_WARNED and idle >= used
    return LaunchWhy(
        mode_reason=reason,
        comparing=Later(lambda: _compared(b, chosen, classes, index)),
        ruled=Later(ruled),
        fallback_cap=fallbacks.cap,
        left_out=fallbacks.left_out,
        capped_by=fallbacks.capped_by,
        gpus_used=used,
        idle_gpus=idle if oversized else 0,
        smaller_why=Later(lambda: _smaller(b, chosen, classes, index, used)) if oversized else Later(str),
        interruption=interruption_risk(
            chosen, node_hours(c.interruption_hours for c in classes), index.config.spot.rate_scale
        ),
    )


def _compared(
    b: Bin, chosen: Offering, classes: Sequence[Constraints], index: OfferingIndex
) -> tuple[tuple[Compared, ...], int]:
    """The candidates nearest the chosen one (each instance type and capacity type its pods may get, as its
    cheapest offering), with verdicts; and how many cheaper ones there were."""
    shapes = index.shared(classes, b.mode == BIN_PACKING)
    # One row per shape, cheapest first, up to DEARER_SHOWN after the chosen one (its last row, when a shape
    # of the same type and capacity type comes twice): which rows those are is known from the shapes alone,
    # so verdicts are worked out only for the rows shown.
    mine = (chosen.instance_type, chosen.capacity_type)
    at, end = -1, len(shapes)
    for i, (_, offerings) in enumerate(shapes):
        if (offerings[0].instance_type, offerings[0].capacity_type) == mine:
            at = i
        elif at >= 0 and i + 1 - at > DEARER_SHOWN:
            end = i + 1
            break
    if at < 0:
        return (), 0
    rows: list[Compared] = []
    hours = node_hours(c.interruption_hours for c in classes)
    expected = risk_price(chosen, hours)
    for _, offerings in shapes[max(0, at - CHEAPER_SHOWN) : end]:
        o = next((x for x in offerings if _keeps(b, x, index)), offerings[0]) if b.settled else offerings[0]
        if (o.instance_type, o.capacity_type) == mine:
            rows.append(Compared(chosen, "chosen", True))
            continue
        verdict = _node_verdict(b, o, index)
        if verdict is not None:
            rows.append(Compared(o, verdict.message))
        elif o.price > chosen.price:
            rows.append(Compared(o, f"+${o.price - chosen.price:.4f}/h"))
        elif risk_price(o, hours) > expected + 1e-12:
            rows.append(
                Compared(
                    o,
                    f"${chosen.price - o.price:.4f}/h cheaper, but its interruptions are expected to cost "
                    f"${risk_price(o, hours) - o.price:.4f}/h: +${risk_price(o, hours) - expected:.4f}/h in all",
                )
            )
        else:
            rows.append(Compared(o, "as cheap, later in the order of capacity types"))
    return tuple(rows), at


def _smaller(
    b: Bin, chosen: Offering, classes: Sequence[Constraints], index: OfferingIndex, used: int
) -> str:
    """Why a node with fewer GPUs of the same model does not hold these pods instead."""
    model = gpu_model_name(chosen.gpu_model)
    least = max(used, 1)

    def fewer(offerings: list[Offering]) -> list[Offering]:
        return [
            o
            for o in offerings
            if least <= o.gpu_count < chosen.gpu_count and gpu_model_name(o.gpu_model) == model
        ]

    # Every offering, usable or not, in price order (as index.every() has them), but only those with fewer
    # GPUs of the model: the filters run on these few, not on the whole catalog.
    smaller = list(heapq.merge(fewer(index.offerings), fewer(index.excluded), key=price_order))
    if not smaller:
        return f"no offering with fewer {model} GPUs is in the catalog"
    checks = _checks(index, classes, b.mode == BIN_PACKING)

    def first_no(o: Offering) -> Rejection | None:
        return next((rejection for rejection, keep in checks if not keep(o)), None)

    # The cheapest one the pods' own filters allow says the most (it is too small, say); else the cheapest.
    o = next((o for o in smaller if first_no(o) is None), smaller[0])
    verdict = first_no(o)
    if verdict is None:
        verdict = _node_verdict(b, o, index)
    where = f"{o.instance_type} ({o.capacity_type}, {count(o.gpu_count, 'GPU')}, ${o.price:.4f}/h)"
    if verdict is None:
        return f"the cheapest with fewer {model} GPUs, {where}, costs more"
    return f"the cheapest with fewer {model} GPUs its pods may get, {where}, is ruled out: {verdict.message}"


def pod_steps(
    c: Constraints, index: OfferingIndex, packing: bool, req: Resources
) -> tuple[tuple[FilterStep, ...], list[Offering]]:
    """A pod's way through the filters over every offering: each step that removed some, and what is left."""
    remaining = index.every()
    steps: list[FilterStep] = []
    for rejection, keep in _checks(index, (c,), packing):
        kept = [o for o in remaining if keep(o)]
        if len(kept) < len(remaining):
            removed = [o for o in remaining if not keep(o)]
            steps.append(FilterStep(rejection, len(removed), removed[0], len(kept)))
        remaining = kept
    fitting = [o for o in remaining if req.fits_in(index.allocatable(o))]
    if len(fitting) < len(remaining):
        removed = [o for o in remaining if not req.fits_in(index.allocatable(o))]
        short = req.shortfall(index.allocatable(removed[0]))
        rejection = Rejection(Filter.NODE_RESOURCES_FIT, f"too small: {too_small(short)}", short[0])
        steps.append(FilterStep(rejection, len(removed), removed[0], len(fitting)))
    return tuple(steps), fitting


def pod_candidates(
    fitting: Sequence[Offering],
    holding: Callable[[Offering], Holds],
    launched: Launch | None,
    shown: int = 6,
) -> tuple[Compared, ...]:
    """The cheapest instance types (per capacity type) that hold the pod, each with how many pods like it one
    node holds (``holding`` counts them as the plan does: GPU shares, MIG instances, time-slice replicas, DRA
    devices and inter-pod rules included) and its price per pod when full; the chosen one also with the price
    per pod of the node the plan launches."""
    out: list[Compared] = []
    seen: set[tuple[str, str]] = set()
    mine = (
        (launched.offering.instance_type, launched.offering.capacity_type) if launched is not None else None
    )
    for o in fitting:
        key = (o.instance_type, o.capacity_type)
        if key in seen or (len(out) >= shown and key != mine):
            continue
        seen.add(key)
        h = holding(o)
        if h.count <= 0:
            continue
        stop = f" (one more: {h.stop})" if h.stop else ""
        if h.count > 1:
            verdict = f"holds {h.count} like it{stop}, ${o.price / h.count:.4f}/h each when full"
        else:
            verdict = f"holds it alone{stop}"
        if key == mine and launched is not None:
            n = len(launched.pods)
            planned = f"launched for {count(n, 'pod')}, ${launched.offering.price / n:.4f}/h each"
            out.append(Compared(launched.offering, f"chosen; {planned}; {verdict}", True, h.count))
        else:
            out.append(Compared(o, verdict, holds=h.count))
        if len(out) >= shown and (mine is None or mine in seen):
            break
    return tuple(out)
