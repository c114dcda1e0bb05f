"""The inter-pod filters' verdicts during a plan: PodTopologySpread and InterPodAffinity for a pod on a node,
kept while no count changes, and the choice of a new node's undecided topology labels (its zone) for a pod
whose place depends on other pods."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping

from autoscaler.core.fit import Constraints
from autoscaler.core.model import Pod
from autoscaler.core.offering import Offering
from autoscaler.core.placement.bins import Bin, Kind, Option, Templates, narrow
from autoscaler.core.placement.fits import Fit
from autoscaler.core.placement.reasons import Filter, Rejection
from autoscaler.core.placement.topology import Topology

__all__ = ["MAX_ZONE_CHOICES", "NO_ROOM", "InterPodVerdicts", "Options"]

MAX_ZONE_CHOICES = 64  # assignments of undecided topology keys tried for one pod on one new node
# What a pod's constraints allow a new node to be: offerings by option key.
Options = Mapping[tuple[str, str], frozenset[Offering]]
NO_ROOM = Rejection(Filter.NODE_RESOURCES_FIT, "no room")


class InterPodVerdicts:
    """The inter-pod filters over one plan's counts (``topology``), their verdicts kept until a count
    changes."""

    def __init__(self, topology: Topology, templates: Templates) -> None:
        self.topology = topology
        self.templates = templates
        self._domains: dict[tuple[Constraints, str], frozenset[str]] = {}
        self._checks: dict[tuple[object, ...], Rejection | None] = {}
        self._checks_at = -1

    def blocker(
        self, pod: Pod, c: Constraints, allowed: Options, keys: tuple[str, ...], checked: tuple[str, ...]
    ) -> Callable[[Bin], Rejection | None]:
        """For a pod whose place depends on other pods, the inter-pod filters' "no" to it on a new node whose
        every topology key they read is settled: ``can_add`` would then say no as well (this, or a "no" it
        meets first). A quick no for a pod tried on every node of a zone its spread is full in: the verdict
        is kept per value of those keys, where the whole fit works out each node's options first. ``keys`` are
        the topology keys that matter to the pod, ``checked`` those its filters read."""
        potential = {s.topology_key: self.potential(c, allowed, s.topology_key) for s in pod.spread}
        verdicts: dict[tuple[str | None, ...], Rejection | None] = {}
        topology = self.topology
        at = [topology.changes]

        def blocked(bin: Bin) -> Rejection | None:
            labels = bin.labels
            for key in keys:
                if key not in labels:
                    return None
            if at[0] != topology.changes:
                verdicts.clear()
                at[0] = topology.changes
            values = tuple([labels.get(k) for k in checked])
            if values in verdicts:
                return verdicts[values]
            found = verdicts[values] = self.check(pod, c, labels, checked, potential)
            return found

        return blocked

    def check(
        self,
        pod: Pod,
        c: Constraints,
        labels: Mapping[str, str],
        keys: tuple[str, ...],
        potential: Mapping[str, frozenset[str]] | None = None,
    ) -> Rejection | None:
        """The inter-pod filters for ``pod`` on a node with ``labels`` (a new node when ``potential`` is
        given). Only the labels of ``keys`` matter, so the verdict is kept until a count changes: of the
        hundreds of nodes a pod is tried on, most share one zone with many others."""
        fresh = potential is not None
        key = (
            id(pod),
            c,
            fresh,
            tuple(labels.get(k) for k in keys),
        )
        changes = self.topology.changes
        if self._checks_at != changes:
            self._checks.clear()
            self._checks_at = changes
        if key in self._checks:
            return self._checks[key]
        found = self.topology.check(pod, labels, potential=potential, fresh=fresh)
        self._checks[key] = found
        return found

    def potential(self, c: Constraints, allowed: Options, key: str) -> frozenset[str]:
        """The domains of ``key`` a new node for pods with constraints ``c`` could open: spreading counts
        them as empty, so replicas go to every zone the pod may get, not only to those with nodes."""
        found = self._domains.get((c, key))
        if found is None:
            values = {self.templates.labels(o).get(key) for offerings in allowed.values() for o in offerings}
            found = self._domains[(c, key)] = frozenset(v for v in values if v is not None)
        return found

    def settle(
        self,
        pod: Pod,
        c: Constraints,
        bin: Bin,
        k: int,
        options: tuple[Option, ...],
        allowed: Options,
        keys: tuple[str, ...],
        checked: tuple[str, ...],
    ) -> Fit | Rejection:
        """Choose values for the topology keys the pod cares about that the node has not settled yet (its
        zone, usually): the cheapest choice that passes, preferring the emptiest domain for spread."""
        potential = {s.topology_key: self.potential(c, allowed, s.topology_key) for s in pod.spread}
        unsettled = [key for key in keys if key not in bin.labels]
        if not unsettled:
            rejection = self.check(pod, c, bin.labels, checked, potential)
            return rejection or Fit(k, options)
        trial = Bin(bin.name, Kind.NEW, bin.labels)
        trial.set_options(list(options))
        open_keys = [k_ for k_ in unsettled if len(trial.values(k_, self.templates)) > 1]
        if not open_keys:
            labels = {key: v for key in unsettled for v in trial.values(key, self.templates) if v is not None}
            rejection = self.check(pod, c, {**bin.labels, **labels}, checked, potential)
            return rejection or Fit(k, options)
        choices = itertools.islice(
            itertools.product(*(sorted(trial.values(k_, self.templates), key=str) for k_ in open_keys)),
            MAX_ZONE_CHOICES,
        )
        best: tuple[tuple[int, float], dict[str, str], tuple[Option, ...]] | None = None
        first: Rejection | None = None
        for values in choices:
            chosen = {key: v for key, v in zip(open_keys, values, strict=True) if v is not None}
            absent = {key for key, v in zip(open_keys, values, strict=True) if v is None}
            narrowed = narrow(options, self.templates, chosen, absent)
            if not narrowed:
                continue
            labels = {**bin.labels, **chosen}
            rejection = self.check(pod, c, labels, checked, potential)
            if rejection:
                first = first or rejection
                continue
            score = (self.topology.spread_load(pod, labels), min(o.cheapest.price for o in narrowed))
            if best is None or score < best[0]:
                best = (score, chosen, narrowed)
        if best is None:
            return first or NO_ROOM
        return Fit(k, best[2], best[1])
