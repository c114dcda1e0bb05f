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
        return []  # the common case: no pod need be grouped by node for it
    by_node = pods_by_node(snapshot.pods)
    out = []
    for node in snapshot.nodes:
        if node.managed and node.provider_id and node.provider_id in provider_ids:
            pods = tuple(p.key for p in workload(by_node.get(node.name, ())) if not untouchable(p))
            out.append(Removal(node.name, "spot interruption", not pods, pods, Method.INTERRUPTED))
    return sorted(out, key=lambda r: r.node)
