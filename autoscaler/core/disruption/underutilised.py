"""Underutilised: a node whose requests stay under its mode's threshold and whose pods fit on the nodes that
stay, moved with the scheduler's filters by the same placement engine scale-up uses (Karpenter's
single-node consolidation, without a launch).

A bin-selection node (a GPU node, or one labelled so at launch) is measured on its GPUs, a bin-packing node on
CPU and memory; KAI background pods count as no use at all.
"""

from __future__ import annotations

from collections.abc import Sequence

from autoscaler.config.values import Config
from autoscaler.core.fit import AnnotationError, pod_constraints
from autoscaler.core.model import Node, Pod
from autoscaler.core.placement.bins import Bin
from autoscaler.core.placement.engine import Engine
from autoscaler.core.placement.reasons import Rejection
from autoscaler.core.planning.cluster import requested
from autoscaler.core.planning.decisions import BIN_PACKING, BIN_SELECTION
from autoscaler.core.resources import CPU, GPU_RESOURCES, MEMORY

__all__ = ["NODE_MODE", "mode", "move", "threshold", "utilization"]

NODE_MODE = "tidal.dev/node-mode"


def utilization(node: Node, pods: Sequence[Pod]) -> float:
    """The largest share of the node's GPUs (or, without GPUs, CPU and memory) the pods request."""
    used = requested(pods)
    alloc = node.allocatable
    gpu_names = [r for r in GPU_RESOURCES if alloc.get(r)]
    names = gpu_names or [CPU, MEMORY]
    return max((used.get(n) / alloc[n] for n in names if alloc.get(n)), default=0.0)


def mode(node: Node) -> str:
    """The node's mode: as labelled at launch, else bin-selection for a GPU node."""
    return node.labels.get(NODE_MODE) or (BIN_SELECTION if node.allocatable.gpus else BIN_PACKING)


def threshold(node: Node, config: Config) -> float:
    """The utilization under which the node is a candidate."""
    cfg = config.scale_down
    if mode(node) == BIN_PACKING:
        return cfg.utilization_threshold_bin_packing
    return cfg.utilization_threshold_bin_selection


def move(
    pods: Sequence[Pod],
    node: Node,
    engine: Engine,
    targets: Sequence[Bin],
    config: Config,
    landed: set[str] | None = None,
) -> str:
    """Move ``pods`` off ``node`` onto ``targets`` (biggest first, first fit) with the scheduler's filters;
    keep the moves when every pod finds a place (later candidates then see that room taken), else undo them
    and say why not. ``landed`` gathers the names of the targets that took a pod, when every pod moved."""
    mark = engine.journal.mark()
    engine.topology.remove_node(node.name)
    used: list[str] = []
    for pod in sorted(pods, key=lambda p: (-p.requests.gpus, -p.requests.cpu, -p.requests.memory, p.key)):
        try:
            c = pod_constraints(pod, config)
        except AnnotationError as err:
            engine.journal.rollback(mark)
            return f"nowhere to move pod {pod.key} ({err})"
        for b in targets:
            fit = engine.can_add(pod, c, b)
            if not isinstance(fit, Rejection):
                engine.add(pod, c, b, fit, [pod.key])
                used.append(b.name)
                break
        else:
            engine.journal.rollback(mark)
            return f"nowhere to move pod {pod.key}"
    engine.journal.commit(mark)
    if landed is not None:
        landed.update(used)
    return ""
