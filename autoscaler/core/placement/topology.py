"""PodTopologySpread and InterPodAffinity: the filters that depend on where other pods are.

Counts are kept per *group*, as kube-scheduler's PreFilter computes them, and updated as the plan places pods,
so the fifth replica of a spread Deployment sees the four placed before it. A group is made the first time a
pod with that constraint is checked (counting every pod placed so far) and kept up to date afterwards.

Nodes are known by name with the labels they have *for certain*: a node still to be launched knows its
hostname at once but its zone only once one is chosen for it (see ``relabel``).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence

from autoscaler.core.model import LABEL_HOSTNAME, Pod, PodAffinityTerm, Taint
from autoscaler.core.placement.journal import Journal
from autoscaler.core.placement.labels import selector_matches
from autoscaler.core.placement.reasons import (
    EXISTING_ANTI_AFFINITY,
    POD_AFFINITY_MISMATCH,
    POD_ANTI_AFFINITY_MISMATCH,
    SPREAD_LABEL_MISSING,
    SPREAD_MISMATCH,
    Filter,
    Rejection,
)
from autoscaler.core.placement.topology_groups import (
    AffinityGroup,
    AntiGroup,
    Pair,
    SpreadGroup,
    SpreadKey,
    TopologyNode,
    term_selects,
    who_of,
)

__all__ = ["Pair", "Topology", "term_selects"]


class Topology:
    """Where pods are, as the inter-pod filters count them; every change goes through the journal."""

    def __init__(
        self, namespaces: Mapping[str, Mapping[str, str]] | None = None, journal: Journal | None = None
    ) -> None:
        self.namespaces: Mapping[str, Mapping[str, str]] = namespaces or {}
        self.journal = journal if journal is not None else Journal()
        self._nodes: dict[str, TopologyNode] = {}
        self._spread: dict[SpreadKey, SpreadGroup] = {}
        self._affinity: dict[tuple[PodAffinityTerm, ...], AffinityGroup] = {}
        self._anti: dict[PodAffinityTerm, AntiGroup] = {}
        # Anti-affinity terms of placed pods, with where those pods are: they keep matching pods away.
        self._held: dict[PodAffinityTerm, Counter[str]] = defaultdict(Counter)
        self._selected: dict[tuple[str, frozenset[tuple[str, str]]], bool] = {}
        # Moves on whenever a group appears or a placed pod brings anti-affinity terms of its own: answers
        # about which pods are constrained or counted may then change.
        self.version = 0
        # Moves on with every change to any count or domain: a verdict is reusable while it stays.
        self.changes = 0
        self._tracked: tuple[tuple[int, ...], frozenset[str]] | None = None

    # -- the cluster -----------------------------------------------------------------------------------

    def add_node(
        self,
        name: str,
        labels: Mapping[str, str],
        taints: Sequence[Taint] = (),
        pods: Sequence[Pod] = (),
        *,
        anti_affine: Sequence[Pod] | None = None,
        shared: bool = False,
    ) -> None:
        """A node (existing, launching or planned) with the labels it has for certain, and the pods that run
        there already: as :meth:`place` of each, without a step per pod for those no count reads.
        ``anti_affine`` are those of ``pods`` with anti-affinity terms of their own, when already known;
        ``shared``: nobody changes ``labels`` while the topology holds them (they are kept, not copied)."""
        node = TopologyNode(
            labels if shared and isinstance(labels, dict) else dict(labels), tuple(taints), list(pods)
        )
        self._nodes[name] = node
        for g in self._spread.values():
            g.add_node(name, node)
        # While no group is kept (a plan's cluster as it is built), only a pod's own anti-affinity is counted.
        if self._spread or self._affinity or self._anti:
            counted = node.pods
        elif anti_affine is not None:
            counted = list(anti_affine)
        else:
            counted = [p for p in node.pods if p.pod_anti_affinity]
        self.changes += 1 + len(node.pods) - len(counted)
        for pod in counted:
            self._record(name, node, pod, 1)
        if not self.journal.open:
            return  # a plan's cluster as it is built: nothing to take back (and thousands of nodes)

        def undo() -> None:
            for pod in reversed(counted):
                self._record(name, node, pod, -1)
            self._drop(name)

        self.journal.log(undo)

    def remove_node(self, name: str) -> None:
        """A node leaves the cluster with its pods (it is being removed)."""
        node = self._nodes[name]
        pods = list(node.pods)
        for pod in pods:
            self._record(name, node, pod, -1)
        self._drop(name)

        def undo() -> None:
            self._nodes[name] = node
            for g in self._spread.values():
                g.add_node(name, node)
            for pod in pods:
                self._record(name, node, pod, 1)

        self.journal.log(undo)

    def sort_nodes(self) -> None:
        """List the nodes by name (see :meth:`Engine.sort_nodes`), and count the anti-affinity terms of their
        pods again in that order, as adding the nodes afresh counts them: the first term that keeps a pod
        away is the one its rejection names."""
        self._in_order()
        if self._held:
            self._held = defaultdict(Counter)
            self._tracked = None
            for name, node in self._nodes.items():
                for pod in node.pods:
                    if pod.pod_anti_affinity:
                        self._record(name, node, pod, 1)

    def tidy(self) -> None:
        """:meth:`sort_nodes` for the same nodes with the same pods, once a plan's changes were taken back:
        their anti-affinity terms are held in the order they were, and only the terms and domains the
        plan's pods brought, back at zero, are dropped."""
        self._in_order()
        for term, counts in list(self._held.items()):
            for value in [v for v, n in counts.items() if n == 0]:
                del counts[value]
            if not counts:
                del self._held[term]
        self._tracked = None

    def _in_order(self) -> None:
        """The nodes by name: trials take nodes out and put them back last."""
        names = sorted(self._nodes)
        if names != list(self._nodes):
            nodes = self._nodes
            self._nodes = {name: nodes[name] for name in names}

    def as_built(self) -> bool:
        """Whether the counts are those of the nodes and their pods alone, as adding them afresh makes them
        (anti-affinity terms aside, which :meth:`sort_nodes` counts again): no group is kept, groups being
        made as a plan checks pods. Asked of a cluster kept from one plan to the next, once the last plan's
        changes were taken back."""
        return not (self._spread or self._affinity or self._anti)

    def _drop(self, name: str) -> None:
        self.changes += 1
        self._nodes.pop(name, None)
        for g in self._spread.values():
            g.forget_node(name)
            for pair in [p for p in g.counts if p[0] in g.topology_keys]:
                if g.counts[pair] == 0 and not self._domain_present(g, pair):
                    del g.counts[pair]

    def _domain_present(self, g: SpreadGroup, pair: Pair) -> bool:
        return any(
            n.labels.get(pair[0]) == pair[1] and any(g.eligibility(name, n))
            for name, n in self._nodes.items()
        )

    def labels(self, name: str) -> Mapping[str, str]:
        return self._nodes[name].labels

    def relabel(self, name: str, labels: Mapping[str, str]) -> None:
        """A planned node's labels became known (a zone was chosen): its pods count there from now on."""
        node = self._nodes[name]
        pods = list(node.pods)
        for pod in pods:
            self._record(name, node, pod, -1)
        before = node.labels
        node.labels = {**before, **labels}  # a new mapping: the one it had may be shared (add_node)
        for g in self._spread.values():
            g.forget_node(name)
            g.add_node(name, node)
        for pod in pods:
            self._record(name, node, pod, 1)

        def undo() -> None:
            for pod in pods:
                self._record(name, node, pod, -1)
            node.labels = before
            for g in self._spread.values():
                g.forget_node(name)
            for pod in pods:
                self._record(name, node, pod, 1)

        self.journal.log(undo)

    def place(self, pod: Pod, name: str, count: int = 1) -> None:
        """``count`` pods like ``pod`` now run on node ``name``."""
        node = self._nodes[name]
        node.pods.extend([pod] * count)
        self._record(name, node, pod, count)

        def undo() -> None:
            del node.pods[len(node.pods) - count :]
            self._record(name, node, pod, -count)

        self.journal.log(undo)

    def _record(self, name: str, node: TopologyNode, pod: Pod, delta: int) -> None:
        self.changes += 1
        if not (self._spread or self._affinity or self._anti or pod.pod_anti_affinity):
            return  # no count is kept, and the pod brings no term of its own (most plans)
        who = who_of(pod)
        for s in self._spread.values():
            s.record(name, node, pod, delta, who)
        for a in self._affinity.values():
            a.record(node, pod, delta, self.namespaces, who)
        for t in self._anti.values():
            t.record(node, pod, delta, self.namespaces, who)
        for term in pod.pod_anti_affinity:
            value = node.labels.get(term.topology_key)
            if value is not None:
                counts = self._held[term]
                before = any(n > 0 for n in counts.values())
                counts[value] += delta
                if before != any(n > 0 for n in counts.values()):
                    self.version += 1  # which pods this term keeps away has changed

    # -- groups ----------------------------------------------------------------------------------------

    def _spread_group(self, pod: Pod) -> SpreadGroup:
        honour_affinity = any(c.honor_node_affinity for c in pod.spread)
        honour_taints = any(c.honor_node_taints for c in pod.spread)
        key = SpreadKey(
            pod.spread,
            pod.namespace,
            tuple(sorted(pod.node_selector.items())) if honour_affinity else (),
            pod.affinity if honour_affinity else (),
            pod.tolerations if honour_taints else (),
        )
        group = self._spread.get(key)
        if group is None:
            group = self._spread[key] = SpreadGroup(key)
            self._selected.clear()
            self.version += 1
            self.changes += 1
            for name, node in self._nodes.items():
                group.add_node(name, node)
                for p in node.pods:
                    group.record(name, node, p, 1, who_of(p))
        return group

    def _affinity_group(self, pod: Pod) -> AffinityGroup:
        group = self._affinity.get(pod.pod_affinity)
        if group is None:
            group = self._affinity[pod.pod_affinity] = AffinityGroup(pod.pod_affinity)
            self._selected.clear()
            self.version += 1
            self.changes += 1
            for node in self._nodes.values():
                for p in node.pods:
                    group.record(node, p, 1, self.namespaces, who_of(p))
        return group

    def _anti_group(self, term: PodAffinityTerm) -> AntiGroup:
        group = self._anti.get(term)
        if group is None:
            group = self._anti[term] = AntiGroup(term)
            self._selected.clear()
            self.version += 1
            self.changes += 1
            for node in self._nodes.values():
                for p in node.pods:
                    group.record(node, p, 1, self.namespaces, who_of(p))
        return group

    def prepare(self, pod: Pod) -> None:
        """Make the groups ``pod``'s constraints need, before a transaction (so a rollback keeps them)."""
        if pod.spread:
            self._spread_group(pod)
        if pod.pod_affinity:
            self._affinity_group(pod)
        for term in pod.pod_anti_affinity:
            self._anti_group(term)

    def selected(self, pod: Pod) -> bool:
        """Some group counts pods like ``pod``: placing it changes what later pods may do."""
        key = (pod.namespace, frozenset(pod.labels.items()))
        found = self._selected.get(key)
        if found is None:
            found = (
                any(
                    pod.namespace == g.key.namespace
                    and any(selector_matches(c.selector, pod.labels) for c in g.key.constraints)
                    for g in self._spread.values()
                )
                or any(
                    all(term_selects(t, pod, self.namespaces) for t in g.terms)
                    for g in self._affinity.values()
                )
                or any(term_selects(g.term, pod, self.namespaces) for g in self._anti.values())
            )
            self._selected[key] = found
        return found

    @property
    def idle(self) -> bool:
        """No count is kept: nothing placed so far has a say in where any pod goes."""
        return not (self._spread or self._affinity or self._anti or self._held)

    def constrains(self, pod: Pod) -> bool:
        """Where ``pod`` may go depends on other pods: its own inter-pod constraints, or a placed pod's
        anti-affinity that selects it."""
        return pod.topological or any(
            counts and any(counts.values()) and term_selects(t, pod, self.namespaces)
            for t, counts in self._held.items()
        )

    def honours_taints(self) -> bool:
        """Some spread constraint counts only nodes whose taints its pod tolerates."""
        if not self._spread:
            return False
        return any(c.honor_node_taints for g in self._spread.values() for c in g.key.constraints)

    def tracked_keys(self) -> frozenset[str]:
        """Every topology key some count is kept for."""
        if not (self._spread or self._affinity or self._anti or self._held):
            return frozenset()  # asked for every node opened and every pod added: most plans keep no count
        # Asked for every node opened and every pod added: kept while no group or held term appears (a held
        # term's counts, once there, stay, at zero if its pods leave).
        at = (self.version, len(self._spread), len(self._affinity), len(self._anti), len(self._held))
        if self._tracked is not None and self._tracked[0] == at:
            return self._tracked[1]
        keys = {c.topology_key for g in self._spread.values() for c in g.key.constraints}
        keys |= {t.topology_key for g in self._affinity.values() for t in g.terms}
        keys |= {g.term.topology_key for g in self._anti.values()}
        keys |= {t.topology_key for t, counts in self._held.items() if counts}
        found = frozenset(keys)
        self._tracked = (at, found)
        return found

    def check_keys(self, pod: Pod) -> set[str]:
        """Topology keys whose value on a node decides whether ``pod`` may go there."""
        keys = {c.topology_key for c in pod.spread}
        keys |= {t.topology_key for t in pod.pod_affinity}
        keys |= {t.topology_key for t in pod.pod_anti_affinity}
        keys |= {
            t.topology_key
            for t, counts in self._held.items()
            if counts and term_selects(t, pod, self.namespaces)
        }
        return keys

    def keys_for(self, pod: Pod) -> set[str]:
        """Topology keys whose value on a node decides whether ``pod`` may go there, or that count it."""
        keys = self.check_keys(pod)
        if self.selected(pod):
            keys |= {c.topology_key for g in self._spread.values() for c in g.key.constraints}
            keys |= {t.topology_key for g in self._affinity.values() for t in g.terms}
            keys |= {g.term.topology_key for g in self._anti.values()}
        return keys

    # -- the filters -----------------------------------------------------------------------------------

    def check(
        self,
        pod: Pod,
        labels: Mapping[str, str],
        *,
        potential: Mapping[str, Iterable[str]] | None = None,
        fresh: bool = False,
    ) -> Rejection | None:
        """PodTopologySpread then InterPodAffinity for ``pod`` on a node with ``labels``.

        For a node still to be launched, ``potential`` lists per topology key the domains new nodes could
        open (the zones of the offerings the pod may get), counted as empty, and ``fresh`` says that the node
        is new, so that its hostname is a domain of its own: spreading over the domains a launch can
        create, not only the ones that exist."""
        if pod.spread:
            rejection = self._check_spread(pod, labels, potential or {}, fresh)
            if rejection:
                return rejection
        return self._check_inter_pod(pod, labels)

    def _check_spread(
        self, pod: Pod, labels: Mapping[str, str], potential: Mapping[str, Iterable[str]], fresh: bool
    ) -> Rejection | None:
        group = self._spread_group(pod)
        for c in pod.spread:
            value = labels.get(c.topology_key)
            if value is None:
                return Rejection(Filter.POD_TOPOLOGY_SPREAD, SPREAD_LABEL_MISSING, c.topology_key)
            new_domain = fresh and c.topology_key == LABEL_HOSTNAME
            low = group.minimum(c, potential.get(c.topology_key, ()), new_domain)
            own = 1 if selector_matches(c.selector, pod.labels) else 0
            if group.counts.get((c.topology_key, value), 0) + own - low > c.max_skew:
                return Rejection(Filter.POD_TOPOLOGY_SPREAD, SPREAD_MISMATCH, c.topology_key)
        return None

    def spread_load(self, pod: Pod, labels: Mapping[str, str]) -> int:
        """How many matching pods the domains ``labels`` name hold already (lower spreads better)."""
        if not pod.spread:
            return 0
        group = self._spread_group(pod)
        return sum(group.counts.get((c.topology_key, labels.get(c.topology_key, "")), 0) for c in pod.spread)

    def _check_inter_pod(self, pod: Pod, labels: Mapping[str, str]) -> Rejection | None:
        """InterPodAffinity, in kube-scheduler's order: the pod's affinity, its anti-affinity, then the
        anti-affinity of pods already placed."""
        if pod.pod_affinity:
            group = self._affinity_group(pod)
            exist = True
            for t in pod.pod_affinity:
                value = labels.get(t.topology_key)
                if value is None:
                    return Rejection(Filter.INTER_POD_AFFINITY, POD_AFFINITY_MISMATCH, t.topology_key)
                if group.counts.get((t.topology_key, value), 0) <= 0:
                    exist = False
            # The first pod of a series that has affinity to itself may go anywhere the keys exist.
            if not exist and (
                any(n > 0 for n in group.counts.values())
                or not all(term_selects(t, pod, self.namespaces) for t in pod.pod_affinity)
            ):
                return Rejection(
                    Filter.INTER_POD_AFFINITY, POD_AFFINITY_MISMATCH, pod.pod_affinity[0].topology_key
                )
        for term in pod.pod_anti_affinity:
            value = labels.get(term.topology_key)
            if value is not None and self._anti_group(term).counts.get(value, 0) > 0:
                return Rejection(Filter.INTER_POD_AFFINITY, POD_ANTI_AFFINITY_MISMATCH, term.topology_key)
        for term, counts in self._held.items():
            value = labels.get(term.topology_key)
            if value is not None and counts.get(value, 0) > 0 and term_selects(term, pod, self.namespaces):
                return Rejection(Filter.INTER_POD_AFFINITY, EXISTING_ANTI_AFFINITY, term.topology_key)
        return None
