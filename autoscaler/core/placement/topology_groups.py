"""The counts the inter-pod filters read, one kind of group each: pods matching a pod's spread constraints per
domain (kube-scheduler's TpPairToMatchNum), pods matching all its required affinity terms, and pods one
required anti-affinity term selects. :class:`~autoscaler.core.placement.topology.Topology` keeps them up to
date as pods are placed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from autoscaler.core.model import (
    NodeSelectorTerm,
    Pod,
    PodAffinityTerm,
    SpreadConstraint,
    Taint,
    Toleration,
)
from autoscaler.core.placement.filters import untolerated
from autoscaler.core.placement.labels import node_affinity_matches, selector_matches

Pair = tuple[str, str]
# What the selectors of a group read of a pod: its namespace and labels.
Who = tuple[str, tuple[tuple[str, str], ...]]


def who_of(pod: Pod) -> Who:
    return (pod.namespace, tuple(pod.labels.items()))


@dataclass(slots=True)
class TopologyNode:
    labels: dict[str, str]
    taints: tuple[Taint, ...]
    pods: list[Pod] = field(default_factory=list)


def term_selects(term: PodAffinityTerm, pod: Pod, namespaces: Mapping[str, Mapping[str, str]]) -> bool:
    """Does the affinity term (of some pod) select ``pod``: in one of its namespaces, with matching labels."""
    if term.namespaces or term.namespace_selector is not None:
        in_scope = pod.namespace in term.namespaces or (
            term.namespace_selector is not None
            and selector_matches(term.namespace_selector, namespaces.get(pod.namespace, _default_ns(pod)))
        )
    else:
        in_scope = pod.namespace == term.owner_namespace
    return in_scope and selector_matches(term.selector, pod.labels)


def _default_ns(pod: Pod) -> Mapping[str, str]:
    # A namespace that was not listed still carries the label the API server gives every namespace.
    return {"kubernetes.io/metadata.name": pod.namespace}


@dataclass(frozen=True, slots=True)
class SpreadKey:
    constraints: tuple[SpreadConstraint, ...]
    namespace: str
    # Only when a constraint honours them: the pod's node affinity and tolerations decide which nodes count.
    node_selector: tuple[tuple[str, str], ...] = ()
    terms: tuple[NodeSelectorTerm, ...] = ()
    tolerations: tuple[Toleration, ...] = ()


class SpreadGroup:
    """Matching pods per domain for one pod's spread constraints (kube-scheduler's TpPairToMatchNum)."""

    def __init__(self, key: SpreadKey) -> None:
        self.key = key
        self.topology_keys = tuple(c.topology_key for c in key.constraints)
        self.counts: dict[Pair, int] = {}
        self.eligible: dict[str, tuple[bool, ...]] = {}
        # Which constraints select pods of a namespace and labels (replicas are placed one by one).
        self._selects: dict[Who, tuple[bool, ...]] = {}

    def eligibility(self, name: str, node: TopologyNode) -> tuple[bool, ...]:
        found = self.eligible.get(name)
        if found is None:
            k = self.key
            if not all(t in node.labels for t in self.topology_keys):
                found = tuple(False for _ in k.constraints)
            else:
                found = tuple(
                    (
                        not c.honor_node_affinity
                        or node_affinity_matches(dict(k.node_selector), k.terms, node.labels, name)
                    )
                    and (not c.honor_node_taints or untolerated(k.tolerations, node.taints) is None)
                    for c in k.constraints
                )
            self.eligible[name] = found
        return found

    def add_node(self, name: str, node: TopologyNode) -> None:
        for c, ok in zip(self.key.constraints, self.eligibility(name, node), strict=True):
            if ok:
                self.counts.setdefault((c.topology_key, node.labels[c.topology_key]), 0)

    def record(self, name: str, node: TopologyNode, pod: Pod, delta: int, who: Who) -> None:
        if pod.namespace != self.key.namespace or pod.terminating:
            return
        selected = self._selects.get(who)
        if selected is None:
            selected = self._selects[who] = tuple(
                selector_matches(c.selector, pod.labels) for c in self.key.constraints
            )
        for c, ok, match in zip(self.key.constraints, self.eligibility(name, node), selected, strict=True):
            if ok and match:
                pair = (c.topology_key, node.labels[c.topology_key])
                self.counts[pair] = self.counts.get(pair, 0) + delta

    def forget_node(self, name: str) -> None:
        self.eligible.pop(name, None)

    def minimum(self, c: SpreadConstraint, potential: Iterable[str], fresh: bool) -> int:
        """The global minimum kube-scheduler compares with; ``potential`` are domains new nodes could open
        (counted as empty ones) and ``fresh`` says a new node can always open a new, empty domain."""
        key = c.topology_key
        counts = [n for (k, _), n in self.counts.items() if k == key]
        extra = [v for v in potential if (key, v) not in self.counts]
        domains = len(counts) + len(extra)
        # minDomains is 1 unless set, so no domain at all also means a minimum of 0.
        if fresh or extra or domains < c.min_domains:
            return 0
        return min(counts)


class AffinityGroup:
    """Pods that match *all* of one pod's required affinity terms, per (topology key, value)."""

    def __init__(self, terms: tuple[PodAffinityTerm, ...]) -> None:
        self.terms = terms
        self.counts: Counter[Pair] = Counter()
        self._selects: dict[Who, bool] = {}  # whether the terms select pods of a namespace and labels

    def record(
        self, node: TopologyNode, pod: Pod, delta: int, namespaces: Mapping[str, Mapping[str, str]], who: Who
    ) -> None:
        selected = self._selects.get(who)
        if selected is None:
            selected = self._selects[who] = all(term_selects(t, pod, namespaces) for t in self.terms)
        if selected:
            for t in self.terms:
                value = node.labels.get(t.topology_key)
                if value is not None:
                    self.counts[(t.topology_key, value)] += delta


class AntiGroup:
    """Pods one required anti-affinity term selects, per value of its topology key."""

    def __init__(self, term: PodAffinityTerm) -> None:
        self.term = term
        self.counts: Counter[str] = Counter()
        self._selects: dict[Who, bool] = {}  # whether the term selects pods of a namespace and labels

    def record(
        self, node: TopologyNode, pod: Pod, delta: int, namespaces: Mapping[str, Mapping[str, str]], who: Who
    ) -> None:
        selected = self._selects.get(who)
        if selected is None:
            selected = self._selects[who] = term_selects(self.term, pod, namespaces)
        if selected:
            value = node.labels.get(self.term.topology_key)
            if value is not None:
                self.counts[value] += delta
