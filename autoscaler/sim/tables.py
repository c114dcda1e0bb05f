"""The emulated cluster's Nodes and pods, kept as the API server's informers keep them: by name, in the order they
were created, with the indexes its readers need and a note of what changed since the scheduler last looked.

With thousands of Nodes and pods, every step used to walk all of them several times: to find the pods still
waiting for a node, the pods bound to a node being deleted, the next pod to finish, and what the scheduler has
not seen yet. Each table is a ``dict`` (so everything that reads the cluster reads it as before, in the same
order) that keeps these indexes up to date as entries are written and deleted. A pod's node changes in place
(``SimPod.pod`` is replaced when it is bound): the cluster tells its table with :meth:`PodTable.bound`.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Any

from autoscaler.core.model import Node
from autoscaler.sim.pods import SimPod

__all__ = ["NodeTable", "PodTable"]


class NodeTable(dict[str, Node]):
    """Nodes by name; ``changed`` names those written or deleted since the scheduler last took them, however
    they were written (the cluster's methods or a plain assignment)."""

    def __init__(self) -> None:
        super().__init__()
        self.changed: set[str] = set()
        self._seq: dict[str, int] = {}  # each name's place in the dict's order
        self._count = itertools.count()

    def __setitem__(self, name: str, node: Node) -> None:
        if name not in self._seq:
            self._seq[name] = next(self._count)
        super().__setitem__(name, node)
        self.changed.add(name)

    def __delitem__(self, name: str) -> None:
        super().__delitem__(name)
        del self._seq[name]
        self.changed.add(name)

    def pop(self, name: str, *default: Any) -> Any:
        if name not in self:
            return super().pop(name, *default)
        node = super().pop(name)
        del self._seq[name]
        self.changed.add(name)
        return node

    def in_order(self, names: set[str]) -> list[str]:
        """Those of ``names`` that are Nodes here, in the order the table lists them."""
        seq = self._seq
        return sorted((n for n in names if n in seq), key=seq.__getitem__)


class PodTable(dict[str, SimPod]):
    """Pods by key, with those waiting for a node, those bound to each node, and when each bound one finishes.

    ``moved`` names the nodes whose bound pods changed (one left, arrived or was replaced there) since the
    scheduler last took them; a pod bound by the scheduler's own pass is not among them (it counted it).
    ``generation`` counts the changes to which pods are bound: what is summed over them holds while it stays."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting: dict[str, SimPod] = {}  # in the table's order
        self.moved: set[str] = set()
        self.generation = 0
        self._on: dict[str, dict[str, SimPod]] = {}
        self._seq: dict[str, int] = {}  # each key's place in the dict's order
        self._count = itertools.count()
        self._ends: list[tuple[float, int, SimPod]] = []  # (when it finishes, a tie-break, the pod), a heap
        self._pushed = itertools.count()

    def __setitem__(self, key: str, sp: SimPod) -> None:
        old = self.get(key)
        if old is None:
            self._seq[key] = next(self._count)
        else:
            self._unindex(old)
        super().__setitem__(key, sp)
        self._index(sp)
        if sp.pod.node_name:
            self.moved.add(sp.pod.node_name)

    def __delitem__(self, key: str) -> None:
        sp = self[key]
        super().__delitem__(key)
        self._unindex(sp)
        del self._seq[key]

    def pop(self, key: str, *default: Any) -> Any:
        if key not in self:
            return super().pop(key, *default)
        sp = self[key]
        del self[key]
        return sp

    def bound(self, sp: SimPod) -> None:
        """``sp``, waiting until now, was just bound by the scheduler (its pod names the node, ``started`` is
        set)."""
        self.waiting.pop(sp.pod.key, None)
        self._index(sp)

    def replaced(self, sp: SimPod) -> None:
        """``sp``'s pod was replaced by one that differs in no field the indexes go by (its labels or
        annotations): the scheduler takes its node again."""
        if sp.pod.node_name:
            self.moved.add(sp.pod.node_name)

    def on(self, node: str) -> list[SimPod]:
        """The pods bound to ``node``, in the table's order."""
        here = self._on.get(node)
        if not here:
            return []
        return sorted(here.values(), key=lambda sp: self._seq[sp.pod.key])

    def due(self, now: float) -> list[SimPod]:
        """The bound pods whose containers exited by ``now``, in the table's order."""
        ends = self._ends
        found: list[SimPod] = []
        while ends and ends[0][0] <= now:
            sp = heapq.heappop(ends)[2]
            if self._holds(sp):
                found.append(sp)
        found.sort(key=lambda sp: self._seq[sp.pod.key])
        return found

    def next_end(self) -> float | None:
        """When the next bound pod's containers exit."""
        ends = self._ends
        while ends and not self._holds(ends[0][2]):
            heapq.heappop(ends)
        return ends[0][0] if ends else None

    def _holds(self, sp: SimPod) -> bool:
        return self.get(sp.pod.key) is sp

    def _index(self, sp: SimPod) -> None:
        node = sp.pod.node_name
        key = sp.pod.key
        if not node:
            self.waiting[key] = sp
            return
        self.generation += 1
        self._on.setdefault(node, {})[key] = sp
        if sp.started is not None:
            heapq.heappush(self._ends, (sp.started + sp.duration, next(self._pushed), sp))

    def _unindex(self, sp: SimPod) -> None:
        node = sp.pod.node_name
        key = sp.pod.key
        if not node:
            self.waiting.pop(key, None)
            return
        self.generation += 1
        here = self._on.get(node)
        if here is not None:
            here.pop(key, None)
            if not here:
                del self._on[node]
        self.moved.add(node)
