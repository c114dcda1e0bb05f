"""Which launches wait for the batch window to close, and which go at once.

The window exists so that pods arriving close together are planned together: a node whose type is chosen
for ten small pods is cheaper than ten nodes chosen one pod at a time. That is worth waiting for only where a
later pod could share the node, or change which node is bought. A launch whose pods take every GPU of its
node leaves it no device for any later GPU pod: its type was chosen for those pods alone, and planning them
again with more pods would buy each the same node. Such a launch goes at once; later pods still see the node
while it launches (it is a bin like any other), so whatever room it has left is not lost.

Everything else waits for the window: bin-packing nodes, GPU nodes with devices left, nodes of GPU shares
(fractions and time-sliced or MIG layouts, which later shares could join), and pods whose GPUs come through
DRA claims. A gang's launches go together or not at all, so a gang is never half-launched by a window.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from autoscaler.core.model import Pod
from autoscaler.core.planning.decisions import Launch

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


def launch_now(launches: Sequence[Launch], pods: Mapping[str, Pod]) -> tuple[Launch, ...]:
    """The launches that need not wait for the batch window, in plan order: those that fill their node,
    and a gang's only when every launch of that gang does."""
    held_gangs = {la.gang for la in launches if la.gang and not fills_its_node(la, pods)}
    return tuple(la for la in launches if la.gang not in held_gangs and (la.gang or fills_its_node(la, pods)))
