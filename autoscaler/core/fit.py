"""Which offerings may a pod get at all? Its constraints, its instance annotations and the node templates.

A new node of an offering must pass the same label and taint filters as a node that exists (the ones in
:mod:`autoscaler.core.placement.filters`, applied to the node's template); resources and the inter-pod filters
are the placement engine's. This module reads a pod's constraints and says which offerings are
*eligible*, and which filter removed the last one when none is.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields

from autoscaler.config.values import Config
from autoscaler.core import annotations as ann
from autoscaler.core.gpu.dra_demand import DRA_GPU
from autoscaler.core.gpu.layouts import mig_resources
from autoscaler.core.gpu.mig import MIG_RESOURCE_PREFIX
from autoscaler.core.gpu.names import gpu_model_name as gpu_model_name
from autoscaler.core.gpu.names import parse_gpu_sku as parse_gpu_sku
from autoscaler.core.gpu.share import GpuShare
from autoscaler.core.model import (
    CAPACITY_TYPES,
    LABEL_INSTANCE_TYPE,
    LABEL_RESERVATION_ID,
    RESERVED,
    NodeSelectorTerm,
    Pod,
    Taint,
    Toleration,
)
from autoscaler.core.new_nodes import GPU_TAINT as GPU_TAINT
from autoscaler.core.new_nodes import NewNodes
from autoscaler.core.new_nodes import node_labels as node_labels
from autoscaler.core.new_nodes import node_taints as node_taints
from autoscaler.core.offering import Offering, ReservationKind
from autoscaler.core.placement import filters
from autoscaler.core.placement.gpus import device_slots
from autoscaler.core.placement.reasons import Filter, Rejection
from autoscaler.core.resources import AMD_GPU, NVIDIA_GPU
from autoscaler.core.spot_risk import pod_interruption_hours

# Node labels naming the reservation a node runs in (tidal's, Karpenter's, GKE's): selecting on one asks for
# reserved capacity.
RESERVATION_LABELS = frozenset(
    {LABEL_RESERVATION_ID, "karpenter.k8s.aws/capacity-reservation-id", "cloud.google.com/reservation-name"}
)


class AnnotationError(ValueError):
    """A pod annotation tidal cannot use; the message names the annotation and its value."""


@dataclass(frozen=True, slots=True)
class Constraints:
    """Everything about a pod that narrows the offerings it may get (hashable: pods group by it)."""

    node_selector: tuple[tuple[str, str], ...] = ()
    affinity: tuple[NodeSelectorTerm, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    capacity_types: tuple[str, ...] = ("on-demand",)
    gpu_skus: tuple[str, ...] = ()
    family_inclusions: tuple[str, ...] = ()
    family_exclusions: tuple[str, ...] = ()
    type_regexp: str = ""
    max_cost: float | None = None
    partial_gpu: bool = False
    gpu_resource: str = ""
    # Part of a GPU asked of KAI (its GPU sharing): any offering whose GPUs can hold it.
    gpu_share: GpuShare | None = None
    # GPU types (model, memory MiB, GPUs per node) whose DRA devices satisfy the pod's ResourceClaims.
    dra_types: frozenset[tuple[str, int, int]] = frozenset()
    # The reservations (ids or names) the pod names (tidal.dev/capacity-reservation): it uses no other, and
    # only pods that name a targeted reservation use it.
    reservations: tuple[str, ...] = ()
    # The pod selects nodes by reservation label (nodeSelector or affinity on tidal.dev/reservation-id):
    # that asks for the reservations its selector matches, targeted ones included.
    selects_reservation: bool = False
    # Hours of a node's price one spot interruption costs the pod (work lost + restart), times
    # spot.rate_scale (the catalog's rates are a month's share): its spot offerings are ranked by their price
    # x (1 + interruption rate x this) (see autoscaler.core.spot_risk).
    interruption_hours: float = 0.0

    # The pod itself asks for something specific (selectors, affinity, instance annotations), which Luna
    # serves with a dedicated node; config-wide filters alone do not make a pod constrained.
    specific: bool = False
    # The hash, worked out on first use: constraint sets key most of the planner's tables, and hashing every
    # field each time was a good part of placing a pod.
    _hash: int | None = field(default=None, init=False, repr=False, compare=False)

    def __hash__(self) -> int:
        found = self._hash
        if found is None:
            found = hash(tuple([getattr(self, name) for name in _HASHED]))
            object.__setattr__(self, "_hash", found)
        return found

    def __getstate__(self) -> list[object]:
        # A hash holds only in the process that worked it out (string hashes are salted per process).
        return [None if f.name == "_hash" else getattr(self, f.name) for f in fields(self)]

    @property
    def constrained(self) -> bool:
        """The pod asks for something specific, which Luna serves with a dedicated node."""
        return self.specific


_HASHED = tuple(f.name for f in fields(Constraints) if f.compare)


def implicit_tolerations(pod: Pod) -> tuple[Toleration, ...]:
    """Tolerations the ExtendedResourceToleration admission plugin gives a pod for each extended resource it
    requests (GPU pods tolerate the GPU node taint). A pod read from the API server already carries them when
    the plugin is on; tidal adds them itself only when ``assumeExtendedResourceToleration`` says so."""
    return tuple(
        Toleration(key=r, operator="Exists", effect="NoSchedule")
        for r in (NVIDIA_GPU, AMD_GPU)
        if pod.requests.get(r)
    )


def pod_constraints(pod: Pod, config: Config) -> Constraints:
    """Read a pod's scheduling constraints and instance annotations; bad annotations raise AnnotationError."""
    a = pod.annotations
    capacity_types = config.capacity_types
    found = ann.lookup(a, ann.INSTANCE_OFFERINGS)
    if found:
        values = ann.split_list(found[1])
        bad = [v for v in values if v not in CAPACITY_TYPES]
        if bad or not values:
            raise AnnotationError(
                f"annotation {found[0]}: {found[1]!r} is not a list of {', '.join(CAPACITY_TYPES)} "
                "(e.g. reserved,spot,on-demand)"
            )
        capacity_types = tuple(dict.fromkeys(values))
    reservations: tuple[str, ...] = ()
    found = ann.lookup(a, ann.CAPACITY_RESERVATION)
    if found:
        reservations = ann.split_list(found[1])
        if not reservations:
            raise AnnotationError(f"annotation {found[0]}: {found[1]!r} names no capacity reservation")
    selects_reservation = any(k in pod.node_selector for k in RESERVATION_LABELS) or any(
        r.key in RESERVATION_LABELS for term in pod.affinity for r in term.expressions
    )
    if (reservations or selects_reservation) and RESERVED not in capacity_types:
        # Naming a reservation asks for reserved capacity whatever capacityTypes lists.
        capacity_types = (RESERVED, *capacity_types)
    gpu_skus = config.gpu_skus
    found = ann.lookup(a, ann.INSTANCE_GPU_SKUS)
    if found:
        gpu_skus = ann.split_list(found[1])
    inclusions = config.instance_family_inclusions
    found = ann.lookup(a, ann.INSTANCE_FAMILY_INCLUSIONS)
    if found:
        inclusions = ann.split_list(found[1])
    exclusions = config.instance_family_exclusions
    found = ann.lookup(a, ann.INSTANCE_FAMILY_EXCLUSIONS)
    if found:
        exclusions = ann.split_list(found[1])
    type_regexp = ""
    found = ann.lookup(a, ann.INSTANCE_TYPE_REGEXP)
    if found:
        try:
            re.compile(found[1])
        except re.error as err:
            raise AnnotationError(f"annotation {found[0]}: invalid regexp {found[1]!r}: {err}") from None
        type_regexp = found[1]
    max_cost = None
    found = ann.lookup(a, ann.INSTANCE_MAX_COST)
    if found:
        try:
            max_cost = float(found[1])
        except ValueError:
            max_cost = -1.0
        if not max_cost > 0 or max_cost != max_cost:
            raise AnnotationError(f"annotation {found[0]}: {found[1]!r} is not a positive price per hour")
    pins_type = (
        bool(type_regexp)
        or LABEL_INSTANCE_TYPE in pod.node_selector
        or any(r.key == LABEL_INSTANCE_TYPE for term in pod.affinity for r in term.expressions)
    )
    try:
        interruption_hours = config.spot.rate_scale * pod_interruption_hours(
            a, config.spot.interruption_cost_hours, config.spot.restart_time
        )
    except ValueError as err:
        raise AnnotationError(str(err)) from None
    gpu_resource = ""
    mig = mig_resources(pod.requests)
    if len(mig) > 1:
        raise AnnotationError(
            f"requests {', '.join(mig)}: a pod gets MIG instances of one profile (no layout tidal plans mixes them)"
        )
    if mig and (pod.requests.get(NVIDIA_GPU) or pod.gpu_share is not None):
        raise AnnotationError(f"requests {mig[0]} and a whole or shared GPU: no node tidal plans offers both")
    if pod.dra_types:
        gpu_resource = DRA_GPU
    elif mig:
        gpu_resource = mig[0]
    elif pod.requests.get(NVIDIA_GPU) or pod.gpu_share is not None:
        gpu_resource = NVIDIA_GPU
    elif pod.requests.get(AMD_GPU):
        gpu_resource = AMD_GPU
    return Constraints(
        node_selector=tuple(sorted(pod.node_selector.items())),
        affinity=pod.affinity,
        tolerations=pod.tolerations
        + (implicit_tolerations(pod) if config.assume_extended_resource_toleration else ()),
        capacity_types=capacity_types,
        gpu_skus=gpu_skus if gpu_resource else (),
        family_inclusions=inclusions,
        family_exclusions=exclusions,
        type_regexp=type_regexp,
        max_cost=max_cost,
        partial_gpu=ann.is_true(a, ann.INSTANCE_PARTIAL_GPU) or pins_type,
        gpu_resource=gpu_resource,
        gpu_share=pod.gpu_share,
        dra_types=pod.dra_types,
        reservations=reservations,
        selects_reservation=selects_reservation,
        interruption_hours=interruption_hours,
        specific=bool(pod.node_selector or pod.affinity)
        or any(ann.lookup(a, name) for name in ann.INSTANCE_ANNOTATIONS if name != ann.INSTANCE_OFFERINGS),
    )


# --- GPU models -------------------------------------------------------------------------------------


def gpu_sku_matches(sku: str, offering: Offering) -> bool:
    """True when the offering's GPU is the model ``sku`` names (memory within ±10% when it names memory)."""
    return _sku_matcher(parse_gpu_sku(sku))(offering, gpu_model_name(offering.gpu_model))


def _sku_matcher(parsed: tuple[str, int | None]) -> Callable[[Offering, str], bool]:
    """Whether an offering whose GPU model reduces to the given name is the parsed SKU."""
    model, mem_gb = parsed

    def matches(offering: Offering, offering_model: str) -> bool:
        if not offering.gpu_model or offering_model != model:
            return False
        if mem_gb is None:
            return True
        have = offering.gpu_memory_mib / 1024
        return abs(have - mem_gb) <= 0.1 * mem_gb

    return matches


# --- eligibility ------------------------------------------------------------------------------------

OfferingFilter = tuple[Rejection, Callable[[Offering], bool]]
_Keyed = tuple[object, Rejection, Callable[[Offering], bool]]


def _offering(message: str, key: str = "") -> Rejection:
    return Rejection(Filter.OFFERING, message, key)


def gpu_taint_rejection() -> Rejection:
    """Why a GPU pod without the GPU taint's toleration gets no GPU node, and what to do about it."""
    return Rejection(
        Filter.TAINT_TOLERATION,
        f"GPU nodes tidal launches are tainted {GPU_TAINT} (gpuNodeTaint) and the pod does not tolerate it: "
        "add the toleration, enable the ExtendedResourceToleration admission plugin "
        "(then set assumeExtendedResourceToleration), or set gpuNodeTaint: false",
        GPU_TAINT.key,
    )


def offering_filters(c: Constraints, config: Config, nodes: NewNodes | None = None) -> list[OfferingFilter]:
    """The pod-level filters, each with the rejection it gives when it removes the last offering.

    ``nodes`` holds the labels and taints of new nodes already worked out for ``config`` (an offering
    index's); without it they are worked out for these filters alone."""
    return [(rejection, keep) for _, rejection, keep in _keyed_filters(c, config, nodes)]


def _keyed_filters(c: Constraints, config: Config, nodes: NewNodes | None = None) -> list[_Keyed]:
    """:func:`offering_filters`, each with a key: the filter's kind and the parts of ``c`` it reads (two
    constraint sets whose filters have equal keys up to some point keep the same offerings up to there)."""
    new_nodes = nodes if nodes is not None and nodes.config is config else NewNodes(config)
    keys: list[object] = [("capacity-type", c.capacity_types)]
    out: list[OfferingFilter] = [
        (
            _offering(f"capacity type not in {','.join(c.capacity_types)}", "capacity-type"),
            lambda o: o.capacity_type in c.capacity_types,
        ),
    ]
    if c.reservations:
        names = c.reservations
        keys.append(("reservation", names))
        out.append(
            (
                _offering(
                    f"no reserved offering of reservation {','.join(names)} "
                    f"({ann.CAPACITY_RESERVATION} names it)",
                    "reservation",
                ),
                lambda o: o.reservation is None or o.reservation.named(names),
            )
        )
    elif not c.selects_reservation and RESERVED in c.capacity_types:
        keys.append(("targeted",))
        out.append(
            (
                _offering(
                    f"the reservations that fit are targeted: only pods that name one in "
                    f"{ann.CAPACITY_RESERVATION} use them",
                    "reservation",
                ),
                lambda o: o.reservation is None or o.reservation.kind != ReservationKind.TARGETED,
            )
        )
    if c.gpu_resource == DRA_GPU:
        kinds = c.dra_types
        keys.append(("dra", kinds))
        out.append(
            (
                _offering(
                    "no DRA GPU offering satisfies the pod's ResourceClaims (gpuSharing.dra enables them)",
                    DRA_GPU,
                ),
                lambda o: (
                    o.layout is not None
                    and o.layout.name == "dra"
                    and (o.gpu_model, o.gpu_memory_mib, o.gpu_count) in kinds
                ),
            )
        )
    elif c.gpu_resource.startswith(MIG_RESOURCE_PREFIX):
        resource = c.gpu_resource
        keys.append(("mig", resource))
        out.append(
            (
                _offering(
                    f"no offering has {resource}: give a GPU model whose GPUs offer this profile a MIG layout "
                    "that holds it (gpuSharing.migLayouts)",
                    resource,
                ),
                lambda o: o.layout is not None and any(name == resource for name, _ in o.layout.resources),
            )
        )
    elif c.gpu_resource:
        vendor = "AMD" if c.gpu_resource == AMD_GPU else "NVIDIA"
        keys.append(("gpu", c.gpu_resource))
        out.append(
            (
                _offering(f"no offering has {c.gpu_resource}", c.gpu_resource),
                lambda o: o.gpu_count > 0 and (o.gpu_vendor.upper() or "NVIDIA") == vendor,
            )
        )
    if c.gpu_share is not None:
        share = c.gpu_share
        # Offerings have a few kinds of GPUs: whether one holds the share is worked out once per kind.
        holds: dict[tuple[int, int, bool, float], bool] = {}

        def holds_share(o: Offering) -> bool:
            if o.layout is not None:
                return (
                    False  # KAI shares a whole device: not a MIG instance or a device-plugin replica of one
                )
            kind = (o.gpu_count, o.gpu_memory_mib, o.partial_gpu, o.gpu_fraction)
            found = holds.get(kind)
            if found is None:
                found = holds[kind] = device_slots(o).take(share) is not None
            return found

        keys.append(("share", share))
        out.append((_offering("no offering's GPU holds this GPU share", "gpu-share"), holds_share))
    elif not c.partial_gpu:
        keys.append(("partial",))
        out.append(
            (
                _offering(
                    "only partial-GPU sizes fit (annotate tidal.dev/instance-partial-gpu)", "partial-gpu"
                ),
                lambda o: not o.partial_gpu,
            )
        )
    if c.gpu_skus:
        skus = c.gpu_skus
        matchers = [_sku_matcher(parse_gpu_sku(s)) for s in skus]
        # Offerings share a few GPU models and memory sizes, all a matcher reads: each pair is looked at once.
        seen: dict[tuple[str, int], bool] = {}

        def has_sku(o: Offering) -> bool:
            gpu = (o.gpu_model, o.gpu_memory_mib)
            found = seen.get(gpu)
            if found is None:
                model = gpu_model_name(o.gpu_model)
                found = seen[gpu] = any(m(o, model) for m in matchers)
            return found

        keys.append(("gpu-sku", skus))
        out.append((_offering(f"no offering with GPU model {'|'.join(skus)}", "gpu-sku"), has_sku))
    if c.family_inclusions:
        inc = set(c.family_inclusions)
        keys.append(("family", c.family_inclusions))
        out.append(
            (
                _offering(f"no offering in families {','.join(c.family_inclusions)}", "family"),
                lambda o: o.family in inc,
            )
        )
    if c.family_exclusions:
        exc = set(c.family_exclusions)
        keys.append(("no-family", c.family_exclusions))
        out.append((_offering("every fitting family is excluded", "family"), lambda o: o.family not in exc))
    if c.type_regexp:
        # Luna's semantics: the regexp is searched for in the name (anchor it with ^…$ to match all of it).
        pattern = re.compile(c.type_regexp)
        keys.append(("instance-type", c.type_regexp))
        out.append(
            (
                _offering(f"no instance type matches {c.type_regexp!r}", "instance-type"),
                lambda o: pattern.search(o.instance_type) is not None,
            )
        )
    if c.max_cost is not None:
        cap = c.max_cost
        keys.append(("max-cost", cap))
        out.append((_offering(f"no offering at or below {cap}/h", "max-cost"), lambda o: o.price <= cap))
    if c.node_selector or c.affinity:
        want = dict(c.node_selector)
        terms = c.affinity
        what = "nodeSelector" if c.node_selector and not c.affinity else "required node affinity"
        if c.node_selector and c.affinity:
            what = "nodeSelector and required node affinity"
        keys.append(("node-affinity", c.node_selector, c.affinity))
        out.append(
            (
                Rejection(Filter.NODE_AFFINITY, f"{what} matches no offering"),
                lambda o: filters.node_affinity(want, terms, new_nodes.labels(o), None) is None,
            )
        )
    tols = c.tolerations
    taint_rejection = Rejection(Filter.TAINT_TOLERATION, "no offering whose node taints the pod tolerates")
    if c.gpu_resource and config.gpu_node_taint and not any(t.tolerates(GPU_TAINT) for t in tols):
        taint_rejection = gpu_taint_rejection()
    # New nodes carry a few sets of taints: whether the pod tolerates each is worked out once.
    tolerated: dict[tuple[Taint, ...], bool] = {}

    def tolerates(o: Offering) -> bool:
        taints = new_nodes.taints(o)
        found = tolerated.get(taints)
        if found is None:
            found = tolerated[taints] = filters.taint_toleration(tols, taints) is None
        return found

    keys.append(("taints", tols, taint_rejection))
    out.append((taint_rejection, tolerates))
    return [(key, rejection, keep) for key, (rejection, keep) in zip(keys, out, strict=True)]


def last_candidate(
    c: Constraints, offerings: Sequence[Offering], config: Config, nodes: NewNodes | None = None
) -> Offering | None:
    """The cheapest offering the filter that removed the last one removed: the nearest a pod came."""
    remaining = list(offerings)
    for _, keep in offering_filters(c, config, nodes):
        kept = [o for o in remaining if keep(o)]
        if not kept:
            return min(remaining, key=lambda o: (o.price, o.key), default=None)
        remaining = kept
    return None


def eligible_offerings(
    c: Constraints,
    offerings: Sequence[Offering],
    config: Config,
    nodes: NewNodes | None = None,
    *,
    typed: bool = False,
    memo: dict[tuple[object, ...], tuple[list[Offering], Rejection]] | None = None,
) -> tuple[list[Offering], Rejection | None]:
    """Offerings that satisfy the constraints, and the filter that removed the last one. ``typed`` says the
    offerings are already those of ``c``'s capacity types (the first filter): it is not run again.

    ``memo`` keeps what the filters applied so far left, by their keys, for offerings that are always the same
    list for the same capacity types (an offering index's): constraint sets that differ only in a later filter
    (the GPU model, say) then share the passes of the earlier ones over every offering."""
    remaining = list(offerings)
    prefix: tuple[object, ...] = ()
    for i, (key, rejection, keep) in enumerate(_keyed_filters(c, config, nodes)):
        if memo is not None:
            prefix = (*prefix, key)
            found = memo.get(prefix)
            if found is not None:
                remaining = found[0]
                if not remaining:
                    return [], found[1]
                continue
        if not (typed and i == 0 and remaining):
            remaining = [o for o in remaining if keep(o)]
        if memo is not None:
            memo[prefix] = (remaining, rejection)
        if not remaining:
            return [], rejection
    return (list(remaining) if memo is not None else remaining), None
