"""Scale-up: the cheapest set of node launches that places the counted demand, within every limit.

The pipeline, one small step each (pure; same input, same plan):

1. group identical pods into classes (same constraints and requests; pods whose place depends on other pods
   also by their labels and topology terms), gangs kept whole;
2. for each class, in priority/size order, the placement engine fits it onto nodes that exist, then nodes
   launching;
3. then onto room left in nodes this plan opened, whatever pods they were opened for, when one of the
   instance types they may still become suits this class too;
4. then opens new nodes (:mod:`autoscaler.core.planning.newnodes`: bin-selection and bin-packing);
5. enforces ``clusterGPULimit`` / ``clusterCPULimit`` / ``maxNodes`` as nodes are opened; a gang that does
   not fit entirely is taken back;
6. when the new nodes hold few enough pods, the exact cheapest nodes for those pods replace them if strictly
   cheaper (:mod:`autoscaler.core.planning.exact_step`);
7. finally each new node takes the cheapest instance type it may still be, with fallbacks
   (:mod:`autoscaler.core.planning.launches`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter

from autoscaler.core.demand import Claim, Demand, Gang, Ignored, Reason
from autoscaler.core.fit import Constraints
from autoscaler.core.gpu.share import GpuShare
from autoscaler.core.model import Pod
from autoscaler.core.offering import Offering
from autoscaler.core.placement.bins import Bin, Kind, Option
from autoscaler.core.placement.engine import Engine
from autoscaler.core.placement.filters import has_room
from autoscaler.core.placement.fits import Fit, request
from autoscaler.core.placement.gpus import GpuSlots
from autoscaler.core.placement.reasons import LASTING, LASTING_MESSAGES, Filter, Rejection
from autoscaler.core.planning import exact_step, newnodes, reserved
from autoscaler.core.planning.classes import PodClass, choices, order, pod_classes, pod_mode
from autoscaler.core.planning.decisions import (
    BIN_PACKING,
    BIN_SELECTION,
    NO_SPEND,
    NO_USAGE,
    LaunchPlan,
    QueueSpend,
    Unplaced,
    Usage,
)
from autoscaler.core.planning.launches import launches
from autoscaler.core.planning.newnodes import Budget, Choice, describe
from autoscaler.core.planning.offerings import OfferingIndex
from autoscaler.core.planning.why import mode_reason
from autoscaler.core.resources import NVIDIA_GPU, Resources
from autoscaler.core.words import count

__all__ = ["describe", "pod_mode", "scale_up"]


@dataclass(slots=True)
class _Opening:
    """What every node opened as ``choice`` for ``take`` pods of ``unit`` shares: the options it may be, and
    (once worked out) the fit of the pods on it and whether it has room after them, kept in _Planner._fresh
    under ``key``."""

    choice: Choice
    unit: PodClass
    take: int
    options: list[Option]
    key: tuple[object, ...]
    known: tuple[Fit | Rejection, bool] | None = None
    used: Resources | None = None  # what the pods of a known fit take of the node


class _Planner:
    def __init__(
        self,
        index: OfferingIndex,
        engine: Engine,
        usage: Usage,
        now: float | None,
        spend: QueueSpend = NO_SPEND,
    ) -> None:
        cfg = index.config
        spent = {q: spend.by_queue.get(q, 0.0) for q in cfg.queue_budgets}
        # Nodes no pod runs on yet: the first queue with a budget whose pods go there pays for the node.
        self.unclaimed = dict(spend.unclaimed) if cfg.queue_budgets else {}
        self.index = index
        self.engine = engine
        self.journal = engine.journal
        self.budget = Budget(
            gpus=None if cfg.cluster_gpu_limit is None else max(0, cfg.cluster_gpu_limit - usage.gpus),
            cpu_milli=None
            if cfg.cluster_cpu_limit is None
            else max(0, cfg.cluster_cpu_limit - usage.cpu_milli),
            nodes=None if cfg.max_nodes is None else max(0, cfg.max_nodes - usage.managed_nodes),
            queues={q: limit - spent[q] for q, limit in cfg.queue_budgets.items()},
            spent=spent,
            reserved=reserved.ReservedRoom.of(index.offerings, cfg, now),
        )
        # The nodes that exist by name, then those launching by name.
        self.cluster: list[Bin] = _by_kind_and_name(engine.bins)
        # Those that had a whole GPU free when put in the engine, in the same order: the only ones a pod
        # asking for GPUs is tried on. A plan only takes room from them (a trial undone gives back just what
        # it took), so no node left out gains a GPU later in the plan; and most nodes of a GPU cluster are
        # full.
        self.gpu_room = _by_kind_and_name(engine.with_free_gpus())
        self.open: dict[str, list[Bin]] = {BIN_PACKING: [], BIN_SELECTION: []}
        self.absorbed: list[Ignored] = []
        self.unplaced: list[Unplaced] = []
        self.modes: dict[str, str] = {}
        self.mode_reasons: dict[str, str] = {}
        self.bin_queues: dict[str, str] = {}  # new nodes opened for pods of a queue with a budget
        self._alone: dict[tuple[object, ...], float] = {}
        self._options: dict[tuple[object, ...], list[Option]] = {}
        # The fit of a class's pods on a node just opened for them, and whether that node has room left after
        # it, when the fit reads only the node's options (Engine.independent): the same for every such node.
        self._fresh: dict[tuple[object, ...], tuple[Fit | Rejection, bool]] = {}
        # Per constraint set of a node opened by this plan (by identity, the set kept alongside): the fewest
        # offerings any of its classes may choose from (_may_join).
        self._floors: dict[int, tuple[frozenset[Constraints], int]] = {}
        # New nodes pods were added to since their list was last pruned of nodes with no room (_prune).
        self._dirty: set[str] = set()
        # Whether a node's devices take one more pod of a share, by identity of both (_takes).
        self._share_room: dict[tuple[int, int], tuple[GpuSlots, GpuShare, bool]] = {}
        self._opening: _Opening | None = None  # the last one: nodes are opened in batches of one shape

    # -- steps 2 and 3 ---------------------------------------------------------------------------------

    def _onto(
        self, bins: Sequence[Bin], pods: list[Pod], unit: PodClass, skip: set[str] | None = None
    ) -> list[Pod]:
        """Put as many of ``pods`` as fit onto ``bins``, in order; return the rest."""
        remaining = pods
        pod = pods[0]
        share = pod.gpu_share
        allowed = None
        blocked: Callable[[Bin], Rejection | None] | None = None
        mine = -1
        fit: Fit | Rejection | None
        # Without a skip list to keep, a node whose free room the pod does not fit is passed over unasked:
        # the engine would reject the pod there (by that or an earlier filter), and most nodes are full.
        need = self.engine.need(pod) if skip is None else None
        if need is not None and bins is self.cluster and need.get(NVIDIA_GPU, 0) > 0:
            bins = self.gpu_room
        for b in bins:
            if not remaining:
                break
            if skip is not None and b.name in skip:
                continue
            if need is not None and not b.new and not has_room(need, b.free):
                continue
            if b.new:
                if b.mode != unit.mode:
                    continue
                if share is not None and b.devices is not None and not self._takes(b.devices, share):
                    # The engine would say no (every "no" it could give here is lasting): the devices
                    # already shared on the node, which its options all have, have no room for one more.
                    if skip is not None:
                        skip.add(b.name)
                    continue
                if mine < 0:
                    mine = choices(self.index, unit.c)
                if not self._may_join(b, unit.c, mine):
                    continue
                if allowed is None:
                    allowed = self.index.allowed(unit.c, unit.mode == BIN_PACKING)
                    if pod.topological:
                        blocked = self.engine.blocker(pod, unit.c, allowed)
                fit = blocked(b) if blocked is not None else None
                if fit is None:
                    fit = self.engine.can_add(pod, unit.c, b, len(remaining), allowed)
            else:
                fit = self.engine.can_add(pod, unit.c, b, len(remaining), allowed)
            if isinstance(fit, Rejection):
                if skip is not None and (fit.filter in LASTING or fit.message in LASTING_MESSAGES):
                    skip.add(b.name)
                continue
            if b.new and not self._worth_joining(b, fit, unit, len(remaining)):
                continue
            self._add(b, fit, remaining[: fit.count], unit)
            if b.new:
                self._dirty.add(b.name)
            remaining = remaining[fit.count :]
        return remaining

    def _may_join(self, b: Bin, c: Constraints, mine: int) -> bool:
        """Pods join a node opened for other pods only when they have no more offerings to choose from than
        those: a pod any GPU suits must not take the free H100 on a node that H100-only pods will need.
        ``mine`` is how many ``c`` has."""
        classes = b.classes
        found = self._floors.get(id(classes))
        if found is None or found[0] is not classes:
            floor = min((choices(self.index, other) for other in classes), default=_NO_FLOOR)
            found = self._floors[id(classes)] = (classes, floor)
        return mine <= found[1] or c in classes

    def _takes(self, devices: GpuSlots, share: GpuShare) -> bool:
        """Whether one pod of ``share`` fits on ``devices``: asked of every node with shares for every class
        with one, while a node's devices change only when pods join it."""
        key = (id(devices), id(share))
        found = self._share_room.get(key)
        if found is None or found[0] is not devices or found[1] is not share:
            found = self._share_room[key] = (devices, share, devices.take(share) is not None)
        return found[2]

    def _prune(self, bins: list[Bin]) -> None:
        """Drop from ``bins`` the nodes left with no room. Only nodes pods were added to since they last
        passed can have lost it: every node enters a list with room (_open_one) and changes only by adding
        pods (_onto marks it), so the others are kept unlooked-at, in order."""
        dirty = self._dirty
        if not dirty:
            return
        kept = []
        for b in bins:
            if b.name in dirty:
                dirty.discard(b.name)
                if not newnodes.has_room(b):
                    continue
            kept.append(b)
        bins[:] = kept

    def _worth_joining(self, b: Bin, fit: Fit, unit: PodClass, remaining: int) -> bool:
        """Joining a node this plan opened is free unless it makes the node dearer (its cheaper options, or a
        spot one, could not hold these pods too); then only when that costs less than new nodes would."""
        raised = min(o.cheapest.price for o in fit.options) - b.price
        if raised <= 1e-9:
            return True
        key = (unit.c, unit.mode, unit.pods[0].requests, remaining)
        alone = self._alone.get(key)
        if alone is None:
            choice = newnodes.choose(
                self.index, unit.c, request(unit.pods[0]), unit.mode, remaining, self.budget, unit.queue
            )
            alone = (
                float("inf")
                if isinstance(choice, Rejection)
                else choice.shape.cheapest.price / min(choice.per_node, remaining)
            )
            self._alone[key] = alone
        return raised <= alone * fit.count

    def _add(self, b: Bin, fit: Fit, pods: list[Pod], unit: PodClass) -> None:
        self.engine.add(pods[0], unit.c, b, fit, [p.key for p in pods])
        if unit.queue and b.name in self.unclaimed:
            self._claim(b.name, unit.queue)
        if not b.new:
            where = "launching node" if b.kind == Kind.LAUNCHING else "node"
            self.absorbed.extend(
                Ignored(p.key, Reason.FITS_EXISTING, f"fits free capacity on {where} {b.name}", b.name)
                for p in pods
            )

    def _claim(self, node: str, queue: str) -> None:
        price = self.unclaimed.pop(node)
        self.budget.queues[queue] -= price
        budget, unclaimed = self.budget, self.unclaimed

        def undo() -> None:
            budget.queues[queue] += price
            unclaimed[node] = price

        self.journal.log(undo)

    # -- step 4: new nodes -----------------------------------------------------------------------------

    def _open(self, pods: list[Pod], unit: PodClass, gang: str, bins: list[Bin]) -> list[Pod]:
        """Open new nodes for ``pods``; return those left unplaced (already recorded as such)."""
        pod = pods[0]
        req = request(pod)
        remaining = pods
        while remaining:
            want = 1 if pod.topological else len(remaining)
            choice = newnodes.choose(self.index, unit.c, req, unit.mode, want, self.budget, unit.queue)
            if isinstance(choice, Rejection):
                wider = reserved.meanwhile(unit.c, choice, self.index.config)
                if wider is not None:  # on-demand until the Capacity Block they wait for starts
                    unit = PodClass(unit.pods, wider, unit.mode, unit.queue)
                    continue
                self._unplace(remaining, choice, unit, choice.filter not in newnodes.HELD_BACK)
                return []
            n = self._batch(choice, len(remaining), pod, unit.queue)
            # The pods from ``start`` on are left (one slice per batch, not one per node).
            start = opened = 0
            while opened < n and start < len(remaining):
                placed = self._open_one(choice, remaining, start, unit, gang, bins)
                if isinstance(placed, Rejection):
                    self._unplace(remaining[start:], placed, unit)
                    return []
                start += placed
                opened += 1
                if opened < n:
                    more, took = self._open_alike(choice, remaining, start, unit, gang, bins, n - opened)
                    opened += more
                    start += took
            remaining = remaining[start:]
        return remaining

    def _open_alike(
        self,
        choice: Choice,
        pods: list[Pod],
        start: int,
        unit: PodClass,
        gang: str,
        bins: list[Bin],
        limit: int,
    ) -> tuple[int, int]:
        """Open at most ``limit`` more nodes like the last one (_open_one's first way, for a batch at once):
        each as full as it, while the pods from ``start`` on fill such nodes and are alike (_alike). Returns
        how many nodes were opened and how many pods they took."""
        opening = self._opening
        if opening is None or opening.choice is not choice or opening.unit is not unit:
            return 0, 0
        known, used = opening.known, opening.used
        if known is None or used is None:
            return 0, 0
        fit, room = known
        if not isinstance(fit, Fit):
            return 0, 0
        per = fit.count
        groups: list[list[str]] = []
        at = start
        while len(groups) < limit:
            left = len(pods) - at
            # (Opening these nodes changes nothing _alike reads: their pods bring no term and keep no count.)
            if not left or min(choice.per_node, left) != opening.take or not self._alike(pods[at]):
                break
            groups.append([p.key for p in pods[at : at + per]])
            at += per
        if not groups:
            return 0, 0
        o = choice.shape.cheapest
        opened = self.engine.open_filled_alike(
            pods[start],
            unit.c,
            fit,
            groups,
            mode=unit.mode,
            gang=gang,
            gpus=o.gpu_count,
            vcpu=o.vcpu,
            used=used,
        )
        for b in opened:
            if unit.queue and b.name in self.unclaimed:
                self._claim(b.name, unit.queue)
            self._opened(b, o, unit, room, bins)
        return len(opened), at - start

    def _batch(self, choice: Choice, remaining: int, pod: Pod, queue: str) -> int:
        """How many nodes of the chosen shape to open at once."""
        if pod.topological:
            return 1
        k = choice.per_node
        if k > remaining:
            return 1
        return max(1, min(remaining // k, self.budget.count(choice.shape.cheapest, queue)))

    def _open_one(
        self, choice: Choice, pods: list[Pod], start: int, unit: PodClass, gang: str, bins: list[Bin]
    ) -> int | Rejection:
        """Open one node of ``choice`` for the pods from ``start`` on; how many it takes, or why none."""
        pod = pods[start]
        take = min(choice.per_node, len(pods) - start)
        o = choice.shape.cheapest
        opening = self._opening
        if (
            opening is None
            or opening.choice is not choice
            or opening.unit is not unit
            or opening.take != take
        ):
            opening = self._opening = self._opening_for(choice, unit, take)
        known = opening.known
        if known is not None and isinstance(known[0], Fit) and self._alike(pod):
            # As the steps below would leave it, with nothing to take back if it does not fit: it does.
            same = known[0]
            if opening.used is None:
                opening.used = self.engine.filled_use(pod, same)
            b = self.engine.open_filled(
                pod,
                unit.c,
                same,
                [p.key for p in pods[start : start + same.count]],
                mode=unit.mode,
                gang=gang,
                gpus=o.gpu_count,
                vcpu=o.vcpu,
                used=opening.used,
            )
            if unit.queue and b.name in self.unclaimed:
                self._claim(b.name, unit.queue)
            self._opened(b, o, unit, known[1], bins)
            return same.count
        mark = self.journal.mark()
        b = self.engine.open(opening.options, mode=unit.mode, gang=gang, gpus=o.gpu_count, vcpu=o.vcpu)
        independent = self.engine.independent(pod)
        known = opening.known if independent else None
        if known is None and independent:
            known = opening.known = self._fresh.get(opening.key)
        if known is not None:
            fit, room = known
        else:
            allowed = self.index.allowed(unit.c, unit.mode == BIN_PACKING)
            fit, room = self.engine.can_add(pod, unit.c, b, take, allowed), False
        if isinstance(fit, Rejection):
            if independent:
                opening.known = self._fresh[opening.key] = (fit, False)
            self.journal.rollback(mark)
            return fit
        self._add(b, fit, pods[start : start + fit.count], unit)
        if known is None:
            room = newnodes.has_room(b)
            if independent:
                opening.known = self._fresh[opening.key] = (fit, room)
        self._opened(b, o, unit, room, bins)
        self.journal.commit(mark)
        return fit.count

    def _alike(self, pod: Pod) -> bool:
        """A node for ``pod`` is like the last one opened for its class: no count is kept and the fit reads
        nothing but the node's options (Engine.independent)."""
        return self.engine.topology.idle and self.engine.independent(pod)

    def _opened(self, b: Bin, o: Offering, unit: PodClass, room: bool, bins: list[Bin]) -> None:
        self.budget.take(o, queue=unit.queue)
        if unit.queue:
            self.bin_queues[b.name] = unit.queue
        budget = self.budget
        self.journal.log(lambda: budget.take(o, -1, unit.queue))
        if room:
            bins.append(b)

    def _opening_for(self, choice: Choice, unit: PodClass, take: int) -> _Opening:
        pod = unit.pods[0]
        o = choice.shape.cheapest
        used = request(pod).scaled(take)
        key = (unit.c, unit.mode, o, used, take)
        options = self._options.get(key)
        if options is None:
            options = newnodes.options_for(
                self.index,
                unit.c,
                unit.mode,
                o,
                used,
                self.index.config.cluster_cpu_limit is not None,
                take if pod.gpu_share is not None else 0,
            )
            options = self._options[key] = reserved.same_capacity(options, o)
        return _Opening(choice, unit, take, options, (*key, pod.requests, pod.gpu_share))

    def _unplace(self, pods: list[Pod], why: Rejection, unit: PodClass, no_offering: bool = False) -> None:
        limited = why.filter == Filter.CLUSTER_LIMIT
        near = newnodes.nearest_miss(self.index, unit.c, request(pods[0]), unit.mode, why)
        self.unplaced.extend(
            Unplaced(p.key, why.message, limited, why, near, no_offering=no_offering) for p in pods
        )

    # -- units -----------------------------------------------------------------------------------------

    def place_class(
        self, unit: PodClass, gang: str = "", bins: list[Bin] | None = None, *, existing: bool = False
    ) -> None:
        """Place every pod of a class: existing nodes, launching ones, this plan's, then new ones (only the
        first two when ``existing``)."""
        reason = mode_reason(unit.pods[0], unit.c, self.index.config)
        for p in unit.pods:
            self.modes[p.key] = unit.mode
            self.mode_reasons[p.key] = reason
        if existing:
            rest = unit.pods
            if unit.pods[0].topological:
                passed: set[str] = set()
                rest = [p for p in unit.pods if self._onto(self.cluster, [p], unit, passed)]
            else:
                rest = self._onto(self.cluster, unit.pods, unit)
            self.unplaced.extend(Unplaced(p.key, NO_FREE_ROOM) for p in rest)
            return
        open_bins = bins if bins is not None else self.open[unit.mode]
        if unit.pods[0].topological:
            skip: set[str] = set()
            for pod in unit.pods:
                rest = self._onto(self.cluster, [pod], unit, skip)
                rest = rest and self._onto(open_bins, rest, unit, skip)
                if rest:
                    self._open(rest, unit, gang, open_bins)
            return
        remaining = self._onto(self.cluster, unit.pods, unit)
        if remaining:
            remaining = self._onto(open_bins, remaining, unit)
            self._prune(open_bins)
        if remaining:
            self._open(remaining, unit, gang, open_bins)

    def place_own(self, pods: Sequence[Pod], demand: Demand, launched_for: Mapping[str, str]) -> set[str]:
        """Put each pod a node coming up was launched for back on that node, before any other pod is placed:
        otherwise an identical pod that sorts first (created in the same second) takes its room, and the
        pod's new launch, under the token of its first, is the cloud's duplicate of that first. Returns the
        keys placed."""
        bins = {b.name: b for b in self.cluster}
        own = [p for p in pods if launched_for.get(p.key) in bins]
        placed: set[str] = set()
        if not own:
            return placed
        for unit in pod_classes(own, demand.constraints, self.index, self.engine, demand.queues):
            reason = mode_reason(unit.pods[0], unit.c, self.index.config)
            for run in _runs(unit.pods, launched_for):
                rest = self._onto([bins[launched_for[run[0].key]]], run, unit)
                for pod in run[: len(run) - len(rest)]:
                    self.modes[pod.key] = unit.mode
                    self.mode_reasons[pod.key] = reason
                    placed.add(pod.key)
        return placed

    def place_gang(self, gang: Gang, demand: Demand) -> None:
        """All of a gang's pods get room, or none: what was placed for a gang that fails is taken back."""
        mark = self.journal.mark()
        counts = (len(self.absorbed), len(self.unplaced))
        local: list[Bin] = []
        existing = gang.claim != Claim.NEW
        for unit in pod_classes(list(gang.pods), demand.constraints, self.index, self.engine, demand.queues):
            self.place_class(unit, gang.key, local, existing=existing)
        failed = self.unplaced[counts[1] :]
        if not failed:
            self.journal.commit(mark)
            for b in local:
                self.open[b.mode].append(b)
            return
        self.journal.rollback(mark)
        del self.absorbed[counts[0] :]
        del self.unplaced[counts[1] :]
        why = failed[0]
        detail = f"gang {gang.key} ({count(len(gang.pods), 'pod')}) cannot be placed whole: {why.reason}"
        limited = any(u.limited for u in failed)
        self.unplaced.extend(
            Unplaced(p.key, detail, limited, why.rejection, gang=gang.key) for p in gang.pods
        )


def _runs(pods: Sequence[Pod], launched_for: Mapping[str, str]) -> list[list[Pod]]:
    """``pods`` (of one class) cut into runs that go to one node together: one after the other, launched for
    the same node, each counted alike by the inter-pod filters (same namespace and labels), none whose place
    depends on other pods nor sharing a GPU. The node takes the first pods of a run that fit, as it would one
    by one (what one does not fit, the next does not either), at a fraction of the cost: a burst of pods
    waits for nodes launched for several of them each."""
    runs: list[list[Pod]] = []
    for pod in pods:
        if runs:
            last = runs[-1]
            first = last[0]
            if (
                launched_for[pod.key] == launched_for[first.key]
                and _alike(first)
                and _alike(pod)
                and pod.namespace == first.namespace
                and pod.labels == first.labels
            ):
                last.append(pod)
                continue
        runs.append([pod])
    return runs


def _alike(pod: Pod) -> bool:
    """Whether pods like ``pod`` may be put on a node several at once, as :func:`_runs` does."""
    return not pod.topological and pod.gpu_share is None


def scale_up(
    demand: Demand,
    index: OfferingIndex,
    engine: Engine,
    *,
    usage: Usage = NO_USAGE,
    queue_spend: QueueSpend = NO_SPEND,
    now: float | None = None,
    launched_for: Mapping[str, str] | None = None,
) -> LaunchPlan:
    """Plan the cheapest launches for ``demand`` in the cluster ``engine`` holds (its nodes that exist and
    launch); every counted pod is launched for, absorbed or unplaced. ``queue_spend`` is the $/h the nodes
    serving each KAI queue cost already, counted against ``queueBudgets``; ``now`` opens and closes Capacity
    Blocks (without it none is launched into); ``launched_for`` names the node coming up that each pending pod
    was launched for, which takes that pod first."""
    for pod in [*demand.counted, *demand.standby]:
        engine.topology.prepare(pod)
    planner = _Planner(index, engine, usage, now, queue_spend)
    singles = demand.singles
    if launched_for:
        placed = planner.place_own(singles, demand, launched_for)
        singles = [p for p in singles if p.key not in placed]

    # Room booked earlier goes first; a capacity check only after the pods that wait (it never launches).
    rank = {Claim.BOOKED: 0, Claim.NEW: 1, Claim.FREE: 2}
    units: list[tuple[tuple[object, ...], Gang | PodClass]] = [
        ((rank[g.claim], order(g.pods[0], choices(index, demand.constraints[g.pods[0].key]))), g)
        for g in demand.gangs
    ]
    units += [
        ((1, order(u.pods[0], choices(index, u.c))), u)
        for u in pod_classes(singles, demand.constraints, index, engine, demand.queues)
    ]
    units.sort(key=lambda u: u[0])
    for _, unit in units:
        if isinstance(unit, Gang):
            planner.place_gang(unit, demand)
        else:
            planner.place_class(unit)
    saving = exact_step.improve(engine, index, demand, usage)
    # Standby capacity takes what every pod that exists or was asked for leaves.
    for unit in pod_classes(demand.standby, demand.constraints, index, engine, demand.queues):
        planner.place_class(unit)
    launched = launches(engine, index, planner.budget, planner.mode_reasons, planner.bin_queues)
    if saving:
        launched = exact_step.explained(launched, saving)
    gpus_planned = sum(la.offering.gpu_count for la in launched)
    return LaunchPlan(
        launches=tuple(launched),
        unplaced=tuple(sorted(planner.unplaced, key=lambda u: u.pod)),
        absorbed=tuple(sorted(planner.absorbed, key=lambda a: a.pod)),
        gpus_before=usage.gpus,
        gpus_after=usage.gpus + gpus_planned,
    )


def _by_kind_and_name(bins: Sequence[Bin]) -> list[Bin]:
    """Nodes that exist by name, then nodes launching by name (nodes to launch left out)."""
    node, launching = Kind.NODE, Kind.LAUNCHING
    nodes = sorted([b for b in bins if b.kind is node], key=_NAME)
    return nodes + sorted([b for b in bins if b.kind is launching], key=_NAME)


_NAME = attrgetter("name")


NO_FREE_ROOM = "no free room on the nodes that exist or are launching"
_NO_FLOOR = 1 << 62  # a node with no class yet: any pod may join it
