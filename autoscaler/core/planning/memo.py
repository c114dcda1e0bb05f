"""What the planner works out once per offering index and reuses on every later plan over it.

The controller keeps one :class:`~autoscaler.core.planning.offerings.OfferingIndex` while the offerings and the
configuration last, and the same nodes, pod sets and constraint classes come back every reconcile. The index
holds one :class:`PlanMemo`, so what is remembered lives and dies with what it was worked out from, and no
module keeps state of its own: two indexes never share an answer, and a new index starts from nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from autoscaler.core.fit import Constraints
    from autoscaler.core.gpu.share import GpuShare
    from autoscaler.core.offering import Offering, Reservation
    from autoscaler.core.placement.gpus import GpuSlots
    from autoscaler.core.planning.decisions import PlannedReplacement
    from autoscaler.core.planning.why import _Screening

__all__ = ["PlanMemo"]


@dataclass(slots=True)
class PlanMemo:
    """Answers kept for one offering index; every field is filled by the one function that reads it."""

    # Replacement plans per pod set, and per pod set and usage left when the limits are what decides
    # (disruption.replace.replacement).
    replacements: dict[tuple[object, ...], PlannedReplacement] = field(default_factory=dict)
    # Offerings by (instance type, zone, capacity type): every node is looked up each pass
    # (disruption.replace.node_offering).
    offerings_by_key: dict[tuple[str | None, ...], Offering] | None = None
    # Every offering with the first filter that keeps pods of some constraint classes off it, per
    # (classes, packing) (why.screened).
    screened: dict[tuple[tuple[Constraints, ...], bool], _Screening] = field(default_factory=dict)
    # The reservations the provider listed, by id (reserved.live).
    reservations: dict[str, Reservation] | None = None
    # How many pods of a GPU share empty devices take, at most a count (newnodes.per_node): the shapes a
    # share pod is weighed on have few distinct GPUs.
    share_counts: dict[tuple[GpuSlots, GpuShare, int], int] = field(default_factory=dict)
