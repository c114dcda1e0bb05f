"""The snapshot as it will be: Nodes about to go, labels about to land. Pure functions over the model."""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import replace

from autoscaler.core.census import PodCensus
from autoscaler.core.model import TAINT_DISRUPTED, Condition, Pod, Snapshot, Taint
from autoscaler.core.offering import Instance

INTERRUPTED_MESSAGE = "0/1 nodes are available: 1 node(s) had untolerated taint {tidal.dev/disrupted: }."
# How long a pod has been bound to a Node the snapshot lacks before its Node counts as gone. Shorter than that,
# the Node may only be new to tidal's cache (a pod can be seen bound before its Node is); the pods of a Node
# that was deleted stay bound to it until kube-controller-manager's pod GC removes them, a minute or so.
ORPHANED_AFTER = 30.0


def without_dead_nodes(
    snapshot: Snapshot, instances: Sequence[Instance], now: float, *, census: PodCensus | None = None
) -> Snapshot:
    """The snapshot without Nodes whose instance the cloud lists as terminated (a reclaimed spot node lingers
    NotReady until it is cleaned up): they hold no GPUs toward the limits, and their pods are demand now. So
    are the pods still bound to a Node that is gone from the cluster: the node planned for them is not empty,
    and it is not bought twice when their controllers make them again. ``census`` is that of the snapshot's
    pods, when the caller has it."""
    terminated = {i.provider_id for i in instances if i.state == "terminated" and i.provider_id}
    dead = (
        {n.name for n in snapshot.nodes if n.managed and n.provider_id in terminated} if terminated else set()
    )
    orphaned = _orphaned(snapshot, now, census)
    if not dead and not orphaned:
        return snapshot
    gone = without_nodes(snapshot, dead | orphaned, now)
    return replace(gone, nodes=tuple(n for n in gone.nodes if n.name not in dead))


def _orphaned(snapshot: Snapshot, now: float, census: PodCensus | None = None) -> set[str]:
    """Names of the Nodes that workload pods were bound to at least ``ORPHANED_AFTER`` ago and that the
    snapshot no longer has."""
    if census is not None and census.describes(snapshot.pods):
        names: Set[str] = census.bound_to
    else:
        names = {p.node_name for p in snapshot.pods if p.node_name}
    if not names:
        return set()
    missing = names - {n.name for n in snapshot.nodes}
    if not missing:
        return set()
    return {
        p.node_name
        for p in snapshot.pods
        if p.node_name in missing
        and not (p.daemonset or p.mirror or p.finished)
        and _bound_since(p) <= now - ORPHANED_AFTER
    }


def _bound_since(pod: Pod) -> float:
    """When the pod was bound, as its ``PodScheduled=True`` condition says, else when it was made."""
    c = pod.scheduled
    if c is not None and c.status == "True" and c.last_transition is not None:
        return c.last_transition
    return pod.created


def without_nodes(snapshot: Snapshot, names: set[str], now: float) -> Snapshot:
    """The snapshot as it will be once ``names`` are gone: cordoned, their workload pods pending again."""
    nodes = tuple(
        replace(n, unschedulable=True, taints=(*n.taints, Taint(TAINT_DISRUPTED, "", "NoSchedule")))
        if n.name in names
        else n
        for n in snapshot.nodes
    )
    pods = tuple(
        replace(
            p,
            node_name="",
            phase="Pending",
            scheduled=Condition("False", "Unschedulable", INTERRUPTED_MESSAGE, now),
        )
        if p.node_name in names and not p.daemonset and not p.mirror and not p.finished
        else p
        for p in snapshot.pods
    )
    return replace(snapshot, nodes=nodes, pods=pods)


def with_labels(snapshot: Snapshot, labels: Mapping[str, Mapping[str, str]]) -> Snapshot:
    """The snapshot with ``labels`` merged into the named Nodes' labels."""
    nodes = tuple(
        replace(n, labels={**n.labels, **labels[n.name]}) if n.name in labels else n for n in snapshot.nodes
    )
    return replace(snapshot, nodes=nodes)
