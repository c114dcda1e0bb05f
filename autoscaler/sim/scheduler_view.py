"""The emulated scheduler's picture of the cluster, kept from one scheduling pass to the next.

kube-scheduler does not rebuild its nodes' state for every pod: its cache follows the informers' events and
each cycle works on a copy that only the changed nodes are refreshed in. The emulated cluster does the same:
one :class:`~autoscaler.core.placement.scheduler.ClusterScheduler` lives as long as the cluster, the pods a
pass binds are counted as it binds them, and before the next pass only the nodes that changed (a Node
replaced, created or deleted; a pod that left, arrived or changed there; a KAI reservation pod released) are
taken out and put back as they now are. The cluster's tables note which Nodes were written and which nodes'
pods changed (:mod:`autoscaler.sim.tables`), so finding them costs what changed, not the cluster's size.

The pass goes through the nodes fullest first; that order is kept too: only the nodes whose room changed since
the last pass (by a binding or a refresh) move in it.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable, Mapping, Sequence

from autoscaler.core.model import Node, Pod
from autoscaler.core.placement.scheduler import ClusterScheduler
from autoscaler.sim.tables import NodeTable, PodTable

__all__ = ["Room", "SchedulerView"]

Room = tuple[int, int, str]
"""A node's place in the pass's order: its free GPUs, its free CPU (millicores), its name."""


def eligible(node: Node) -> bool:
    """Whether pods may be bound to ``node`` (the others still count as topology domains)."""
    return node.ready and not node.deleting


class _NotingScheduler(ClusterScheduler):
    """A :class:`ClusterScheduler` that notes the nodes whose room may have changed: added, removed or bound
    to (a trial taken back restores room on nodes it bound to, so they are noted already)."""

    def __init__(
        self,
        nodes: Iterable[Node],
        pods: Iterable[Pod],
        *,
        namespaces: Mapping[str, Mapping[str, str]] | None = None,
        eligible: Iterable[str] | None = None,
    ) -> None:
        self.noted: set[str] = set()
        super().__init__(nodes, pods, namespaces=namespaces, eligible=eligible)

    def add_node(self, node: Node, pods: Iterable[Pod], *, eligible: bool = True) -> None:
        super().add_node(node, pods, eligible=eligible)
        self.noted.add(node.name)

    def remove_nodes(self, names: Sequence[str]) -> None:
        super().remove_nodes(names)
        self.noted.update(names)

    def bind(self, pod: Pod, node: str) -> None:
        super().bind(pod, node)
        self.noted.add(node)


class SchedulerView:
    """A :class:`ClusterScheduler` kept in step with the cluster's Nodes, pods and KAI reservation pods."""

    def __init__(self, namespaces: Mapping[str, Mapping[str, str]]) -> None:
        self.namespaces = namespaces
        self._sched: _NotingScheduler | None = None
        self._held: set[str] = set()  # the nodes the scheduler holds (those pods may be bound to or not)
        self._reserved: dict[str, Pod] = {}  # the reservation pods it counts, by key
        # Every node pods may be bound to, fullest first (see ``by_room``), and each one's place there.
        self._room: list[Room] = []
        self._room_of: dict[str, Room] = {}

    def sync(
        self, nodes: NodeTable, pods: PodTable, reservations: Mapping[str, Pod]
    ) -> tuple[ClusterScheduler, bool]:
        """The scheduler as the cluster now is, and whether any node changed since the last pass ended."""
        if self._sched is None:
            bound = [sp.pod for sp in pods.values() if sp.pod.node_name]
            self._sched = _NotingScheduler(
                nodes.values(),
                (*bound, *reservations.values()),
                namespaces=self.namespaces,
                eligible=[n.name for n in nodes.values() if eligible(n)],
            )
            self._held = set(nodes)
            self.settle(nodes, pods, reservations)
            return self._sched, True
        stale = nodes.changed | pods.moved
        if reservations or self._reserved:
            for key, r in reservations.items():
                if self._reserved.get(key) is not r:
                    stale.add(r.node_name)
            stale.update(r.node_name for key, r in self._reserved.items() if key not in reservations)
        if stale:
            self._refresh(stale, nodes, pods, reservations)
        self.settle(nodes, pods, reservations)
        return self._sched, bool(stale)

    def _refresh(
        self, names: set[str], nodes: NodeTable, pods: PodTable, reservations: Mapping[str, Pod]
    ) -> None:
        """Take the ``names`` nodes out of the scheduler and put back those that still exist, as they are."""
        assert self._sched is not None
        on: dict[str, list[Pod]] = {name: [sp.pod for sp in pods.on(name)] for name in names}
        for r in reservations.values():
            if r.node_name in on:
                on[r.node_name].append(r)
        leaving = sorted(name for name in names if name in self._held)
        self._sched.remove_nodes(leaving)
        self._held.difference_update(leaving)
        for name in nodes.in_order(names):
            node = nodes[name]
            self._sched.add_node(node, on[name], eligible=eligible(node))
            self._held.add(name)

    def settle(self, nodes: NodeTable, pods: PodTable, reservations: Mapping[str, Pod]) -> None:
        """The scheduler now counts the cluster as it is (after a pass: what it bound, it counted)."""
        nodes.changed.clear()
        pods.moved.clear()
        self._reserved = dict(reservations)

    def by_room(self) -> list[Room]:
        """The nodes pods may be bound to, fullest first: by free GPUs, then free CPU, then name, as the
        scheduler counts them now. The list is the view's own, kept for the next pass: read it, do not change
        it; a pass that binds pods leaves it as it was when the pass began."""
        sched = self._sched
        assert sched is not None
        noted = sched.noted
        if not noted:
            return self._room
        room, room_of, bins = self._room, self._room_of, sched.bins
        if len(noted) * 8 > len(room):  # many moved: sorting anew costs less than moving each
            room_of.clear()
            for name, b in bins.items():
                room_of[name] = (b.free.gpus, b.free.cpu, name)
            self._room = sorted(room_of.values())
        else:
            for name in noted:
                old = room_of.pop(name, None)
                if old is not None:
                    del room[bisect_left(room, old)]
                kept = bins.get(name)
                if kept is not None:
                    key = room_of[name] = (kept.free.gpus, kept.free.cpu, name)
                    insort(room, key)
        noted.clear()
        return self._room
