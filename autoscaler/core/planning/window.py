"""Which launches wait for the batch window to close, and which go at once.

The window exists so that pods arriving close together are planned together: a node whose type is chosen
for ten small pods is cheaper than ten nodes chosen one pod at a time. That is worth waiting for only where a
later pod could share the node, or change which node is bought. A launch whose pods take every GPU of its
node leaves it no device for any later GPU pod. When no bigger node would hold more such pods for less each,
planning them again with more pods would buy each the same node: such a launch goes at once. Later pods still
see the node while it launches (it is a bin like any other), so whatever room it has left is not lost. Where
a bigger node is cheaper per pod (an 8-GPU node cheaper per GPU than a 1-GPU one), pods arriving in the
window could share it, so the launch waits.

Everything else waits for the window: bin-packing nodes, GPU nodes with devices left, nodes of GPU shares
(fractions and time-sliced or MIG layouts, which later shares could join), and pods whose GPUs come through
DRA claims. A gang's launches go together or not at all, so a gang is never half-launched by a window.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from autoscaler.core.fit import Constraints
from autoscaler.core.model import Pod
from autoscaler.core.planning.decisions import Launch
from autoscaler.core.planning.newnodes import Budget, Choice, choose
from autoscaler.core.planning.offerings import OfferingIndex

# As many pods as any node could take: what a batch of them would be planned as.
_MANY = 1 << 20

__all__ = ["fills_its_node", "launch_now"]


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


def cheaper_together(
    launch: Launch, pods: Mapping[str, Pod], index: OfferingIndex, constraints: Mapping[str, Constraints]
) -> bool:
    """More pods like the launch's could share a node that costs less per pod than its own (an 8-GPU node
    cheaper per GPU than a 1-GPU one): pods arriving later in the window could make its pods cheaper."""
    first = pods.get(launch.pods[0]) if launch.pods else None
    if first is None or first.key not in constraints:
        return True
    c = constraints[first.key]
    if any(
        k not in pods or constraints.get(k) != c or pods[k].requests != first.requests for k in launch.pods
    ):
        return True
    found = choose(index, c, first.requests, launch.mode, _MANY, Budget(None, None, None))
    if not isinstance(found, Choice) or found.per_node <= 0:
        return True
    return found.shape.cheapest.price / found.per_node < launch.offering.price / len(launch.pods) - 1e-9


def launch_now(
    launches: Sequence[Launch],
    pods: Mapping[str, Pod],
    index: OfferingIndex | None = None,
    constraints: Mapping[str, Constraints] | None = None,
) -> tuple[Launch, ...]:
    """The launches that need not wait for the batch window, in plan order: those that fill their node (and,
    given the offering ``index`` and the pods' ``constraints``, whose pods no bigger node would hold for
    less per pod), and a gang's only when every launch of that gang does."""

    def now(la: Launch) -> bool:
        if not fills_its_node(la, pods):
            return False
        return index is None or constraints is None or not cheaper_together(la, pods, index, constraints)

    held_gangs = {la.gang for la in launches if la.gang and not now(la)}
    return tuple(la for la in launches if la.gang not in held_gangs and (la.gang or now(la)))
