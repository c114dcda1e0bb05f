"""Each node's room for pending pods, kept from one plan to the next.

At every plan the placement engine starts from the cluster as it is, as
:func:`autoscaler.core.planning.cluster.build_engine` builds it: each node's room for pending pods
(:func:`~autoscaler.core.planning.cluster.node_bin`: its allocatable less its pods, the DaemonSets still to
land, its GPU devices), then the launches without a Node yet. In a cluster of thousands of nodes almost all of
them are, from one reconcile to the next, the same Node object with the same pod objects on it: Nodes and pods
are immutable values, so one that changed is a different object. :class:`NodeRooms` keeps each node's room
with what it was worked out from and works it out again only for a node that changed, or for every node when
the offerings, the config or the DaemonSets did.

It keeps the engine too. Everything a plan does in an engine goes through the engine's journal (a gang taken
back, a trial move of a node's pods), so the plan as a whole is one more mark: before the next plan it is
rolled back, the nodes that changed are taken out and put in again as they now are, and the engine serves
again, in the order and with the counts an engine built afresh would have. An engine whose plan left counts
a fresh one would not have (a spread or affinity group, made as pods with such constraints are checked) is
built afresh instead, each kept room lent to it (:meth:`~autoscaler.core.placement.bins.Bin.own`): a bin no
plan changed is lent again as it is, one a plan changed is made anew from the kept room.

The controller and the simulator's baselines each hold one and hand it to the plan
(:class:`~autoscaler.core.planning.planner.PlanInput` ``rooms``), as they hand it the offerings' memo: what it
keeps is what the plan would work out again, so the plan stays a function of its input.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from operator import is_

from autoscaler.core.fit import Constraints
from autoscaler.core.model import DaemonSet, Node, Pod, Snapshot
from autoscaler.core.placement.bins import Bin
from autoscaler.core.placement.engine import Engine
from autoscaler.core.placement.reasons import Rejection
from autoscaler.core.planning.cluster import launching_bin, node_bin, node_usage, pods_by_node
from autoscaler.core.planning.decisions import NO_USAGE, Launching, Usage
from autoscaler.core.planning.node_facts import NodeFacts
from autoscaler.core.planning.offerings import OfferingIndex

__all__ = ["NodeRooms"]


def _fresh(b: Bin) -> Bin:
    """A copy of ``b`` an engine may fill: nothing it changes is shared with ``b``. Made field by field, as
    ``dataclasses.replace`` would, at a fraction of its cost (it runs once per node and plan)."""
    return Bin(
        name=b.name,
        kind=b.kind,
        labels=dict(b.labels),
        taints=b.taints,
        unschedulable=b.unschedulable,
        free=b.free,
        used=b.used,
        ports=list(b.ports),
        pods=list(b.pods),
        mode=b.mode,
        gang=b.gang,
        options=list(b.options),
        classes=b.classes,
        gpus=b.gpus,
        vcpu=b.vcpu,
        settled=dict(b.settled),
        devices=b.devices,
        _values=dict(b._values),
    )


def _lent(b: Bin) -> Bin:
    """``b`` for an engine to fill, lending it ``b``'s lists and dicts: the engine makes them its own
    (:meth:`Bin.own`) before it changes any, and most rooms of a plan never change."""
    return Bin(
        name=b.name,
        kind=b.kind,
        labels=b.labels,
        taints=b.taints,
        unschedulable=b.unschedulable,
        free=b.free,
        used=b.used,
        ports=b.ports,
        pods=b.pods,
        mode=b.mode,
        gang=b.gang,
        options=b.options,
        classes=b.classes,
        gpus=b.gpus,
        vcpu=b.vcpu,
        settled=b.settled,
        devices=b.devices,
        _values=b._values,
        lent=True,
    )


def _same(a: Sequence[Pod], b: Sequence[Pod]) -> bool:
    return len(a) == len(b) and all(map(is_, a, b))


@dataclass(slots=True)
class _Kept:
    """One node's room as worked out, with what it was worked out from."""

    node: Node
    listed: Sequence[Pod]  # the pods as the caller grouped them (the very sequence)
    pods: tuple[Pod, ...]  # the same pods, as they were then
    room: Bin | None  # listing the pods' keys and host ports; None when no pod may go there
    anti_affine: tuple[Pod, ...]  # those of the pods with anti-affinity terms of their own
    facts: NodeFacts  # what scale-down read of the node and its pods, filled as plans read it
    # The static filters' verdicts on the room, by constraints, filled as plans work them out.
    verdicts: dict[Constraints, Rejection | None]
    counted: tuple[int, int, int]  # what the node counts against the limits (cluster.node_usage)
    # The bin lent to the last engine, lent again while no plan changed it (it is then still ``lent``).
    live: Bin | None = None


class NodeRooms:
    """Each node's room for pending pods, remembered from the last plan while it holds."""

    def __init__(self) -> None:
        # What every room was worked out with: the offerings' index (offerings and config) and the DaemonSets.
        self._basis: tuple[OfferingIndex, tuple[DaemonSet, ...]] | None = None
        self._rooms: dict[str, _Kept] = {}
        # The grouping of pods by node of the last plan: given the very same mapping again, each of its
        # sequences is the one seen then (a grouping is shared, never changed), and needs no comparing.
        self._by_node: Mapping[str, Sequence[Pod]] | None = None
        self.worked_out = 0  # rooms worked out (not reused) over the planner's life
        # Scale-down's facts about each node of the last engine built (of its snapshot only), by node name.
        self._facts: dict[str, NodeFacts] = {}
        self.facts: Mapping[str, NodeFacts] = self._facts
        # cluster.usage of the snapshot of the last engine built: its nodes counted against the limits.
        self.usage = NO_USAGE
        # The engine handed out last, and the journal's mark from which its plan's changes are taken back.
        self._engine: tuple[Engine, int] | None = None
        self._launching: list[str] = []  # the names of the launching nodes put in it

    def engine(
        self,
        snapshot: Snapshot,
        index: OfferingIndex,
        *,
        launching: Sequence[Launching] = (),
        by_node: Mapping[str, list[Pod]] | None = None,
    ) -> Engine:
        """The placement engine ``build_engine(snapshot, index, launching=..., by_node=...)`` would build.

        It is the engine handed out last time, once what the plan did in it is taken back and the nodes
        that changed since are put in as they now are: the engine handed out before is not to be used
        again after this call."""
        by_node = by_node if by_node is not None else pods_by_node(snapshot.pods)
        basis = self._basis
        if basis is None or basis[0] is not index or basis[1] != snapshot.daemonsets:
            self._rooms = {}
            self._basis = (index, tuple(snapshot.daemonsets))
            self._engine = None
        engine = self._restarted(snapshot)
        if engine is not None:
            self._refresh(engine, snapshot, index, by_node)
        else:
            engine = self._build(snapshot, index, by_node)
        self._by_node = by_node
        for la in launching:
            engine.add_node(launching_bin(la, index))
        self._launching = [la.name for la in launching]
        # Everything the plan does from here is journalled, and taken back before the next plan.
        self._engine = (engine, engine.journal.mark())
        return engine

    def _build(
        self, snapshot: Snapshot, index: OfferingIndex, by_node: Mapping[str, Sequence[Pod]]
    ) -> Engine:
        """An engine built afresh, from the kept rooms of the nodes that did not change."""
        engine = Engine(index, namespaces=snapshot.namespaces)
        same_grouping = by_node is self._by_node
        rooms: dict[str, _Kept] = {}
        for node in sorted(snapshot.nodes, key=_name):
            pods = by_node.get(node.name, ())
            kept = self._rooms.get(node.name)
            if (
                kept is not None
                and kept.node is node
                and ((same_grouping and kept.listed is pods) or _same(kept.pods, pods))
            ):
                rooms[node.name] = kept
                _put_kept(engine, kept, pods)
            else:
                rooms[node.name] = self._work_out(engine, node, pods, kept, snapshot, index)
        self._keep(rooms)
        return engine

    def _refresh(
        self, engine: Engine, snapshot: Snapshot, index: OfferingIndex, by_node: Mapping[str, Sequence[Pod]]
    ) -> None:
        """The engine of the last plan, its plan taken back, brought to ``snapshot``: out go the nodes gone or
        changed and the last plan's launching ones, in come the changed as they now are, and everything is
        put back in the order of an engine built afresh. The rooms, facts and usage kept change by what
        changed."""
        same_grouping = by_node is self._by_node
        rooms, facts = self._rooms, self._facts
        changed: list[tuple[Node, Sequence[Pod], _Kept | None]] = []
        listed = 0  # kept rooms of nodes still listed
        for node in snapshot.nodes:
            pods = by_node.get(node.name, ())
            kept = rooms.get(node.name)
            if kept is None:
                changed.append((node, pods, kept))
                continue
            listed += 1
            if kept.node is not node:
                changed.append((node, pods, kept))
            elif not (same_grouping and kept.listed is pods):
                was = kept.pods  # the pods' very objects, as _same compares them (inlined: once per node)
                if len(was) != len(pods) or not all(map(is_, was, pods)):
                    changed.append((node, pods, kept))
        leaving = [node.name for node, _, kept in changed if kept is not None]
        if listed < len(rooms):  # some nodes are gone too
            names = {node.name for node in snapshot.nodes}
            leaving += [name for name in rooms if name not in names]
        engine.remove_nodes({*leaving, *self._launching})
        if not changed and not leaving:
            engine.topology.tidy()
            return  # the same rooms: the same facts and usage
        gpus, cpu, managed = self.usage.gpus, self.usage.cpu_milli, self.usage.managed_nodes
        for name in leaving:
            g, c, m = rooms.pop(name).counted
            gpus, cpu, managed = gpus - g, cpu - c, managed - m
            del facts[name]
        for node, pods, kept in changed:
            kept = rooms[node.name] = self._work_out(engine, node, pods, kept, snapshot, index)
            facts[node.name] = kept.facts
            g, c, m = kept.counted
            gpus, cpu, managed = gpus + g, cpu + c, managed + m
        self.usage = Usage(gpus=gpus, cpu_milli=cpu, managed_nodes=managed)
        engine.sort_nodes()

    def _keep(self, rooms: dict[str, _Kept]) -> None:
        """Keep ``rooms`` (by node name), with what the plan reads of them."""
        self._rooms = rooms  # nodes gone are forgotten
        self._facts = {name: kept.facts for name, kept in rooms.items()}
        self.facts = self._facts
        gpus = cpu = managed = 0
        for kept in rooms.values():
            g, c, m = kept.counted
            gpus, cpu, managed = gpus + g, cpu + c, managed + m
        self.usage = Usage(gpus=gpus, cpu_milli=cpu, managed_nodes=managed)

    def _restarted(self, snapshot: Snapshot) -> Engine | None:
        """The engine handed out last, with what its plan did taken back, when it can serve again."""
        if self._engine is None:
            return None
        engine, mark = self._engine
        self._engine = None
        engine.journal.rollback(mark)
        if engine.topology.namespaces != (snapshot.namespaces or {}) or not engine.restart():
            return None
        return engine

    def _work_out(
        self,
        engine: Engine,
        node: Node,
        pods: Sequence[Pod],
        kept: _Kept | None,
        snapshot: Snapshot,
        index: OfferingIndex,
    ) -> _Kept:
        """Node ``node``'s room worked out from its pods, put in ``engine``."""
        room = node_bin(node, pods, snapshot, index)
        self.worked_out += 1
        anti_affine = tuple(p for p in pods if p.pod_anti_affinity)
        # The static verdicts read only the Node (its labels, taints, cordon, whether it is ready).
        same_node = kept is not None and kept.node is node
        verdicts: dict[Constraints, Rejection | None] = (
            kept.verdicts if kept is not None and same_node else {}
        )
        live = None
        if room is None:
            engine.add_topology_node(node.name, node.labels, node.taints, pods, anti_affine=anti_affine)
        else:
            live = engine.add_node(room, pods, anti_affine=anti_affine, verdicts=verdicts)
            room = _fresh(room)  # as the engine listed its pods, before the plan places any
        counted = kept.counted if kept is not None and same_node else node_usage(node)
        return _Kept(node, pods, tuple(pods), room, anti_affine, NodeFacts(), verdicts, counted, live)


def _name(node: Node) -> str:
    return node.name


def _put_kept(engine: Engine, kept: _Kept, pods: Sequence[Pod]) -> None:
    """A node whose room was kept, put in an engine built afresh."""
    if kept.room is None:
        engine.add_topology_node(
            kept.node.name, kept.node.labels, kept.node.taints, pods, anti_affine=kept.anti_affine
        )
        return
    live = kept.live
    if live is None or not live.lent:
        live = kept.live = _lent(kept.room)
    engine.add_node(live, pods, listed=True, anti_affine=kept.anti_affine, verdicts=kept.verdicts)
