"""Offerings prepared for one planning pass: globally filtered, with allocatable, grouped by shape.

Fit is evaluated once per *shape* (instance type), not once per (type × zone × capacity type), and the
eligible offerings of each constraint set are computed once and reused for every pod that shares it.

The offerings the configuration filters out (zones, architectures, instanceTypeRegexp, maxNodeCostPerHour,
and those benched after capacity errors) are kept aside: when a pod gets no offering, they tell whether the
pod's own constraints are the cause or a configuration filter removed the offerings that would have fit, and
then the reason names that filter ("maxNodeCostPerHour 1.0 excludes every offering that fits …").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from autoscaler.config.values import Config
from autoscaler.core.allocatable import node_allocatable
from autoscaler.core.fit import Constraints, eligible_offerings, offering_filters
from autoscaler.core.gpu.layouts import node_layout, with_layouts
from autoscaler.core.model import DaemonSet, Taint
from autoscaler.core.new_nodes import NewNodes
from autoscaler.core.offering import Offering
from autoscaler.core.placement import filters
from autoscaler.core.placement.bins import Option, shape_key
from autoscaler.core.placement.inter_pod import Options
from autoscaler.core.placement.reasons import Filter, Rejection
from autoscaler.core.planning.memo import PlanMemo
from autoscaler.core.resources import PODS, Resources

# Offerings of one instance type in one capacity type, cheapest first, sharing one allocatable.
Shape = Option


def price_order(o: Offering) -> tuple[float, str, str, str]:
    return (o.price, o.instance_type, o.zone, o.capacity_type)


class OfferingIndex:
    """The offerings a plan may use, and everything derived from them that the planner reuses."""

    def __init__(self, offerings: Sequence[Offering], config: Config, daemonsets: Sequence[DaemonSet] = ()):
        self.config = config
        self.daemonsets = tuple(daemonsets)
        self.filters = config_filters(config)
        offerings = with_layouts(offerings, config.gpu_sharing)
        usable, excluded, self.excluded_reason = _global_filter(offerings, self.filters)
        self.offerings: list[Offering] = sorted(usable, key=price_order)
        # What the configuration (or a capacity error) took away, cheapest first, to explain a pod's verdict.
        self.excluded: list[Offering] = sorted(excluded, key=price_order)
        self._excluded_for: dict[Constraints, list[Offering]] = {}
        self._alloc: dict[tuple[object, ...], Resources] = {}
        self._eligible: dict[Constraints, tuple[list[Offering], Rejection | None]] = {}
        # What the pod-level filters applied so far leave of the offerings of some capacity types, by the
        # filters' keys: shared by the constraint sets that differ only in later filters.
        self._filtered: dict[tuple[object, ...], tuple[list[Offering], Rejection]] = {}
        self._shapes: dict[tuple[Constraints, str, bool], list[Shape]] = {}
        self._allowed: dict[tuple[Constraints, bool], Options] = {}
        self._shared: dict[tuple[tuple[Constraints, ...], bool], list[tuple[Shape, list[Offering]]]] = {}
        # The labels and taints of a new node of each offering (its template and tidal's own).
        self.nodes = NewNodes(config)
        self.by_type: dict[str, Offering] = {}
        # Every variant of an instance type (its GPU layouts), to tell which one a registered node is.
        self.variants: dict[str, list[Offering]] = {}
        for o in self.offerings:
            self.variants.setdefault(o.instance_type, []).append(o)
        # Per instance type: its first whole-GPU variant and its variants cut into GPU layouts, in order, which
        # is all telling a node's variant reads (most types have dozens of offerings and no layout).
        self._layouts: dict[str, tuple[Offering | None, tuple[Offering, ...]]] = {}
        for name, variants in self.variants.items():
            self.by_type[name] = next((o for o in variants if o.layout is None), variants[0])
            plain = next((o for o in variants if o.layout is None), None)
            self._layouts[name] = (plain, tuple(o for o in variants if o.layout is not None))
        self._by_shape: dict[tuple[str, str], Shape] | None = None
        self._keys: dict[int, tuple[str, str]] | None = None
        self._smallest_gpu_memory: int | None = None  # asked by each step that counts GPUs for queues
        self._ctypes: set[str] | None = None
        # The offerings of each set of capacity types a pod may have, in order: the first filter a pod's
        # offerings go through, and pods of a few sets only.
        self._of_types: dict[tuple[str, ...], list[Offering]] = {}
        self._every: list[Offering] | None = None
        # What the planner's other steps work out once per index (scale-down, verdicts, reservations).
        self.memo = PlanMemo()

    def every(self) -> list[Offering]:
        """Every offering, usable or taken away by the configuration, cheapest first (to explain choices)."""
        if self._every is None:
            self._every = sorted([*self.offerings, *self.excluded], key=price_order)
        return self._every

    def dra_types(self) -> list[tuple[str, int, int]]:
        """The GPU types (model, memory MiB, GPUs per node) of the DRA offerings a plan may launch."""
        return sorted(
            {
                (o.gpu_model, o.gpu_memory_mib, o.gpu_count)
                for o in self.offerings
                if o.layout and o.layout.name == "dra"
            }
        )

    def template(self, instance_type: str, labels: Mapping[str, str]) -> Offering | None:
        """The offering a node of ``instance_type`` with these labels was launched as: the variant whose GPU
        layout labels it carries, else the whole-GPU one."""
        found = self._layouts.get(instance_type)
        if found is None:
            return None
        plain, cut = found
        return node_layout(labels, cut) or plain

    def shape(self, key: tuple[str, str]) -> Shape | None:
        """Every usable offering of one (instance type, capacity type), cheapest first."""
        if self._by_shape is None:
            groups: dict[tuple[str, str], list[Offering]] = {}
            keys = self._shape_keys()
            for o in self.offerings:
                groups.setdefault(keys[id(o)], []).append(o)
            self._by_shape = {k: Shape(self.allocatable(g[0]), tuple(g)) for k, g in groups.items()}
        return self._by_shape.get(key)

    def _shape_keys(self) -> dict[int, tuple[str, str]]:
        """The shape key of each usable offering, by identity (the index holds them all): worked out once,
        not once per constraint set that may have the offering."""
        if self._keys is None:
            self._keys = {id(o): shape_key(o) for o in self.offerings}
        return self._keys

    def _shape_of(self, key: tuple[str, str], offerings: tuple[Offering, ...]) -> Shape:
        """The shape of ``offerings`` (of one shape key): the index's own when they are all of it, which most
        pods may have every zone of (one shape, its devices and key worked out once, for every class)."""
        whole = self.shape(key)
        if whole is not None and whole.offerings == offerings:
            return whole
        return Shape(self.allocatable(offerings[0]), offerings)

    def allocatable(self, o: Offering) -> Resources:
        """What pods can use on a new node of ``o``: capacity − reservations − DaemonSet overhead."""
        key = self._alloc_key(o)
        alloc = self._alloc.get(key)
        if alloc is None:
            alloc = node_allocatable(o, reserved=self.config.kube_reserved, overhead=self.overhead(o))
            self._alloc[key] = alloc
        return alloc

    def _alloc_key(self, o: Offering) -> tuple[object, ...]:
        """What a node's allocatable is worked out from. Without DaemonSets to match against the node's labels
        and taints (or with a configured overhead) that is only its size and its template's reservation, so
        the zones and capacity types of one instance type (thousands of offerings, a few hundred sizes) share
        one answer; otherwise each offering's own labels may count."""
        reserved = o.template.reserved if o.template is not None else None
        size = (o.vcpu, o.memory_mib, o.max_pods, o.layout, o.gpu_count, o.gpu_vendor, reserved)
        if self.config.daemon_set_overhead is not None or not self.daemonsets:
            return size
        return (*size, o.instance_type, o.zone, o.capacity_type)

    def smallest_gpu_memory(self) -> int:
        """The least memory one NVIDIA GPU tidal may launch has (0 without GPU offerings)."""
        if self._smallest_gpu_memory is None:
            sizes = [
                o.gpu_memory_mib
                for o in self.offerings
                if o.gpu_count and o.gpu_memory_mib and not o.partial_gpu
            ]
            self._smallest_gpu_memory = min(sizes, default=0)
        return self._smallest_gpu_memory

    def base_allocatable(self, o: Offering) -> Resources:
        """What a node of ``o`` leaves pods before any DaemonSet: capacity − kubelet reservations."""
        return node_allocatable(o, reserved=self.config.kube_reserved)

    def labels(self, o: Offering) -> Mapping[str, str]:
        """The labels a node of ``o`` will carry (its template)."""
        return self.nodes.labels(o)

    def taints(self, o: Offering) -> tuple[Taint, ...]:
        """The taints a node of ``o`` will carry."""
        return self.nodes.taints(o)

    def overhead(self, o: Offering) -> Resources:
        """Configured DaemonSet overhead, or the sum of the DaemonSets that would run on this offering."""
        if self.config.daemon_set_overhead is not None:
            return self.config.daemon_set_overhead
        return daemonset_overhead(self.daemonsets, self.labels(o), self.taints(o))

    def eligible(self, c: Constraints) -> tuple[list[Offering], Rejection | None]:
        """Offerings a pod with constraints ``c`` may get, cheapest first, or why there are none.

        When none is left, the reason names the configuration filter that removed the offerings the pod's
        constraints would otherwise allow; failing that, the pod's own constraint that removed the last one.
        """
        found = self._eligible.get(c)
        if found is None:
            if self.offerings:
                of_types = self._of_types.get(c.capacity_types)
                if of_types is None:
                    ctypes = c.capacity_types
                    of_types = [o for o in self.offerings if o.capacity_type in ctypes]
                    self._of_types[ctypes] = of_types
                # The first filter (the capacity types) keeps every one of these, or says why none is left.
                found = eligible_offerings(
                    c, of_types, self.config, self.nodes, typed=True, memo=self._filtered
                )
            elif self.excluded:
                found = (
                    [],
                    eligible_offerings(c, self.excluded, self.config, self.nodes)[1] or self.excluded_reason,
                )
            else:
                found = ([], Rejection(Filter.CONFIGURATION, "no offerings"))
            if not found[0]:
                found = ([], self._config_reason(self._excluded_allowed(c)) or found[1])
            self._eligible[c] = found
        return found

    def allowed(self, c: Constraints, packing: bool) -> Options:
        """What a new node may be for a pod with constraints ``c``: eligible offerings by (instance type,
        capacity type), so that a node opened for other pods can tell at once whether this one may join."""
        key = (c, packing)
        found = self._allowed.get(key)
        if found is None:
            if self._ctypes is None:
                self._ctypes = {o.capacity_type for o in self.offerings}
            found = {
                shape.key: frozenset(shape.offerings)
                for ctype in self._ctypes
                for shape in self.shapes(c, ctype, packing)
            }
            self._allowed[key] = found
        return found

    def shared(self, classes: Sequence[Constraints], packing: bool) -> list[tuple[Shape, list[Offering]]]:
        """Shapes, cheapest first, each with the offerings of it that pods of every class in ``classes`` may
        get (a new node holding such pods can fall back to any of them)."""
        key = (tuple(classes), packing)
        found = self._shared.get(key)
        if found is None:
            common: dict[tuple[str, str], frozenset[Offering]] | None = None
            for c in classes:
                allowed = self.allowed(c, packing)
                if common is None:
                    common = dict(allowed)
                else:
                    common = {k: v & allowed[k] for k, v in common.items() if k in allowed and v & allowed[k]}
            found = []
            for shape_key, offerings in (common or {}).items():
                shape = self.shape(shape_key)
                if shape is not None:
                    found.append((shape, sorted(offerings, key=price_order)))
            found.sort(key=lambda so: price_order(so[0].cheapest))
            self._shared[key] = found
        return found

    def excluded_fit_reason(self, c: Constraints, req: Resources, packing: bool) -> Rejection | None:
        """Why no eligible offering holds ``req`` when a configuration filter removed one that would have.

        For the planner's "no offering fits …" verdict: an empty string when no filtered-out offering would
        hold the request either (then the request is simply too big for anything the pod may get).
        """
        fitting = [
            o
            for o in self._excluded_allowed(c)
            if req.fits_in(self.allocatable(o)) and (not packing or self.packing_node(o))
        ]
        return self._config_reason(fitting)

    def _excluded_allowed(self, c: Constraints) -> list[Offering]:
        """Filtered-out offerings that the pod's own constraints allow, cheapest first."""
        found = self._excluded_for.get(c)
        if found is None:
            found = self.excluded
            for _, keep in offering_filters(c, self.config, self.nodes):
                found = [o for o in found if keep(o)]
                if not found:
                    break
            self._excluded_for[c] = found
        return found

    def _config_reason(self, offerings: list[Offering]) -> Rejection | None:
        """The configuration filter that removes the last of ``offerings`` (applied in order), described."""
        remaining = offerings
        for f in self.filters:
            kept = [o for o in remaining if f.keep(o)]
            if not kept:
                return Rejection(Filter.CONFIGURATION, f.explain(remaining), f.key) if remaining else None
            remaining = kept
        return None

    def shapes(self, c: Constraints, capacity_type: str, packing: bool) -> list[Shape]:
        """Eligible offerings of one capacity type grouped by instance type, cheapest shape first."""
        key = (c, capacity_type, packing)
        shapes = self._shapes.get(key)
        if shapes is None:
            offerings, _ = self.eligible(c)
            if packing:
                offerings = [o for o in offerings if self.packing_node(o)]
            # Every capacity type in one pass: a pod's are all asked for. A shape's key names its capacity
            # type, so grouping by key groups by capacity type too.
            keys = self._shape_keys()
            groups: dict[tuple[str, str], list[Offering]] = {}
            for o in offerings:
                k = keys.get(id(o))
                groups.setdefault(shape_key(o) if k is None else k, []).append(o)
            by_ctype: dict[str, list[Shape]] = {}
            for k, group in groups.items():
                shape = self._shape_of(k, tuple(group))
                if shape.alloc:
                    by_ctype.setdefault(group[0].capacity_type, []).append(shape)
            for ctype, found in by_ctype.items():
                found.sort(key=lambda s: price_order(s.cheapest))
                self._shapes.setdefault((c, ctype, packing), found)
            shapes = self._shapes.setdefault(key, [])
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
        # Luna's semantics: the regexp is searched for in the name (anchor it with ^…$ to match all of it).
        pattern = cfg.bin_packing_node_type_regexp
        return pattern is None or pattern.search(o.instance_type) is not None


@dataclass(frozen=True, slots=True)
class ConfigFilter:
    """One filter of the configuration every pod is subject to."""

    reason: str  # when it removes every offering there is
    keep: Callable[[Offering], bool]
    explain: Callable[[list[Offering]], str]  # when it removes the last offerings a pod could have had
    key: str = ""  # the configuration key
    rule: str = ""  # what an offering it removes is, in a few words ("zone not in [us-east-1a]")

    def rejection(self) -> Rejection:
        """What this filter says of each offering it removes."""
        return Rejection(Filter.CONFIGURATION, self.rule or self.reason, self.key)


def _cheapest(offerings: list[Offering]) -> Offering:
    return min(offerings, key=price_order)


def config_filters(config: Config) -> list[ConfigFilter]:
    """Availability, zones, architectures, instanceTypeRegexp and maxNodeCostPerHour, in that order."""
    out = [
        ConfigFilter(
            "every offering is unavailable",
            lambda o: o.available,
            lambda removed: (
                "every offering that fits is unavailable after capacity errors "
                f"(cheapest {_cheapest(removed).key}); tidal tries them again after offeringUnavailableDuration"
            ),
            "offeringUnavailableDuration",
            "unavailable after a capacity error",
        )
    ]
    if config.zones:
        zones = set(config.zones)
        listed = ", ".join(config.zones)
        out.append(
            ConfigFilter(
                f"no offering in zones {','.join(config.zones)}",
                lambda o: not o.zone or o.zone in zones,
                lambda removed: (
                    f"zones [{listed}] exclude every offering that fits (cheapest {_cheapest(removed).key})"
                ),
                "zones",
                f"zone not in [{listed}]",
            )
        )
    archs = set(config.architectures)
    allowed = ", ".join(config.architectures)
    out.append(
        ConfigFilter(
            f"no offering with architecture {','.join(config.architectures)}",
            lambda o: o.arch in archs,
            lambda removed: (
                f"architectures [{allowed}] excludes "
                f"{'/'.join(sorted({o.arch.value for o in removed}))} offerings"
            ),
            "architectures",
            f"architecture not in [{allowed}]",
        )
    )
    pattern: re.Pattern[str] | None = config.instance_type_regexp
    if pattern is not None:
        regexp = pattern
        out.append(
            ConfigFilter(
                f"no instance type matches instanceTypeRegexp {regexp.pattern!r}",
                # Luna's semantics: searched for in the name; ^…$ anchors it.
                lambda o: regexp.search(o.instance_type) is not None,
                lambda removed: (
                    f"instanceTypeRegexp {regexp.pattern!r} excludes every offering that fits "
                    f"(cheapest {_cheapest(removed).instance_type})"
                ),
                "instanceTypeRegexp",
                f"instance type does not match {regexp.pattern!r}",
            )
        )
    cap = config.max_node_cost_per_hour
    if cap is not None:
        limit = cap
        out.append(
            ConfigFilter(
                f"no offering at or below maxNodeCostPerHour {limit}",
                lambda o: o.price <= limit,
                lambda removed: (
                    f"maxNodeCostPerHour {limit} excludes every offering that fits (cheapest "
                    f"{_cheapest(removed).instance_type} at ${_cheapest(removed).price:.2f}/h)"
                ),
                "maxNodeCostPerHour",
                f"above maxNodeCostPerHour {limit}",
            )
        )
    return out


def _global_filter(
    offerings: Sequence[Offering], config_filters: list[ConfigFilter]
) -> tuple[list[Offering], list[Offering], Rejection | None]:
    """Apply the configuration's filters: what is left, what was removed, and the filter that removed the last
    offering (if one did)."""
    remaining = list(offerings)
    removed: list[Offering] = []
    reason: Rejection | None = None
    for f in config_filters:
        kept: list[Offering] = []
        for o in remaining:
            (kept if f.keep(o) else removed).append(o)
        if remaining and not kept:
            reason = Rejection(Filter.CONFIGURATION, f.reason, f.key)
        remaining = kept
    return remaining, removed, reason


def daemonset_overhead(
    daemonsets: Sequence[DaemonSet],
    labels: Mapping[str, str],
    taints: Sequence[Taint],
    present: Sequence[str] = (),
) -> Resources:
    """What the DaemonSets whose pods would land on a node with these labels and taints take from it (the
    ones named in ``present`` already run there, so their pods are counted as pods)."""
    total = Resources()
    for ds in daemonsets:
        if f"{ds.namespace}/{ds.name}" in present:
            continue
        if (
            filters.node_affinity(ds.node_selector, ds.affinity, labels, None) is None
            and filters.taint_toleration(ds.tolerations, taints) is None
        ):
            total = total + ds.requests + {PODS: 1000}
    return total


T = TypeVar("T")


class OfferingsMemo(Generic[T]):
    """What a planner derives from one offerings list, one config and the DaemonSets, kept while the list and
    the config are the same objects and the DaemonSets are equal: planners run every reconcile, and offerings
    and config rarely change between them. Held by the objects, never by ``id()``: a freed list's id can come
    back on the next list, with other contents."""

    def __init__(self, build: Callable[[Sequence[Offering], Config, tuple[DaemonSet, ...]], T]) -> None:
        self._build = build
        self._kept: tuple[Sequence[Offering], Config, tuple[DaemonSet, ...], T] | None = None

    def get(self, offerings: Sequence[Offering], config: Config, daemonsets: Sequence[DaemonSet]) -> T:
        """The derived value, built again only when the offerings, config or DaemonSets changed."""
        ds = tuple(daemonsets)
        kept = self._kept
        if kept is None or kept[0] is not offerings or kept[1] is not config or kept[2] != ds:
            kept = self._kept = (offerings, config, ds, self._build(offerings, config, ds))
        return kept[3]
