"""The placement filters that read only a pod's constraints and a node's labels, taints and name, with their
verdicts kept: of the thousands of nodes a pod is tried on, most are alike in all a verdict reads."""

from __future__ import annotations

from autoscaler.core.fit import Constraints
from autoscaler.core.placement import filters
from autoscaler.core.placement.bins import Bin, Kind
from autoscaler.core.placement.reasons import Rejection

__all__ = ["StaticVerdicts"]


class StaticVerdicts:
    """Static filter verdicts, per node and constraints, and per what those constraints read of a node."""

    def __init__(self) -> None:
        # Per node name, then per constraints: forgotten with the node when it leaves (see forget).
        self._by_node: dict[str, dict[Constraints, Rejection | None]] = {}
        # The label keys each constraints read, and whether a term names nodes; verdicts by what they read.
        self._reads: dict[Constraints, tuple[tuple[str, ...], bool]] = {}
        self._verdicts: dict[tuple[object, ...], Rejection | None] = {}

    def verdict(self, c: Constraints, bin: Bin) -> Rejection | None:
        """The filters that read only the pod's constraints and the node's labels, taints and name."""
        verdicts = self._by_node.get(bin.name)
        if verdicts is None:
            verdicts = self._by_node[bin.name] = {}
        if c not in verdicts:
            verdicts[c] = self._verdict_of(c, bin)
        return verdicts[c]

    def adopt(self, name: str, verdicts: dict[Constraints, Rejection | None]) -> None:
        """Node ``name``'s verdicts are kept in ``verdicts`` (by constraints), filled as they are worked out:
        a caller that hands the same dict to the next engine for the same node (the same labels, taints,
        cordon and kind) has them worked out once for both."""
        self._by_node[name] = verdicts

    def forget(self, name: str) -> None:
        """What was worked out about node ``name`` (it leaves the cluster)."""
        self._by_node.pop(name, None)

    def _verdict_of(self, c: Constraints, bin: Bin) -> Rejection | None:
        """The static verdict from what it reads of the node: the values of the labels the constraints name,
        its taints, whether it is cordoned, and its name only when a term asks for one. Nodes alike in
        those (of one instance type and zone, say) get one verdict, worked out once."""
        reads = self._reads.get(c)
        if reads is None:
            read = {k for k, _ in c.node_selector} | {r.key for term in c.affinity for r in term.expressions}
            reads = self._reads[c] = (tuple(sorted(read)), any(term.fields for term in c.affinity))
        keys, names = reads
        name = bin.name if bin.kind == Kind.NODE else None
        labels = bin.labels
        key = (
            c,
            tuple(labels.get(k) for k in keys),
            bin.taints,
            bin.unschedulable,
            name if names else name is not None,
        )
        if key in self._verdicts:
            return self._verdicts[key]
        found = self._verdicts[key] = filters.static(
            node_selector=dict(c.node_selector),
            terms=c.affinity,
            tolerations=c.tolerations,
            labels=labels,
            taints=bin.taints,
            unschedulable=bin.unschedulable,
            name=name,
        )
        return found
