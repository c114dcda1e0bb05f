"""Offerings prepared for one planning pass: globally filtered, with allocatable, grouped by shape.

Fit is evaluated once per *shape* (instance type), not once per (type × zone × capacity type), and the
eligible offerings of each constraint set are computed once and reused for every pod that shares it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from autoscaler.allocatable import node_allocatable
from autoscaler.config import Config
from autoscaler.fit import (
    Constraints,
    affinity_matches,
    eligible_offerings,
    node_labels,
    node_taints,
    tolerates_all,
)
from autoscaler.model import DaemonSet, Offering
from autoscaler.resources import PODS, Resources


@dataclass(slots=True)
class Shape:
    """Offerings of one instance type in one capacity type, cheapest first, sharing one allocatable."""

    alloc: Resources
    offerings: list[Offering]

    @property
    def cheapest(self) -> Offering:
        return self.offerings[0]


def price_order(o: Offering) -> tuple[float, str, str, str]:
    return (o.price, o.instance_type, o.zone, o.capacity_type)


class OfferingIndex:
    """The offerings a plan may use, and everything derived from them that the planner reuses."""

    def __init__(self, offerings: Sequence[Offering], config: Config, daemonsets: Sequence[DaemonSet] = ()):
        self.config = config
        self.daemonsets = tuple(daemonsets)
        self.excluded_reason = ""
        usable, self.excluded_reason = _global_filter(offerings, config)
        self.offerings: list[Offering] = sorted(usable, key=price_order)
        self._alloc: dict[tuple[str, str, str], Resources] = {}
        self._eligible: dict[Constraints, tuple[list[Offering], str]] = {}
        self._shapes: dict[tuple[Constraints, str, bool], list[Shape]] = {}
        self.by_type: dict[str, Offering] = {}
        for o in self.offerings:
            self.by_type.setdefault(o.instance_type, o)

    def allocatable(self, o: Offering) -> Resources:
        """What pods can use on a new node of ``o``: capacity − reservations − DaemonSet overhead."""
        key = (o.instance_type, o.zone, o.capacity_type)
        alloc = self._alloc.get(key)
        if alloc is None:
            alloc = node_allocatable(
                o, self.config.cloud, reserved=self.config.kube_reserved, overhead=self.overhead(o)
            )
            self._alloc[key] = alloc
        return alloc

    def overhead(self, o: Offering) -> Resources:
        """Configured DaemonSet overhead, or the sum of the DaemonSets that would run on this offering."""
        if self.config.daemon_set_overhead is not None:
            return self.config.daemon_set_overhead
        total = Resources()
        labels = node_labels(o, self.config)
        taints = node_taints(o, self.config)
        for ds in self.daemonsets:
            if (
                all(labels.get(k) == v for k, v in ds.node_selector.items())
                and affinity_matches(ds.affinity, labels)
                and tolerates_all(ds.tolerations, taints)
            ):
                total = total + ds.requests + {PODS: 1000}
        return total

    def eligible(self, c: Constraints) -> tuple[list[Offering], str]:
        """Offerings a pod with constraints ``c`` may get, cheapest first, or why there are none."""
        found = self._eligible.get(c)
        if found is None:
            if not self.offerings:
                found = ([], self.excluded_reason or "no offerings")
            else:
                found = eligible_offerings(c, self.offerings, self.config)
            self._eligible[c] = found
        return found

    def shapes(self, c: Constraints, capacity_type: str, packing: bool) -> list[Shape]:
        """Eligible offerings of one capacity type grouped by instance type, cheapest shape first."""
        key = (c, capacity_type, packing)
        shapes = self._shapes.get(key)
        if shapes is None:
            offerings, _ = self.eligible(c)
            if packing:
                offerings = [o for o in offerings if self.packing_node(o)]
            by_type: dict[str, list[Offering]] = {}
            for o in offerings:
                if o.capacity_type == capacity_type:
                    by_type.setdefault(o.instance_type, []).append(o)
            shapes = [Shape(self.allocatable(group[0]), group) for group in by_type.values()]
            shapes = [s for s in shapes if s.alloc]
            shapes.sort(key=lambda s: price_order(s.cheapest))
            self._shapes[key] = shapes
        return shapes

    def packing_node(self, o: Offering) -> bool:
        """Big enough to be a bin-packing node (``binPackingNode*``) and not a GPU node."""
        cfg = self.config
        if o.gpu_count or o.vcpu * 1000 < cfg.bin_packing_node_cpu:
            return False
        if o.memory_mib * 2**20 * 1000 < cfg.bin_packing_node_memory:
            return False
        if o.max_pods < cfg.bin_packing_node_min_pod_count:
            return False
        pattern = cfg.bin_packing_node_type_regexp
        return pattern is None or pattern.fullmatch(o.instance_type) is not None


def _global_filter(offerings: Sequence[Offering], config: Config) -> tuple[list[Offering], str]:
    """Filters every pod is subject to: availability, zones, architecture, type regexp, node cost, GPU SKUs."""
    remaining = [o for o in offerings if o.available]
    steps: list[tuple[str, object]] = []
    if config.zones:
        zones = set(config.zones)
        steps.append(
            (f"no offering in zones {','.join(config.zones)}", lambda o: not o.zone or o.zone in zones)
        )
    archs = set(config.architectures)
    steps.append(
        (f"no offering with architecture {','.join(config.architectures)}", lambda o: o.arch in archs)
    )
    pattern: re.Pattern[str] | None = config.instance_type_regexp
    if pattern is not None:
        steps.append(
            (
                f"no instance type matches instanceTypeRegexp {pattern.pattern!r}",
                lambda o: pattern.fullmatch(o.instance_type) is not None,
            )
        )
    cap = config.max_node_cost_per_hour
    if cap is not None:
        steps.append((f"no offering at or below maxNodeCostPerHour {cap}", lambda o: o.price <= cap))
    reason = "every offering is unavailable" if offerings and not remaining else ""
    for text, keep in steps:
        kept = [o for o in remaining if keep(o)]  # type: ignore[operator]
        if remaining and not kept:
            reason = text
        remaining = kept
    return remaining, reason
