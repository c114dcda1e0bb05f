"""Which launches wait for the batch window to close, and which go at once.

The window exists so that pods arriving close together are planned together: a node whose type is chosen
for ten small pods is cheaper than ten nodes chosen one pod at a time. That is worth waiting for only where a
later pod could share the node, or change which node is bought. A launch whose pods take every GPU of its
node leaves it no device for any later GPU pod. When no bigger node would hold more such pods for less each,
planning them again with more pods would buy each the same node: such a launch goes at once. Later pods still
see the node while it launches (it is a bin like any other), so whatever room it has left is not lost. Where
a bigger node is cheaper per pod (an 8-GPU node cheaper per GPU than a 1-GPU one), pods arriving in the
window could share it, so the launch waits.

The same holds for any node its pods fill (no further pod like them fits) when it is the node type cheapest
per pod for such pods however many arrive: a burst's full nodes go as the burst arrives.

Everything else waits, but not for the whole window: a launch waits for company at most ``patience``
(``batchIdleDuration``) after the first of its pods was seen unschedulable. Pods arriving within that time are
planned with it; after it, the node goes, and later pods take whatever room it has left while it launches or
open nodes of their own. A steady stream of pods is so served within about ``batchIdleDuration`` instead of
waiting up to ``batchMaxDuration``, at the price of nodes chosen for the pods of one patience each rather than
for the whole stream. A gang's launches go together or not at all, so a gang is never half-launched by a window.

Where a node takes pods within a second of its launch call (a provider that says so, such as the simulated cloud
without delays), the patience of pods that arrived alone (no other pod in the ``batchIdleDuration`` before them)
is cut so that the node is ready when kube-scheduler first tries its pods again.
The scheduler retries a pod it could not place after ``podInitialBackoffSeconds`` (1 s by default), then after
twice as long each time: a node that turns up just after the first retry is found only at the second, two seconds
later, so the last fraction of a second of waiting for company would cost the pods a whole back-off. Where nodes
take longer than that to boot (every real cloud), the first retry is missed whatever the window does, and the
patience stays ``batchIdleDuration``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

from autoscaler.core.fit import Constraints
from autoscaler.core.model import Pod
from autoscaler.core.placement.bins import Option
from autoscaler.core.planning.decisions import Launch
from autoscaler.core.planning.newnodes import Budget, Choice, choose, per_node
from autoscaler.core.planning.offerings import OfferingIndex

# As many pods as any node could take: what a batch of them would be planned as.
_MANY = 1 << 20
# kube-scheduler's podInitialBackoffSeconds (its default): when it tries a pod it could not place again.
SCHEDULER_FIRST_RETRY = 1.0
# From the launch call to a Node the scheduler places pods on, beyond the provider's own lead: the Node's
# registration reaching the scheduler, and the node.kubernetes.io/not-ready taint the API server puts on every
# new Node until the node lifecycle controller has seen it Ready (0.2-0.35 s on an idle control plane).
NODE_SETTLES = 0.6

# How long a launch waits for company, in seconds: one figure for all, or one per launch.
Patience = float | Callable[[Launch], float]

__all__ = [
    "NODE_SETTLES",
    "SCHEDULER_FIRST_RETRY",
    "Patience",
    "fills_its_node",
    "launch_now",
    "next_due",
    "patience_for",
]


def patience_for(idle: float, lead: float | None, *, preceded: bool = False) -> float:
    """How long a launch waits for company: ``idle`` (``batchIdleDuration``), cut short when its node takes
    pods within ``lead`` seconds of the launch call (None: not known) so soon that waiting the whole ``idle``
    would make it miss the scheduler's first retry of its pods. Not cut when other pods were ``preceded``:
    arriving within ``idle`` before the launch's own, as in a stream, where company is likely and waiting for
    it buys fewer, fuller nodes."""
    if preceded or lead is None or lead + NODE_SETTLES >= SCHEDULER_FIRST_RETRY:
        return idle
    return min(idle, SCHEDULER_FIRST_RETRY - NODE_SETTLES - lead)


def fills_its_node(launch: Launch, pods: Mapping[str, Pod]) -> bool:
    """Its pods (by key in ``pods``) ask for every whole GPU of its offering, so no later pod could share a
    device of it."""
    o = launch.offering
    if o.gpu_count <= 0 or o.layout is not None or o.partial_gpu:
        return False
    taken = 0
    for key in launch.pods:
        pod = pods.get(key)
        if pod is None or pod.gpu_share is not None:
            return False
        taken += pod.requests.gpus
    return taken >= o.gpu_count


def _one_kind(launch: Launch, pods: Mapping[str, Pod], constraints: Mapping[str, Constraints]) -> Pod | None:
    """The launch's first pod when every pod of it has the same requests and constraints, else None."""
    first = pods.get(launch.pods[0]) if launch.pods else None
    if first is None or first.key not in constraints:
        return None
    c = constraints[first.key]
    for k in launch.pods:
        if k not in pods or constraints.get(k) != c or pods[k].requests != first.requests:
            return None
    return first


def _best_per_pod(index: OfferingIndex, c: Constraints, pod: Pod, mode: str) -> float | None:
    """The lowest price per pod any node type offers pods like ``pod`` when many of them arrive."""
    found = choose(index, c, pod.requests, mode, _MANY, Budget(None, None, None))
    if not isinstance(found, Choice) or found.per_node <= 0:
        return None
    return found.shape.cheapest.price / found.per_node


def cheaper_together(
    launch: Launch, pods: Mapping[str, Pod], index: OfferingIndex, constraints: Mapping[str, Constraints]
) -> bool:
    """More pods like the launch's could share a node that costs less per pod than its own (an 8-GPU node
    cheaper per GPU than a 1-GPU one): pods arriving later in the window could make its pods cheaper."""
    first = _one_kind(launch, pods, constraints)
    if first is None:
        return True
    best = _best_per_pod(index, constraints[first.key], first, launch.mode)
    return best is None or best < launch.offering.price / len(launch.pods) - 1e-9


def full_and_cheapest(
    launch: Launch, pods: Mapping[str, Pod], index: OfferingIndex, constraints: Mapping[str, Constraints]
) -> bool:
    """The launch's pods, all of one kind, fill its node (no further such pod fits), and no node type holds
    such pods for less per pod: a burst of them would be planned onto this very node."""
    first = _one_kind(launch, pods, constraints)
    if first is None or first.gpu_share is not None or first.claims:
        return False
    o = launch.offering
    holds = per_node(Option(index.allocatable(o), (o,)), first.requests, None, _MANY)
    if holds <= 0 or len(launch.pods) < holds:
        return False
    best = _best_per_pod(index, constraints[first.key], first, launch.mode)
    return best is not None and o.price / holds <= best + 1e-9


def launch_now(
    launches: Sequence[Launch],
    pods: Mapping[str, Pod],
    index: OfferingIndex | None = None,
    constraints: Mapping[str, Constraints] | None = None,
    *,
    waited: Mapping[str, float] | None = None,
    patience: Patience = math.inf,
) -> tuple[Launch, ...]:
    """The launches that need not wait longer for the batch window, in plan order: those no later pod could
    change (they fill their node and, given the offering ``index`` and the pods' ``constraints``, no node
    type holds their pods for less per pod), those whose first pod has ``waited`` (seconds, by pod key) at
    least ``patience`` (for that launch, when it is a function), and a gang's only when every launch of that
    gang does."""
    wait = _per_launch(patience)

    def settled(la: Launch) -> bool:
        if index is None or constraints is None:
            return fills_its_node(la, pods)
        if fills_its_node(la, pods):
            return not cheaper_together(la, pods, index, constraints)
        return full_and_cheapest(la, pods, index, constraints)

    def now(la: Launch) -> bool:
        return (waited is not None and _longest(la, waited) >= wait(la)) or settled(la)

    held_gangs = {la.gang for la in launches if la.gang and not now(la)}
    return tuple(la for la in launches if la.gang not in held_gangs and (la.gang or now(la)))


def next_due(held: Sequence[Launch], waited: Mapping[str, float], patience: Patience) -> float | None:
    """Seconds until the first of the ``held`` launches has waited ``patience`` (its first pod, by
    ``waited``), or None when none is held."""
    wait = _per_launch(patience)
    due = [wait(la) - _longest(la, waited) for la in held]
    return max(0.0, min(due)) if due else None


def _longest(launch: Launch, waited: Mapping[str, float]) -> float:
    """How long the first of the launch's pods has waited (seconds, by pod key in ``waited``)."""
    return max((waited.get(k, 0.0) for k in launch.pods), default=0.0)


def _per_launch(patience: Patience) -> Callable[[Launch], float]:
    if callable(patience):
        return patience
    fixed: float = patience
    return lambda _: fixed
