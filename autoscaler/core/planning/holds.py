"""How many pods like one a new node of an offering holds, counted by the placement engine the plan itself
uses: resources, GPU shares (KAI fractions on a device), MIG instances, time-slice replicas, DRA devices,
and the pod's own inter-pod rules (a hostname anti-affinity against its replicas keeps a node to one).

For ``tidal plan --explain``'s candidates, whose "holds N like it" and price per pod must be what the plan
would do, not what the node's CPU and memory alone allow. Pure, like the plan."""

from __future__ import annotations

from dataclasses import dataclass

from autoscaler.core.fit import Constraints
from autoscaler.core.model import Pod
from autoscaler.core.offering import Offering
from autoscaler.core.placement.bins import Option, shape_key
from autoscaler.core.placement.engine import Engine
from autoscaler.core.placement.fits import request
from autoscaler.core.placement.reasons import Rejection
from autoscaler.core.planning.offerings import OfferingIndex
from autoscaler.core.resources import PODS

__all__ = ["Holds", "holds"]


@dataclass(frozen=True, slots=True)
class Holds:
    """Pods like one a new node holds, and what stops one more (empty when its resources alone do)."""

    count: int
    stop: str = ""


def holds(pod: Pod, c: Constraints, o: Offering, index: OfferingIndex, mode: str) -> Holds:
    """How many pods like ``pod`` (constraints ``c``) one new node of ``o`` alone takes, as the plan's engine
    fills it one kind of pod at a time; and, when fewer than its resources would allow, why."""
    alloc = index.allocatable(o)
    by_resources = request(pod).times_fits_in(alloc)
    if by_resources <= 0:
        return Holds(0)
    engine = Engine(index)
    option = Option(alloc, (o,))
    allowed = {shape_key(o): frozenset((o,))}
    b = engine.open([option], mode=mode, gpus=o.gpu_count, vcpu=o.vcpu)
    placed, stop = 0, ""
    # Bounded by the node's pod slots: a pod whose fit is worked out one at a time (inter-pod rules) ends there.
    most = max(1, alloc.get(PODS) // 1000)
    while placed < most:
        fit = engine.can_add(pod, c, b, most - placed, allowed)
        if isinstance(fit, Rejection) or fit.count <= 0:
            if isinstance(fit, Rejection) and placed < by_resources:
                stop = fit.message
            break
        engine.add(pod, c, b, fit, [pod.key] * fit.count)
        placed += fit.count
    return Holds(placed, stop)
