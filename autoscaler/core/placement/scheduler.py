"""kube-scheduler's filter phase over a cluster that exists: which nodes could a pending pod be bound to?

The simulator's emulated scheduler and the test suite's stand-in for kube-scheduler both ask this, so their
answers come from the same filters tidal plans with — and those filters are checked against decisions
recorded from a real kube-scheduler (tests/unit/test_scheduler_oracle.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from autoscaler.core.fit import Constraints
from autoscaler.core.model import Node, Pod
from autoscaler.core.placement.bins import Bin, Kind
from autoscaler.core.placement.engine import Engine
from autoscaler.core.placement.fits import Fit
from autoscaler.core.placement.reasons import Rejection
from autoscaler.core.resources import PODS


def scheduling_constraints(pod: Pod) -> Constraints:
    """The part of a pod's constraints kube-scheduler reads (tidal's instance annotations play no part)."""
    return Constraints(
        node_selector=tuple(sorted(pod.node_selector.items())),
        affinity=pod.affinity,
        tolerations=pod.tolerations,
    )


class ClusterScheduler:
    """Nodes and the pods bound to them; answers "may this pod be bound there" and records bindings."""

    def __init__(
        self,
        nodes: Iterable[Node],
        pods: Iterable[Pod],
        *,
        namespaces: Mapping[str, Mapping[str, str]] | None = None,
        eligible: Iterable[str] | None = None,
    ) -> None:
        """``eligible`` names the nodes pods may be bound to (all by default); the others still count as
        topology domains, with their pods."""
        self.engine = Engine(None, namespaces=namespaces)
        by_node: dict[str, list[Pod]] = {}
        for p in pods:
            if p.node_name and not p.finished:
                by_node.setdefault(p.node_name, []).append(p)
        allowed = None if eligible is None else set(eligible)
        self.bins: dict[str, Bin] = {}
        self._constraints: dict[tuple[object, ...], Constraints] = {}
        for node in nodes:
            self.add_node(node, by_node.get(node.name, ()), eligible=allowed is None or node.name in allowed)

    def add_node(self, node: Node, pods: Iterable[Pod], *, eligible: bool = True) -> None:
        """A node with the pods bound to it; one not ``eligible`` takes no pod but counts as a domain."""
        on = [p for p in pods if not p.finished]
        if not eligible:
            self.engine.add_topology_node(node.name, node.labels, node.taints, on)
            return
        free = node.allocatable.remaining((p.requests for p in on), each={PODS: 1000})
        b = Bin(node.name, Kind.NODE, dict(node.labels), node.taints, node.unschedulable, free=free)
        self.bins[node.name] = self.engine.add_node(b, on)

    def remove_node(self, name: str) -> None:
        """A node leaves with its pods (to be added again as it now is, when it changed)."""
        self.remove_nodes((name,))

    def remove_nodes(self, names: Sequence[str]) -> None:
        """:meth:`remove_node` for each of ``names``, in one pass over the engine's nodes."""
        for name in names:
            self.bins.pop(name, None)
        self.engine.remove_nodes(names)

    def _c(self, pod: Pod) -> Constraints:
        key = (tuple(sorted(pod.node_selector.items())), pod.affinity, pod.tolerations)
        c = self._constraints.get(key)
        if c is None:
            c = self._constraints[key] = scheduling_constraints(pod)
        return c

    def rejection(self, pod: Pod, node: str) -> Rejection | None:
        """Why the scheduler would not bind ``pod`` to ``node``, or ``None`` if it would."""
        fit = self.engine.can_add(pod, self._c(pod), self.bins[node])
        return fit if isinstance(fit, Rejection) else None

    def bind(self, pod: Pod, node: str) -> None:
        """``pod`` is now bound to ``node``: its room and its place count for the pods after it."""
        self.engine.add(pod, self._c(pod), self.bins[node], Fit(1), [pod.key])

    def feasible(self, pod: Pod, nodes: Sequence[str]) -> list[str]:
        """The nodes among ``nodes`` ``pod`` could be bound to."""
        return [n for n in nodes if self.rejection(pod, n) is None]

    def mark(self) -> int:
        """Start a trial (a gang's binding); ``rollback`` takes it back, ``commit`` keeps it."""
        return self.engine.journal.mark()

    def rollback(self, mark: int) -> None:
        self.engine.journal.rollback(mark)

    def commit(self, mark: int) -> None:
        self.engine.journal.commit(mark)
