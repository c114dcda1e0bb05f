"""One pod's whole story in a plan, for ``tidal plan --explain POD``: what it asks for, the filters on its way
to the offerings, the cheapest candidates, and where it went or why not. Pure, like the plan."""

from __future__ import annotations

from autoscaler.core.demand import Demand, pod_queue
from autoscaler.core.fit import AnnotationError, pod_constraints
from autoscaler.core.model import Pod, Snapshot
from autoscaler.core.placement.fits import request
from autoscaler.core.planning.decisions import BIN_PACKING, Launch, LaunchPlan
from autoscaler.core.planning.holds import holds
from autoscaler.core.planning.newnodes import describe
from autoscaler.core.planning.offerings import OfferingIndex
from autoscaler.core.planning.scaleup import pod_mode
from autoscaler.core.planning.why import PodStory, mode_reason, pod_candidates, pod_steps
from autoscaler.core.words import count

__all__ = ["pod_story"]


def _share(pod: Pod) -> str:
    s = pod.gpu_share
    if s is None:
        return ""
    part = f"{s.portion:g} of a GPU" if s.portion is not None else f"{s.memory_mib} MiB of GPU memory"
    return f", {part}" + (f" on each of {s.devices} GPUs" if s.devices > 1 else "") + " (KAI GPU sharing)"


def _launch_of(key: str, launch: LaunchPlan) -> Launch | None:
    return next((la for la in launch.launches if key in la.pods), None)


def _outcome(pod: Pod, demand: Demand, launch: LaunchPlan, found: Launch | None) -> str:
    key = pod.key
    if pod.phase != "Pending":
        return f"phase {pod.phase}: tidal plans only for pending pods"
    ignored = next((i for i in [*demand.ignored, *launch.absorbed] if i.pod == key), None)
    if ignored is not None:
        return f"needs no new node ({ignored.reason.value}): {ignored.detail}"
    if found is not None:
        o = found.offering
        others = len(found.pods) - 1
        return (
            f"launches {o.instance_type} in {o.zone or 'any zone'} ({o.capacity_type}, ${o.price:.4f}/h), a "
            f"{found.mode} node" + (f" shared with {count(others, 'other pod')}" if others else "")
        )
    unplaced = next((u for u in launch.unplaced if u.pod == key), None)
    if unplaced is not None:
        return f"cannot be placed: {unplaced.reason}"
    return "not planned"


def pod_story(
    key: str, snapshot: Snapshot, demand: Demand, launch: LaunchPlan, index: OfferingIndex
) -> PodStory:
    """The story of the pod named ``key`` (namespace/name) in a plan of ``snapshot``."""
    pod = next((p for p in snapshot.pods if p.key == key), None)
    if pod is None:
        return PodStory(key, "", "", "not in the snapshot")
    groups = {(g.namespace, g.name): g for g in snapshot.podgroups}
    found = _launch_of(key, launch)
    story = PodStory(
        key,
        describe(pod.requests) + _share(pod),
        pod_queue(pod, groups),
        _outcome(pod, demand, launch, found),
        offerings=len(index.every()),
    )
    if pod.phase != "Pending" or pod.node_name:
        return story
    c = demand.constraints.get(key)
    if c is None:
        try:
            c = pod_constraints(pod, index.config)
        except AnnotationError:
            return story
    mode = found.mode if found is not None else pod_mode(pod, c, index)
    req = request(pod)
    steps, fitting = pod_steps(c, index, mode == BIN_PACKING, req)
    unplaced = next((u for u in launch.unplaced if u.pod == key), None)
    return PodStory(
        story.pod,
        story.requests,
        story.queue,
        story.outcome,
        mode=mode,
        mode_reason=mode_reason(pod, c, index.config),
        capacity_types=c.capacity_types,
        offerings=story.offerings,
        steps=steps,
        candidates=pod_candidates(fitting, lambda o: holds(pod, c, o, index, mode), found),
        nearest=unplaced.nearest if unplaced is not None else "",
        launch=found.offering if found is not None else None,
        fallbacks=found.alternatives if found is not None else (),
        launch_why=found.why if found is not None else None,
        launch_pods=len(found.pods) if found is not None else 0,
    )
