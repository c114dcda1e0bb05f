"""The snapshot as it will be: Nodes about to go, labels about to land. Pure functions over the model."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from autoscaler.core.model import TAINT_DISRUPTED, Condition, Snapshot, Taint
from autoscaler.core.offering import Instance

INTERRUPTED_MESSAGE = "0/1 nodes are available: 1 node(s) had untolerated taint {tidal.dev/disrupted: }."


def without_dead_nodes(snapshot: Snapshot, instances: Sequence[Instance], now: float) -> Snapshot:
    """The snapshot without Nodes whose instance the cloud lists as terminated (a reclaimed spot node lingers
    NotReady until it is cleaned up): they hold no GPUs toward the limits, and their pods are demand now."""
    terminated = {i.provider_id for i in instances if i.state == "terminated" and i.provider_id}
    dead = {n.name for n in snapshot.nodes if n.managed and n.provider_id in terminated}
    if not dead:
        return snapshot
    gone = without_nodes(snapshot, dead, now)
    return replace(gone, nodes=tuple(n for n in gone.nodes if n.name not in dead))


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
