"""Interrupted: the cloud is reclaiming the node (a spot interruption notice). Nothing waits for a
replacement, no disruption budget holds it back: its pods are evicted at once (through the Eviction API, so
their PodDisruptionBudgets still count) and become demand in the same reconcile. A pod that must never be
evicted (do-not-evict, one tidal cannot read) is not: it is left to the cloud, and so is the node."""

from __future__ import annotations

from collections.abc import Collection

from autoscaler.core.disruption.method import Method
from autoscaler.core.disruption.protection import untouchable, workload
from autoscaler.core.model import Snapshot
from autoscaler.core.planning.cluster import pods_by_node
from autoscaler.core.planning.decisions import Removal

__all__ = ["interrupted"]


def interrupted(snapshot: Snapshot, provider_ids: Collection[str]) -> list[Removal]:
    """The managed nodes whose instances the cloud is reclaiming, with the pods to evict."""
    if not provider_ids:
        return []  # no notice: the cluster's pods need no grouping
    doomed = [n for n in snapshot.nodes if n.managed and n.provider_id and n.provider_id in provider_ids]
    if not doomed:
        return []
    by_node = pods_by_node(snapshot.pods)
    out = []
    for node in doomed:
        pods = tuple(p.key for p in workload(by_node.get(node.name, ())) if not untouchable(p))
        out.append(Removal(node.name, "spot interruption", not pods, pods, Method.INTERRUPTED))
    return sorted(out, key=lambda r: r.node)
