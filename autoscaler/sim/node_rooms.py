"""The baselines' picture of the nodes that exist, kept from one plan to the next.

At every reconcile a baseline builds the placement engine of the cluster as it is, as
:func:`autoscaler.core.planning.cluster.build_engine` does: each node's room for pending pods
(:func:`~autoscaler.core.planning.cluster.node_bin`: its allocatable less its pods, the DaemonSets still to
land, its GPU devices), then the launches without a Node yet. In a cluster of thousands of nodes almost all of
them are, from one reconcile to the next, the same Node object with the same pod objects on it: Nodes and pods
are immutable values, so one that changed is a different object. :class:`NodeRooms` keeps each node's room
with what it was worked out from and works it out again only for a node that changed, or for every node when
the offerings, the config or the DaemonSets did. The engine is new at every plan (a plan places pods into it);
only the rooms it starts from are kept, each handed out as a copy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from autoscaler.core.model import DaemonSet, Node, Pod, Snapshot
from autoscaler.core.placement.bins import Bin
from autoscaler.core.placement.engine import Engine
from autoscaler.core.planning.cluster import launching_bin, node_bin, pods_by_node
from autoscaler.core.planning.decisions import Launching
from autoscaler.core.planning.offerings import OfferingIndex

__all__ = ["NodeRooms"]


def _fresh(b: Bin) -> Bin:
    """A copy of ``b`` an engine may fill: nothing it changes is shared with ``b``. Built field by field
    (``dataclasses.replace`` looks every field up again, for every node of every plan)."""
    return Bin(
        b.name,
        b.kind,
        dict(b.labels),
        b.taints,
        b.unschedulable,
        b.free,
        b.used,
        list(b.ports),
        list(b.pods),
        b.mode,
        b.gang,
        list(b.options),
        b.classes,
        b.gpus,
        b.vcpu,
        dict(b.settled),
        b.devices,
        dict(b._values),
    )


def _same(a: Sequence[Pod], b: Sequence[Pod]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


class NodeRooms:
    """Each node's room for pending pods, remembered from the last plan while it holds."""

    def __init__(self) -> None:
        # What every room was worked out with: the offerings' index (offerings and config) and the DaemonSets.
        self._basis: tuple[OfferingIndex, tuple[DaemonSet, ...]] | None = None
        # node name -> (the Node, its pods, its room or None when no pod may go there)
        self._rooms: dict[str, tuple[Node, tuple[Pod, ...], Bin | None]] = {}
        self.worked_out = 0  # rooms worked out (not reused) over the planner's life

    def engine(
        self,
        snapshot: Snapshot,
        index: OfferingIndex,
        *,
        launching: Sequence[Launching] = (),
        by_node: Mapping[str, list[Pod]] | None = None,
    ) -> Engine:
        """The placement engine ``build_engine(snapshot, index, launching=..., by_node=...)`` would build."""
        by_node = by_node if by_node is not None else pods_by_node(snapshot.pods)
        basis = self._basis
        if basis is None or basis[0] is not index or basis[1] != snapshot.daemonsets:
            self._rooms = {}
            self._basis = (index, tuple(snapshot.daemonsets))
        rooms: dict[str, tuple[Node, tuple[Pod, ...], Bin | None]] = {}
        engine = Engine(index, namespaces=snapshot.namespaces)
        for node in sorted(snapshot.nodes, key=lambda n: n.name):
            pods = by_node.get(node.name, ())
            kept = self._rooms.get(node.name)
            if kept is not None and kept[0] is node and _same(kept[1], pods):
                rooms[node.name] = kept
                room = None if kept[2] is None else _fresh(kept[2])
            else:
                room = node_bin(node, pods, snapshot, index)
                self.worked_out += 1
                rooms[node.name] = (node, tuple(pods), None if room is None else _fresh(room))
            if room is None:
                engine.add_topology_node(node.name, node.labels, node.taints, pods)
            else:
                engine.add_node(room, pods)
        self._rooms = rooms  # nodes gone are forgotten
        for la in launching:
            engine.add_node(launching_bin(la, index))
        return engine
