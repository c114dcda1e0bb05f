"""What the daemon tells pods beyond their launches: a node far bigger than the pods it is launched for, and
the cost estimate of pods gated for one. Like every event, advisory: nothing here may fail a reconcile."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import structlog

from autoscaler.core import annotations as ann
from autoscaler.core.model import Pod
from autoscaler.core.planning.decisions import Launch
from autoscaler.core.planning.estimates import Estimate
from autoscaler.core.planning.why import idle_warning

log = structlog.get_logger("tidal.controller")

# The event on a pod gated for a cost estimate (tidal.dev/cost-estimate or Luna's nodecostestimate).
COST_ESTIMATE = "CostEstimate"
# The event on a pod whose new node leaves most of its GPUs idle (no smaller offering would take it).
OVERSIZED_NODE = "OversizedNode"


def idle_notice(launch: Launch) -> str:
    """The warning about a launch whose node leaves most of its GPUs idle (logged here), or ``""``."""
    why = launch.why
    # A replacement's launches name no pods (each is for the node it replaces): the line is logged, and no
    # pod gets an event.
    if why is None or not why.idle_gpus:
        return ""
    o = launch.offering
    line = idle_warning(o, launch.pods, why)
    log.warning(
        "node_far_bigger_than_its_pods",
        instance_type=o.instance_type,
        capacity_type=o.capacity_type,
        gpus=o.gpu_count,
        gpus_used=why.gpus_used,
        price=o.price,
        pods=len(launch.pods),
        why=line,
    )
    return line


def post_estimates(
    estimates: Iterable[Estimate],
    pods: Mapping[str, Pod],
    event: Callable[..., Any],
    annotate: Callable[[str, str, dict[str, str | None]], Any] | None,
) -> None:
    """A ``CostEstimate`` event on each estimated pod, and its ``tidal.dev/cost-estimate`` annotation written
    through ``annotate`` (None in a dry run) when it changed: the pod's own update would otherwise come back
    every reconcile."""
    for e in estimates:
        pod = pods.get(e.pod)
        if pod is None:
            continue
        event(pod, COST_ESTIMATE, e.describe(), "Normal" if e.launches else "Warning")
        value = e.annotation()
        if annotate is not None and pod.annotations.get(ann.COST_ESTIMATE) != value:
            annotate(pod.namespace, pod.name, {ann.COST_ESTIMATE: value})
