"""CapacityBuffers (``autoscaling.x-k8s.io/v1beta1``): standby capacity kept warm for pods to come.

A buffer of the ``buffer.x-k8s.io/active-capacity`` strategy stands for ``replicas`` chunks, each shaped like
the pod of its PodTemplate (``podTemplateRef``) or of a workload (``scalableRef``, sized as a ``percentage``
of the workload's replicas), at most as many as fit its ``limits``. tidal plans the chunks as placeholder
pods that exist only in the plan (cluster-autoscaler's "fake pods"): after every real and requested pod,
with what ``clusterGPULimit``, ``maxNodes`` and the queue budgets leave, so a buffer never takes room or
budget a pod needs. A chunk that fits free room keeps that node from being taken away; one that does not
opens a node. When real pods land on the warm nodes, the chunks move on to new room: the buffer refills.

The buffer's status says what was resolved (``replicas``, ``podTemplateRef``, ``provisioningStrategy``) and
the conditions cluster-autoscaler sets: ``ReadyForProvisioning`` and ``Provisioning``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from autoscaler.core.demand import Demand
from autoscaler.core.model import (
    CapacityBuffer,
    OwnerRef,
    Pod,
    PodTemplate,
    Snapshot,
    StatusCondition,
    Workload,
)
from autoscaler.core.planning.decisions import LaunchPlan
from autoscaler.core.provisioning import merge_conditions
from autoscaler.core.quantity import QuantityError, to_milli

__all__ = ["ACTIVE", "BufferAnswer", "Buffers", "answer", "standby"]

ACTIVE = "buffer.x-k8s.io/active-capacity"
READY = "ReadyForProvisioning"
PROVISIONING = "Provisioning"
PLACEHOLDER_ANNOTATION = ("podType", "capacityBufferFakePod")  # as cluster-autoscaler marks its fake pods
SAFE_TO_EVICT = "cluster-autoscaler.kubernetes.io/safe-to-evict"


@dataclass(frozen=True, slots=True)
class Resolved:
    """A buffer read through: its placeholder pods, or why it has none."""

    buffer: CapacityBuffer
    pods: tuple[Pod, ...] = ()
    replicas: int | None = None
    template: str = ""
    error: str = ""  # not ready for provisioning: why
    reason: str = ""  # the Provisioning=False reason when it has no pods


@dataclass(frozen=True, slots=True)
class Buffers:
    """This reconcile's buffers and their placeholder pods (in buffer order)."""

    resolved: tuple[Resolved, ...] = ()
    unsupported: tuple[tuple[CapacityBuffer, str], ...] = ()

    @property
    def pods(self) -> list[Pod]:
        return [p for r in self.resolved for p in r.pods]


@dataclass(frozen=True, slots=True)
class BufferAnswer:
    """The status tidal writes on one buffer, or the warning for a strategy it does not serve."""

    buffer: CapacityBuffer
    conditions: tuple[StatusCondition, ...] = ()
    replicas: int | None = None
    template: str = ""
    strategy: str = ACTIVE
    unsupported: str = ""
    # Chunks placed on free room, on new nodes, and not placed (with the first reason).
    placed: Mapping[str, int] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        """The status differs from the one the buffer carries (times aside)."""
        shape = sorted((c.type, c.status, c.reason, c.message) for c in self.conditions)
        return (
            shape != sorted((c.type, c.status, c.reason, c.message) for c in self.buffer.conditions)
            or self.replicas != self.buffer.status_replicas
            or self.template != self.buffer.status_template
        )


def standby(snapshot: Snapshot) -> Buffers:
    """Read every buffer through to its placeholder pods, or to why it has none."""
    if not snapshot.capacity_buffers:
        return Buffers()
    templates = {(t.namespace, t.name): t for t in snapshot.pod_templates}
    workloads = {(w.namespace, w.kind, w.name): w for w in snapshot.workloads}
    resolved: list[Resolved] = []
    unsupported: list[tuple[CapacityBuffer, str]] = []
    for b in sorted(snapshot.capacity_buffers, key=lambda b: (b.created, b.namespace, b.name)):
        if b.strategy != ACTIVE:
            unsupported.append(
                (b, f"provisioningStrategy {b.strategy!r} is not served by tidal (it serves {ACTIVE})")
            )
            continue
        resolved.append(_resolve(_with_workload(b, workloads), templates))
    return Buffers(tuple(resolved), tuple(unsupported))


def _with_workload(b: CapacityBuffer, workloads: Mapping[tuple[str, str, str], Workload]) -> CapacityBuffer:
    """The buffer with its ``scalableRef`` read through to the workload's replicas and pod, when the snapshot
    has that workload (a ref already read through is kept)."""
    ref = b.scalable
    if ref is None or ref.replicas is not None:
        return b
    found = workloads.get((b.namespace, ref.kind, ref.name))
    if found is None or found.pod is None:
        return b
    return replace(b, scalable=replace(ref, replicas=found.replicas, pod=found.pod))


def _resolve(b: CapacityBuffer, templates: Mapping[tuple[str, str], PodTemplate]) -> Resolved:
    if b.unreadable:
        return Resolved(
            b, error=f"tidal cannot read this buffer: {b.unreadable}", reason="NotReadyForProvisioning"
        )
    if b.template and b.scalable is not None:
        return Resolved(
            b, error="spec sets both podTemplateRef and scalableRef", reason="NotReadyForProvisioning"
        )
    pod: Pod | None
    if b.template:
        found = templates.get((b.namespace, b.template))
        if found is None or found.pod is None:
            why = found.error if found is not None else "not found"
            return Resolved(
                b,
                template=b.template,
                error=f"PodTemplate {b.namespace}/{b.template}: {why}",
                reason="FailedToGetPodTemplate",
            )
        pod, base = found.pod, None
    elif b.scalable is not None:
        ref = b.scalable
        if ref.replicas is None or ref.pod is None:
            return Resolved(
                b,
                error=(
                    f"scalableRef {ref.kind}/{ref.name}: not found (tidal reads Deployments and StatefulSets)"
                ),
                reason="NotReadyForProvisioning",
            )
        pod, base = ref.pod, ref.replicas
    else:
        return Resolved(
            b, error="spec sets neither podTemplateRef nor scalableRef", reason="NotReadyForProvisioning"
        )
    wanted: list[int] = []
    if b.replicas is not None:
        wanted.append(b.replicas)
    if b.percentage is not None and base is not None:
        wanted.append(max(1, math.ceil(base * b.percentage / 100)) if b.percentage else 0)
    try:
        fitting = _within_limits(pod, b.limits)
    except QuantityError as err:
        return Resolved(b, error=str(err), reason="NotReadyForProvisioning")
    if fitting is not None:
        wanted.append(fitting)
    if not wanted:
        return Resolved(
            b, error="spec sets none of replicas, percentage and limits", reason="NotReadyForProvisioning"
        )
    replicas = min(wanted)
    template = b.template
    if replicas == 0:
        return Resolved(b, replicas=0, template=template, reason="BufferIsEmpty")
    pods = tuple(_placeholder(b, pod, i) for i in range(1, replicas + 1))
    return Resolved(b, pods, replicas, template)


def _within_limits(pod: Pod, limits: Mapping[str, str]) -> int | None:
    """How many chunks fit the buffer's resource limits; None when it sets none the pod requests."""
    counts = []
    for name, text in sorted(limits.items()):
        limit = to_milli(text, field=f"spec.limits.{name}")
        need = pod.requests.get(name)
        if need > 0:
            counts.append(limit // need)
    return min(counts) if counts else None


def _placeholder(b: CapacityBuffer, pod: Pod, i: int) -> Pod:
    annotations = dict(pod.annotations)
    annotations[PLACEHOLDER_ANNOTATION[0]] = PLACEHOLDER_ANNOTATION[1]
    annotations[SAFE_TO_EVICT] = "true"
    return replace(
        pod,
        namespace=b.namespace,
        name=f"capacity-buffer-{b.name}-{i}",
        uid=f"{b.uid or b.key}/{i}",
        created=b.created,
        annotations=annotations,
        node_name="",
        phase="Pending",
        scheduled=None,
        owner=OwnerRef("CapacityBuffer", b.name, True),
    )


def answer(buffers: Buffers, demand: Demand, launch: LaunchPlan, now: float) -> tuple[BufferAnswer, ...]:
    """The status of each buffer after this plan: what was resolved, and how many chunks have room."""
    ignored = {i.pod: i.detail for i in demand.ignored}
    unplaced = {u.pod: u.reason for u in launch.unplaced}
    absorbed = {a.pod for a in launch.absorbed}
    out: list[BufferAnswer] = [
        BufferAnswer(b, b.conditions, strategy=b.strategy, unsupported=why) for b, why in buffers.unsupported
    ]
    for r in buffers.resolved:
        b = r.buffer
        if r.error:
            updates = [
                (READY, "False", "error", r.error),
                (PROVISIONING, "False", r.reason, "CapacityBuffer is not ready for provisioning"),
            ]
        elif not r.pods:
            updates = [
                (READY, "True", "AttributesSetSuccessfully", "ready"),
                (PROVISIONING, "False", r.reason, "CapacityBuffer has zero replicas"),
            ]
        else:
            updates = [
                (READY, "True", "AttributesSetSuccessfully", "ready"),
                _provisioning(r.pods, ignored, unplaced, absorbed),
            ]
        placed = _placed(r.pods, ignored, unplaced, absorbed)
        conditions = merge_conditions(b.conditions, updates, now, b.generation)
        out.append(BufferAnswer(b, conditions, r.replicas, r.template, b.strategy, placed=placed))
    return tuple(out)


def _placed(
    pods: Sequence[Pod], ignored: Mapping[str, str], unplaced: Mapping[str, str], absorbed: set[str]
) -> dict[str, int]:
    out = {"free": 0, "new": 0, "none": 0}
    for p in pods:
        if p.key in ignored or p.key in unplaced:
            out["none"] += 1
        elif p.key in absorbed:
            out["free"] += 1
        else:
            out["new"] += 1
    return out


def _provisioning(
    pods: Sequence[Pod], ignored: Mapping[str, str], unplaced: Mapping[str, str], absorbed: set[str]
) -> tuple[str, str, str, str]:
    placed = _placed(pods, ignored, unplaced, absorbed)
    held = len(pods) - placed["none"]
    message = f"{held} of {len(pods)} chunks have room"
    if placed["none"]:
        why = next(
            (
                ignored.get(p.key) or unplaced.get(p.key, "")
                for p in pods
                if p.key in ignored or p.key in unplaced
            ),
            "",
        )
        message += f"; the others do not: {why}"
    return (PROVISIONING, "True", "FakePodsInjected", message)
