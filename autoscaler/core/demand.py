"""Which pending pods need new capacity, and a named reason for every one that does not.

KAI writes the same ``PodScheduled=False/Unschedulable`` condition for "no capacity" and for "the queue is over
its quota or limit"; ``pendingPodReasonRegexp`` tells them apart by message, and the KAI Queue objects (when the
snapshot has them) catch what a regexp cannot: a pod whose queue would exceed its GPU limit never counts, nor a
non-preemptible one that would take its queue past its GPU quota (KAI runs non-preemptible work only within quota).
"""

from __future__ import annotations

import enum
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import cast

from autoscaler.config.values import Config
from autoscaler.core import annotations as ann
from autoscaler.core.census import PodCensus
from autoscaler.core.demand_memo import DemandMemo, Screened
from autoscaler.core.fit import AnnotationError, Constraints, pod_constraints
from autoscaler.core.gpu.kai_pods import is_background, is_scale_adjuster_pod, scaled_pod
from autoscaler.core.gpu.layouts import mig_resources
from autoscaler.core.gpu.mig import kai_quota_units
from autoscaler.core.model import QUEUE_LABELS, Node, Pod, PodGroup, Queue, Snapshot
from autoscaler.core.resources import AMD_GPU, NVIDIA_GPU, Resources

PREEMPTIBILITY_LABEL = "kai.scheduler/preemptibility"
# KAI's rule when neither the pod's label nor its PodGroup says: this priority and above is non-preemptible.
NON_PREEMPTIBLE_PRIORITY = 100


class Reason(enum.StrEnum):
    """Why a pending pod does not count as demand."""

    BOUND = "bound"
    TERMINATING = "terminating"
    GATED = "gated"
    NOT_OPTED_IN = "not-opted-in"
    IGNORED = "ignored"
    OTHER_SCHEDULER = "other-scheduler"
    DAEMONSET = "daemonset"
    NO_CONDITION = "no-condition"
    REASON_MISMATCH = "reason-mismatch"
    QUEUE_LIMIT = "queue-limit"
    QUEUE_QUOTA = "queue-quota"
    GANG_INCOMPLETE = "gang-incomplete"
    BAD_ANNOTATION = "bad-annotation"
    UNSUPPORTED_CLAIM = "unsupported-claim"
    UNREADABLE = "unreadable"
    BACKGROUND = "background"
    SCALE_ADJUSTER = "scale-adjuster"
    FITS_EXISTING = "fits-existing"
    COST_ESTIMATE = "cost-estimate"


@dataclass(frozen=True, slots=True)
class Ignored:
    pod: str
    reason: Reason
    detail: str
    node: str = ""  # for FITS_EXISTING: the node whose room the pod will use


class Claim(enum.StrEnum):
    """What room a gang may take: new nodes too, or only free room on nodes that exist or launch."""

    NEW = "new"  # launched for when it does not fit (a KAI PodGroup, an atomic ProvisioningRequest)
    FREE = "free"  # free room only, after the pods waiting for it (a capacity check): never launched for
    BOOKED = "booked"  # room booked earlier (a provisioned request): placed before any other pod, never launched for


@dataclass(frozen=True, slots=True)
class Gang:
    """Pods that get capacity all together or not at all."""

    key: str  # namespace/podgroup
    min_member: int
    pods: tuple[Pod, ...]
    claim: Claim = Claim.NEW


@dataclass(slots=True)
class Demand:
    """Counted pods (singles and gangs), their constraints, and why the rest were left out."""

    singles: list[Pod] = field(default_factory=list)
    gangs: list[Gang] = field(default_factory=list)
    constraints: dict[str, Constraints] = field(default_factory=dict)  # by pod key
    ignored: list[Ignored] = field(default_factory=list)
    # Pods gated for a cost estimate only (each alone, or a KAI PodGroup's together): never launched for.
    estimates: list[Gang] = field(default_factory=list)
    # The KAI queue of each counted pod that has one, by pod key.
    queues: dict[str, str] = field(default_factory=dict)
    # Placeholder pods of standby capacity (CapacityBuffers): planned after every other pod, with what is left.
    standby: list[Pod] = field(default_factory=list)

    @property
    def counted(self) -> list[Pod]:
        return self.singles + [p for g in self.gangs for p in g.pods]


def _group(pod: Pod, groups: Mapping[tuple[str, str], PodGroup]) -> PodGroup | None:
    name = pod.annotations.get(ann.POD_GROUP_ANNOTATION)
    return groups.get((pod.namespace, name)) if name else None


def pod_queue(pod: Pod, groups: Mapping[tuple[str, str], PodGroup]) -> str:
    """The KAI queue of a pod: its PodGroup's queue, else the queue label."""
    name = pod.annotations.get(ann.POD_GROUP_ANNOTATION)
    if name:  # as _group finds it, read here without the call: every pod of a plan is asked about
        group = groups.get((pod.namespace, name))
        if group and group.queue:
            return group.queue
    labels = pod.labels
    for label in QUEUE_LABELS:
        value = labels.get(label)
        if value:
            return value
    return ""


def pod_preemptibility(pod: Pod, groups: Mapping[tuple[str, str], PodGroup]) -> str:
    """preemptible, non-preemptible or semi-preemptible, as KAI decides it: the pod's
    ``kai.scheduler/preemptibility`` label, else its PodGroup's ``spec.preemptibility``, else its priority."""
    group = _group(pod, groups)
    found = ann.preemptibility(pod.labels.get(PREEMPTIBILITY_LABEL)) or (
        group.preemptibility if group else ""
    )
    if found:
        return found
    return "non-preemptible" if pod.priority >= NON_PREEMPTIBLE_PRIORITY else "preemptible"


def _opted_in(pod: Pod, config: Config) -> bool:
    if not config.labels and not config.pod_annotations:
        return True
    return all(pod.labels.get(k) == v for k, v in config.labels.items()) and all(
        pod.annotations.get(k) == v for k, v in config.pod_annotations.items()
    )


# Luna's spelling of tidal's ignore annotation: most pods carry neither spelling.
_IGNORE_LUNA = ann.alias(ann.IGNORE) or ann.IGNORE


def _screen(pod: Pod, config: Config, matched: dict[str, bool]) -> Ignored | None:
    """The first reason, in a fixed order, that keeps a pending pod out of demand. ``matched`` keeps, by
    pending message, whether ``pendingPodReasonRegexp`` matches it (most pods wait with one of a few)."""
    found = _screen_spec(pod, config)
    return _screen_condition(pod, config, matched) if found is None else found


def _screen_spec(pod: Pod, config: Config) -> Ignored | None:
    """:func:`_screen` but for the PodScheduled condition (None: the condition decides): what it reads of the
    pod stays while only the condition changes, as the scheduler rewrites it at every try."""
    key = pod.key
    if pod.node_name:
        return Ignored(key, Reason.BOUND, f"bound to {pod.node_name}, waiting for its containers")
    if pod.unreadable:
        return Ignored(key, Reason.UNREADABLE, f"tidal cannot read all of this pod ({pod.unreadable})")
    if pod.terminating:
        return Ignored(key, Reason.TERMINATING, "being deleted")
    if pod.daemonset:
        return Ignored(key, Reason.DAEMONSET, f"DaemonSet pod of {pod.owner.name if pod.owner else '?'}")
    if is_scale_adjuster_pod(pod.namespace, pod.labels):
        stands_for = scaled_pod(pod.labels)
        target = f"{stands_for[0]}/{stands_for[1]}" if stands_for else "a GPU-sharing pod"
        return Ignored(
            key,
            Reason.SCALE_ADJUSTER,
            f"KAI scale-adjuster pod for {target}: tidal plans for that pod itself",
        )
    if is_background(pod.labels):
        return Ignored(
            key, Reason.BACKGROUND, "KAI background pod: it runs only on capacity no other workload needs"
        )
    if pod.gpu_share_error:
        return Ignored(key, Reason.BAD_ANNOTATION, pod.gpu_share_error)
    if pod.dra_error:
        return Ignored(key, Reason.UNSUPPORTED_CLAIM, pod.dra_error)
    gates = pod.scheduling_gates
    estimate = next((g for g in gates if ann.is_cost_estimate_gate(g)), "") if gates else ""
    if gates and not estimate:
        return Ignored(key, Reason.GATED, f"scheduling gates {','.join(pod.scheduling_gates)}")
    annotations = pod.annotations
    if (ann.IGNORE in annotations or _IGNORE_LUNA in annotations) and ann.is_true(annotations, ann.IGNORE):
        spelling = ann.lookup(pod.annotations, ann.IGNORE) or (ann.IGNORE, "")
        return Ignored(key, Reason.IGNORED, f"annotated {spelling[0]}")  # as written: Luna's or tidal's
    if (config.labels or config.pod_annotations) and not _opted_in(pod, config):
        return Ignored(key, Reason.NOT_OPTED_IN, "labels/annotations do not match the opt-in selector")
    if config.scheduler_names and pod.scheduler_name not in config.scheduler_names:
        return Ignored(key, Reason.OTHER_SCHEDULER, f"scheduler {pod.scheduler_name} is not watched")
    if estimate:
        # The scheduler never sees a gated pod, so there is no PodScheduled message to match.
        return Ignored(
            key,
            Reason.COST_ESTIMATE,
            f"scheduling gate {estimate}: tidal only estimates the node it would buy, and never launches it",
        )
    return None


def _screen_condition(pod: Pod, config: Config, matched: dict[str, bool]) -> Ignored | None:
    """What the pod's PodScheduled condition says of it, the last of :func:`_screen`'s questions."""
    cond = pod.scheduled
    if cond is None or cond.status != "False":
        return Ignored(pod.key, Reason.NO_CONDITION, "the scheduler has not reported PodScheduled=False yet")
    found = matched.get(cond.message)
    if found is None:
        found = matched[cond.message] = config.pending_pod_reason_regexp.search(cond.message) is not None
    if not found:
        return Ignored(
            pod.key, Reason.REASON_MISMATCH, f"pending message does not match: {cond.message[:160]}"
        )
    return None


class _QueueBook:
    """GPUs in use per KAI queue (including children), all and non-preemptible, so that pods KAI would hold
    over a limit or quota never count."""

    def __init__(
        self, snapshot: Snapshot, groups: Mapping[tuple[str, str], PodGroup], gpu_memory_mib: int = 0
    ) -> None:
        self.queues: dict[str, Queue] = {q.name: q for q in snapshot.queues}
        self.used: dict[str, float] = defaultdict(float)
        self.non_preemptible: dict[str, float] = defaultdict(float)
        self.groups = groups
        if not self.queues:
            return  # no KAI queues: nothing to account
        memory = {n.name: _node_gpu_memory(n, gpu_memory_mib) for n in snapshot.nodes}
        core: dict[tuple[str, str], int] = defaultdict(int)
        for pod in snapshot.pods:
            gpus = pod_gpus(pod, memory.get(pod.node_name, gpu_memory_mib))
            if pod.node_name and not pod.finished and gpus:
                chain = self.lineage(pod_queue(pod, groups))
                for name in chain:
                    self.used[name] += gpus
                kind = pod_preemptibility(pod, groups)
                if kind == "semi-preemptible":
                    # Only a gang's first minMember pods are non-preemptible; which ones does not matter here.
                    group = _group(pod, groups)
                    key = (group.namespace, group.name) if group else (pod.namespace, pod.name)
                    core[key] += 1
                    if group and core[key] > group.min_member:
                        continue
                elif kind != "non-preemptible":
                    continue
                for name in chain:
                    self.non_preemptible[name] += gpus

    def lineage(self, name: str) -> list[str]:
        chain: list[str] = []
        while name and name in self.queues and name not in chain:
            chain.append(name)
            name = self.queues[name].parent
        return chain

    def admit(self, queue: str, gpus: float, non_preemptible: float = 0) -> tuple[Reason | None, str]:
        """Reserve ``gpus`` (``non_preemptible`` of them for non-preemptible pods) in ``queue`` and its
        parents; ``(None, "")`` when allowed, else the reason and why."""
        chain = self.lineage(queue)
        for name in chain:
            if self.queues[name].unreadable:
                return Reason.UNREADABLE, (
                    f"queue {name} cannot be read ({self.queues[name].unreadable}), so its GPU limit is unknown"
                )
            limits = self.queues[name].gpu
            if limits.limit is not None and self.used[name] + gpus > limits.limit:
                return Reason.QUEUE_LIMIT, (
                    f"queue {name} would exceed its GPU limit: {self.used[name]:g} allocated + {gpus:g} "
                    f"requested > limit {limits.limit:g}"
                )
            held = self.non_preemptible[name]
            if non_preemptible and limits.quota is not None and held + non_preemptible > limits.quota:
                return Reason.QUEUE_QUOTA, (
                    f"queue {name} would exceed its GPU quota with non-preemptible pods, which KAI runs only "
                    f"within quota: {held:g} allocated + {non_preemptible:g} requested > quota {limits.quota:g}"
                )
        for name in chain:
            self.used[name] += gpus
            self.non_preemptible[name] += non_preemptible
        return None, ""


def pod_gpus(pod: Pod, gpu_memory_mib: int = 0) -> float:
    """GPUs a pod counts as against a KAI queue: whole ones, MIG instances by their compute slices (one
    ``3g.40gb`` is 3, as KAI counts them), plus a share as KAI counts it (a memory share as its part of a
    device of ``gpu_memory_mib``; of a whole GPU per device when that memory is unknown)."""
    whole = pod.requests.gpus
    mig = mig_resources(pod.requests)
    if mig:
        whole += sum(kai_quota_units(r, pod.requests[r] // 1000) for r in mig)
    share = pod.gpu_share
    if share is None:
        return whole
    if share.portion is None and not gpu_memory_mib:
        return whole + share.devices
    return whole + share.gpus(gpu_memory_mib or None)


def _node_gpu_memory(node: Node, default: int) -> int:
    label = node.labels.get("nvidia.com/gpu.memory", "")
    return int(label) if label.isdigit() else default


def _asked(requests: Resources, asked: dict[int, tuple[Resources, object]]) -> object:
    # By identity, the requests kept alongside: replicas decoded together share one Resources, and comparing
    # two by value is a call into Python at every pod.
    found = asked.get(id(requests))
    if found is None or found[0] is not requests:
        found = asked[id(requests)] = (
            requests,
            (requests.get(NVIDIA_GPU) > 0, requests.get(AMD_GPU) > 0, tuple(mig_resources(requests))),
        )
    return found[1]


def _sort_key(pod: Pod) -> tuple[int, int, int, int, float, str]:
    r = pod.requests
    return (-pod.priority, -r.gpus, -r.cpu, -r.memory, pod.created, pod.uid or pod.key)


def _in_order(pods: list[Pod]) -> list[Pod]:
    """``pods`` sorted by :func:`_sort_key`, as a stable sort by it leaves them. Pods share a few priorities
    and requests (replicas ask alike): they are grouped by those, the groups sorted, and each group sorted
    by name, then by creation time, each a sort of plain strings or numbers (far cheaper to compare than
    tuples, 10,000 pods at every plan)."""
    heads: dict[int, tuple[int, int, int]] = {}  # by identity of the requests, all held by the pods
    groups: dict[tuple[int, tuple[int, int, int]], list[Pod]] = {}
    for pod in pods:
        r = pod.requests
        head = heads.get(id(r))
        if head is None:
            head = heads[id(r)] = (-r.gpus, -r.cpu, -r.memory)
        key = (-pod.priority, head)
        group = groups.get(key)
        if group is None:
            groups[key] = [pod]
        else:
            group.append(pod)
    out: list[Pod] = []
    for key in sorted(groups):
        group = groups[key]
        if len(group) > 1:
            group.sort(key=_tie)
            group.sort(key=_created)
        out.extend(group)
    return out


def _tie(pod: Pod) -> str:
    return pod.uid or pod.key


def _created(pod: Pod) -> float:
    return pod.created


def select(
    snapshot: Snapshot,
    config: Config,
    *,
    gpu_memory_mib: int = 0,
    requested: Sequence[Gang] = (),
    standby: Sequence[Pod] = (),
    census: PodCensus | None = None,
    memo: DemandMemo | None = None,
) -> Demand:
    """Split the snapshot's pending pods into demand (singles and gangs) and ignored-with-reason.

    ``gpu_memory_mib`` is the GPU memory a pending memory share is counted against (for a queue's limit and
    quota): the smallest tidal could launch, so the share counts as large as it may turn out to be.
    ``requested`` are gangs of pods asked for ahead of time (ProvisioningRequests) and ``standby`` placeholder
    pods (CapacityBuffers): no scheduler has seen them, so they are not screened, but they count against
    the KAI queues like any pod: the requested before every pending pod (their capacity is promised first),
    the standby after all of them. ``census`` is that of the snapshot's pods, when the caller has it.
    ``memo`` keeps what is read of each pending pod for the next plan, which reads it again only of pods
    that are new or changed (see :class:`~autoscaler.core.demand_memo.DemandMemo`)."""
    demand = Demand()
    groups = {(g.namespace, g.name): g for g in snapshot.podgroups}
    candidates: list[Pod] = []
    estimating: list[Pod] = []
    if memo is not None:
        memo.start(config)
    # Replicas of one workload have the same annotations and constraints: read them once.
    read: dict[tuple[object, ...], Constraints | AnnotationError] = memo.shapes if memo is not None else {}
    matched: dict[str, bool] = {}
    # What a pod's constraints read of its requests, by request (replicas ask alike).
    asked: dict[int, tuple[Resources, object]] = {}
    known = memo.pods if memo is not None else None
    screened: dict[str, Screened] = {}
    # Whether every pod that counts was seen by the last plan, as it is but for its condition.
    seen = known is not None
    pending = (
        census.pending_phase if census is not None and census.describes(snapshot.pods) else snapshot.pods
    )
    for pod in pending:
        if pod.phase != "Pending":
            continue
        if known is None:
            verdict = _screen(pod, config, matched)
            entry, fresh = None, True
        else:
            entry = known.get(pod.key)
            if entry is None or not entry.same(pod):
                entry = Screened(pod, _screen_spec(pod, config))
                fresh = True
            else:
                fresh = False
            screened[pod.key] = entry
            spec = cast("Ignored | None", entry.spec)
            verdict = _screen_condition(pod, config, matched) if spec is None else spec
        if verdict and verdict.reason != Reason.COST_ESTIMATE:
            demand.ignored.append(verdict)
            continue
        found = entry.found if entry is not None else None
        if found is None:
            shape = (
                tuple(pod.annotations.items()),
                tuple(pod.node_selector.items()),
                pod.affinity,
                pod.tolerations,
                _asked(pod.requests, asked),
                pod.dra_types,
            )
            found = read.get(shape)
            if found is None:
                try:
                    found = pod_constraints(pod, config)
                except AnnotationError as err:
                    found = err
                read[shape] = found
            if entry is not None:
                entry.shape, entry.found = shape, found
        if isinstance(found, AnnotationError):
            demand.ignored.append(Ignored(pod.key, Reason.BAD_ANNOTATION, str(found)))
            continue
        demand.constraints[pod.key] = found
        if verdict:
            demand.ignored.append(verdict)
            estimating.append(pod)
            continue
        candidates.append(pod)
        seen = seen and not fresh
    if memo is not None:
        memo.pods = screened  # pods no longer pending are forgotten
        if len(read) > 2 * len(screened) + _SHAPES_SLACK:
            memo.shapes = {
                e.shape: e.found for e in screened.values() if e.shape is not None and e.found is not None
            }
        candidates = _kept_order(candidates, memo, seen)
    else:
        candidates = _in_order(candidates)
    demand.estimates = _estimates(estimating, groups)

    members: dict[str, list[Pod]] = defaultdict(list)
    singles: list[Pod] = []
    for pod in candidates:
        group_name = pod.annotations.get(ann.POD_GROUP_ANNOTATION)
        group = groups.get((pod.namespace, group_name)) if group_name else None
        if group and group.unreadable:
            detail = f"PodGroup {pod.namespace}/{group.name} cannot be read ({group.unreadable})"
            demand.ignored.append(Ignored(pod.key, Reason.UNREADABLE, detail))
            continue
        if group and group.min_member > 1:
            members[f"{pod.namespace}/{group.name}"].append(pod)
        else:
            singles.append(pod)
    running = _running_members(snapshot.pods) if members else {}
    book = _QueueBook(snapshot, groups, gpu_memory_mib)

    for gang in requested:
        _request(demand, gang, book, groups, config, gpu_memory_mib)
    # Gangs first in a stable order: the queue book then treats a gang as one request, as KAI does.
    for key in sorted(members, key=lambda k: _sort_key(members[k][0])):
        pods = members[key]
        namespace, name = key.split("/", 1)
        group = groups[(namespace, name)]
        have = len(pods) + running.get(key, 0)
        if have < group.min_member:
            detail = f"gang {key} has {have} of minMember {group.min_member} pods"
            demand.ignored.extend(Ignored(p.key, Reason.GANG_INCOMPLETE, detail) for p in pods)
            continue
        reason, refusal = (
            book.admit(
                group.queue,
                sum(pod_gpus(p, gpu_memory_mib) for p in pods),
                _non_preemptible_gpus(pods, group, groups, have, gpu_memory_mib),
            )
            if book.queues
            else (None, "")
        )
        if reason:
            demand.ignored.extend(Ignored(p.key, reason, refusal) for p in pods)
            continue
        demand.gangs.append(Gang(key, group.min_member, tuple(pods)))
    for pod in singles:
        # Without KAI Queues no limit or quota can refuse a pod: the book would admit every one.
        gpus = pod_gpus(pod, gpu_memory_mib) if book.queues else 0
        if gpus:
            held = gpus if pod_preemptibility(pod, groups) != "preemptible" else 0
            reason, refusal = book.admit(pod_queue(pod, groups), gpus, held)
            if reason:
                demand.ignored.append(Ignored(pod.key, reason, refusal))
                continue
        demand.singles.append(pod)
    for pod in standby:
        _request(demand, Gang(pod.key, 1, (pod,)), book, groups, config, gpu_memory_mib, single=True)
    for i in demand.ignored:
        if i.reason != Reason.COST_ESTIMATE:
            demand.constraints.pop(i.pod, None)
    for pod in [*demand.counted, *demand.standby]:
        queue = _queue(pod, groups, screened)
        if queue:
            demand.queues[pod.key] = queue
    return demand


# Shapes of pods gone a memo may hold, beyond twice its pods', before it forgets them.
_SHAPES_SLACK = 256


def _queue(pod: Pod, groups: Mapping[tuple[str, str], PodGroup], screened: Mapping[str, Screened]) -> str:
    """:func:`pod_queue`, kept with what the plan read of the pod when it names no PodGroup (then only its
    labels say)."""
    entry = screened.get(pod.key)
    if entry is None or entry.pod is not pod:
        return pod_queue(pod, groups)
    found = entry.queue
    if found is None:
        found = pod_queue(pod, groups)
        if not pod.annotations.get(ann.POD_GROUP_ANNOTATION):
            entry.queue = found
    return found


def _kept_order(pods: list[Pod], memo: DemandMemo, seen: bool) -> list[Pod]:
    """:func:`_in_order` of ``pods``, kept in ``memo``. When every one of them was seen by the last plan (the
    same pod, but for its condition, which no part of the order reads), they are put in the order they had
    then: the same pods in the same order as given then, or some of them only when no two of those tie (then
    the order is the set's, whatever order they came in)."""
    last = memo.order
    if seen and last is not None:
        given, ordered, distinct = last
        by_key = {p.key: p for p in pods}
        if len(by_key) < len(pods):
            pass  # two pods of one name: only a sort puts them in order
        elif len(given) == len(pods) and all(a.key == b.key for a, b in zip(given, pods, strict=True)):
            memo.order = (pods, [by_key[p.key] for p in ordered], distinct)
            return list(memo.order[1])
        elif distinct and len(pods) <= len(ordered):
            kept = [q for p in ordered if (q := by_key.get(p.key)) is not None]
            if len(kept) == len(pods):
                memo.order = (pods, kept, True)
                return list(kept)
    ordered = _in_order(pods)
    memo.order = (pods, ordered, len({_tie(p) for p in pods}) == len(pods))
    return list(ordered)


def _request(
    demand: Demand,
    gang: Gang,
    book: _QueueBook,
    groups: Mapping[tuple[str, str], PodGroup],
    config: Config,
    gpu_memory_mib: int,
    *,
    single: bool = False,
) -> None:
    """Count pods asked for ahead of time (all of ``gang`` or none), or say why not."""
    for pod in gang.pods:
        try:
            demand.constraints[pod.key] = pod_constraints(pod, config)
        except AnnotationError as err:
            demand.ignored.extend(Ignored(p.key, Reason.BAD_ANNOTATION, str(err)) for p in gang.pods)
            return
    if book.queues:
        first = gang.pods[0]
        gpus = sum(pod_gpus(p, gpu_memory_mib) for p in gang.pods)
        held = gpus if pod_preemptibility(first, groups) != "preemptible" else 0
        reason, refusal = book.admit(pod_queue(first, groups), gpus, held) if gpus else (None, "")
        if reason:
            demand.ignored.extend(Ignored(p.key, reason, refusal) for p in gang.pods)
            return
    if single:
        demand.standby.extend(gang.pods)
    else:
        demand.gangs.append(gang)


def _estimates(pods: Sequence[Pod], groups: Mapping[tuple[str, str], PodGroup]) -> list[Gang]:
    """Pods gated for a cost estimate: each alone, but a KAI PodGroup's together (its estimate goes on its
    first pod, the oldest, then by name)."""
    units: dict[str, list[Pod]] = defaultdict(list)
    sizes: dict[str, int] = {}
    for pod in pods:
        group = _group(pod, groups)
        key = f"{pod.namespace}/{group.name}" if group is not None else pod.key
        units[key].append(pod)
        sizes[key] = group.min_member if group is not None else 1
    return [
        Gang(key, sizes[key], tuple(sorted(members, key=lambda p: (p.created, p.name))))
        for key, members in sorted(units.items())
    ]


def _non_preemptible_gpus(
    pods: Sequence[Pod], group: PodGroup, groups: Mapping[tuple[str, str], PodGroup], have: int, memory: int
) -> float:
    """GPUs of a pending gang's pods that KAI treats as non-preemptible: all of a non-preemptible gang's; of a
    semi-preemptible one, those of the members still missing from its first minMember (running ones count)."""
    kind = pod_preemptibility(pods[0], groups)
    if kind == "preemptible":
        return 0
    if kind == "semi-preemptible":
        missing = max(0, group.min_member - (have - len(pods)))
        return sum(pod_gpus(p, memory) for p in pods[:missing])
    return sum(pod_gpus(p, memory) for p in pods)


def _running_members(pods: Iterable[Pod]) -> dict[str, int]:
    # Members that already ran to completion still count toward minMember, as in KAI's gang accounting:
    # a restarted member of a gang whose others finished runs alone.
    counts: dict[str, int] = defaultdict(int)
    for pod in pods:
        group = pod.annotations.get(ann.POD_GROUP_ANNOTATION)
        if group and (pod.phase == "Succeeded" or (pod.node_name and not pod.finished)):
            counts[f"{pod.namespace}/{group}"] += 1
    return counts


def pending_pods(pods: Sequence[Pod]) -> list[Pod]:
    """Pods in phase Pending (bound or not): the set every verdict accounts for."""
    return [p for p in pods if p.phase == "Pending"]
