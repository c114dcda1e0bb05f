"""The emulated scheduler's picture of the cluster, kept from one scheduling pass to the next.

kube-scheduler does not rebuild its nodes' state for every pod: its cache follows the informers' events and
each cycle works on a copy that only the changed nodes are refreshed in. The emulated cluster does the same:
one :class:`~autoscaler.core.placement.scheduler.ClusterScheduler` lives as long as the cluster, the pods a
pass binds are counted as it binds them, and before the next pass only the nodes that changed (a Node
replaced, created or deleted; a pod that left, arrived or changed there; a KAI reservation pod released) are
taken out and put back as they now are. What changed is found by comparing objects: Nodes and pods are
immutable values, so one that was replaced is a different object, however it was replaced.
"""

from __future__ import annotations

from collections.abc import Mapping

from autoscaler.core.model import Node, Pod
from autoscaler.core.placement.scheduler import ClusterScheduler
from autoscaler.sim.pods import SimPod

__all__ = ["SchedulerView"]


def eligible(node: Node) -> bool:
    """Whether pods may be bound to ``node`` (the others still count as topology domains)."""
    return node.ready and not node.deleting


class SchedulerView:
    """A :class:`ClusterScheduler` kept in step with the cluster's Nodes, pods and KAI reservation pods."""

    def __init__(self, namespaces: Mapping[str, Mapping[str, str]]) -> None:
        self.namespaces = namespaces
        self._sched: ClusterScheduler | None = None
        # What the scheduler counts, as it was when last brought up to date: each Node, and each pod by key.
        self._nodes: dict[str, Node] = {}
        self._pods: dict[str, Pod] = {}
        self._reserved: dict[str, Pod] = {}

    def sync(
        self, nodes: Mapping[str, Node], pods: Mapping[str, SimPod], reservations: Mapping[str, Pod]
    ) -> tuple[ClusterScheduler, bool]:
        """The scheduler as the cluster now is, and whether anything changed since the last pass ended."""
        if self._sched is None:
            bound = [sp.pod for sp in pods.values() if sp.pod.node_name]
            self._sched = ClusterScheduler(
                nodes.values(),
                (*bound, *reservations.values()),
                namespaces=self.namespaces,
                eligible=[n.name for n in nodes.values() if eligible(n)],
            )
            self.settle(nodes, pods, reservations)
            return self._sched, True
        stale: set[str] = set()
        changed = False
        for name, node in nodes.items():
            if self._nodes.get(name) is not node:
                stale.add(name)
        stale.update(name for name in self._nodes if name not in nodes)
        for key, sp in pods.items():
            seen = self._pods.get(key)
            if seen is not sp.pod:
                changed = True
                if seen is not None and seen.node_name:
                    stale.add(seen.node_name)
                if sp.pod.node_name:
                    stale.add(sp.pod.node_name)
        for key, p in self._pods.items():
            if key not in pods:
                changed = True
                if p.node_name:
                    stale.add(p.node_name)
        for key, r in reservations.items():
            if self._reserved.get(key) is not r:
                stale.add(r.node_name)
        stale.update(r.node_name for key, r in self._reserved.items() if key not in reservations)
        if stale:
            self._refresh(stale, nodes, pods, reservations)
        self.settle(nodes, pods, reservations)
        return self._sched, changed or bool(stale)

    def _refresh(
        self,
        names: set[str],
        nodes: Mapping[str, Node],
        pods: Mapping[str, SimPod],
        reservations: Mapping[str, Pod],
    ) -> None:
        """Take the ``names`` nodes out of the scheduler and put back those that still exist, as they are."""
        assert self._sched is not None
        on: dict[str, list[Pod]] = {name: [] for name in names}
        for sp in pods.values():
            if sp.pod.node_name in on:
                on[sp.pod.node_name].append(sp.pod)
        for r in reservations.values():
            if r.node_name in on:
                on[r.node_name].append(r)
        for name in sorted(names):
            if name in self._nodes:
                self._sched.remove_node(name)
        for name, node in nodes.items():
            if name in names:
                self._sched.add_node(node, on[name], eligible=eligible(node))

    def settle(
        self, nodes: Mapping[str, Node], pods: Mapping[str, SimPod], reservations: Mapping[str, Pod]
    ) -> None:
        """The scheduler now counts the cluster as it is (after a pass: what it bound, it counted)."""
        self._nodes = dict(nodes)
        self._pods = {key: sp.pod for key, sp in pods.items()}
        self._reserved = dict(reservations)
