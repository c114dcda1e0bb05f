"""The planner's inputs and outputs: what already exists, what to launch, what to remove, and why."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from autoscaler.core.demand import Ignored
from autoscaler.core.disruption.method import Method
from autoscaler.core.model import Pod
from autoscaler.core.offering import Offering
from autoscaler.core.placement.reasons import Filter, Rejection

if TYPE_CHECKING:
    from autoscaler.core.planning.why import LaunchWhy


class LaunchMode(enum.StrEnum):
    """How a launch chose its node: the cheapest offering that holds one pod's worth (selection), or a node
    packed with as many pods as fit (packing). The value is what reports and ``tidal plan`` print."""

    SELECTION = "bin-selection"
    PACKING = "bin-packing"


# Short names for the members; a node's mode written into one of its labels is converted to its ``.value``.
BIN_SELECTION = LaunchMode.SELECTION
BIN_PACKING = LaunchMode.PACKING


@dataclass(frozen=True, slots=True)
class Launching:
    """A node the cloud is bringing up that has no Node object yet: it will be ``offering``, and it was
    launched for ``pods`` (which may still be pending)."""

    name: str
    offering: Offering
    pods: tuple[Pod, ...] = ()


@dataclass(frozen=True, slots=True)
class Usage:
    """What the cluster already holds, counted against the limits (existing and launching nodes)."""

    gpus: int = 0
    cpu_milli: int = 0
    managed_nodes: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.gpus + other.gpus, self.cpu_milli + other.cpu_milli, self.managed_nodes + other.managed_nodes
        )

    @classmethod
    def of(cls, offerings: Iterable[Offering]) -> Usage:
        """What new nodes of these offerings count against the limits."""
        gpus = cpu = n = 0
        for o in offerings:
            gpus += o.gpu_count
            cpu += o.vcpu * 1000
            n += 1
        return cls(gpus, cpu, n)


NO_USAGE = Usage()


@dataclass(frozen=True, slots=True)
class PlannedReplacement:
    """New nodes planned for the pods of nodes that may be replaced: their cost per hour, what kept a pod
    off every new node (empty when all were placed), the limits they use and the launches."""

    cost: float
    unplaced: str
    usage: Usage
    launches: tuple[Launch, ...]


@dataclass(frozen=True, slots=True)
class QueueSpend:
    """What the nodes that exist or launch cost each KAI queue they serve ($/h, by queue), and the nodes no pod
    runs on yet, with their price: the first queue whose pods a plan puts on one pays for all of it (a GPU
    node waiting for its drivers has no pod bound, but is already bought for the pods that wait for it)."""

    by_queue: Mapping[str, float] = field(default_factory=dict)
    unclaimed: Mapping[str, float] = field(default_factory=dict)


NO_SPEND = QueueSpend()


@dataclass(frozen=True, slots=True)
class Launch:
    """One node to launch: the chosen offering, fallbacks for a capacity error, and the pods it is for."""

    offering: Offering
    pods: tuple[str, ...]
    mode: LaunchMode
    alternatives: tuple[Offering, ...] = ()
    gang: str = ""
    # Why this offering (candidates, filters, fallbacks' cap, idle GPUs): see autoscaler.core.planning.why.
    why: LaunchWhy | None = field(default=None, compare=False)

    @property
    def candidates(self) -> tuple[Offering, ...]:
        """The offering first, then the fallbacks, in the order a provider should try them."""
        return (self.offering, *self.alternatives)


class Shortfall(enum.StrEnum):
    """What kind of "no" left a pod unplaced; the value is the ``reason`` label of its metric."""

    CLUSTER_GPU_LIMIT = "clusterGPULimit"
    CLUSTER_CPU_LIMIT = "clusterCPULimit"
    MAX_NODES = "maxNodes"
    GANG = "gang"
    NO_OFFERING = "no-offering"
    QUEUE_BUDGET = "queueBudget"
    OTHER = "other"


_LIMITS = {
    s.value: s for s in (Shortfall.CLUSTER_GPU_LIMIT, Shortfall.CLUSTER_CPU_LIMIT, Shortfall.MAX_NODES)
}


@dataclass(frozen=True, slots=True)
class Unplaced:
    """A pod that fits nowhere, with why: the filter that removed the last candidate, in words and in kind."""

    pod: str
    reason: str
    # A cluster limit (clusterGPULimit, clusterCPULimit, maxNodes) left it out, not a lack of fitting offerings.
    limited: bool = False
    rejection: Rejection | None = None
    # The offering that came closest, and what it lacks (empty when no offering is near: a limit, a gang).
    nearest: str = ""
    gang: str = ""  # the gang (namespace/name) that could not be placed whole, when that is why
    # The offering filters (the pod's own constraints, the configuration, the size of its request) left no
    # offering, as opposed to a new node that the pod's scheduling constraints would not take.
    no_offering: bool = False

    @property
    def shortfall(self) -> Shortfall:
        """The kind of this verdict: a gang not placed whole, the cluster limit or queue budget that is used
        up (by the rejection's filter and key), no offering left (``no_offering``), or something else."""
        if self.gang:
            return Shortfall.GANG
        r = self.rejection
        if r is not None and r.filter == Filter.CLUSTER_LIMIT and r.key in _LIMITS:
            return _LIMITS[r.key]
        if r is not None and r.filter == Filter.QUEUE_BUDGET:
            return Shortfall.QUEUE_BUDGET
        return Shortfall.NO_OFFERING if self.no_offering else Shortfall.OTHER


@dataclass(frozen=True, slots=True)
class LaunchPlan:
    launches: tuple[Launch, ...] = ()
    unplaced: tuple[Unplaced, ...] = ()
    absorbed: tuple[Ignored, ...] = ()
    gpus_before: int = 0
    gpus_after: int = 0

    @property
    def cost_per_hour(self) -> float:
        return round(sum(launch.offering.price for launch in self.launches), 6)


@dataclass(frozen=True, slots=True)
class Removal:
    """A node to take out of service: why, by which method (``autoscaler.core.disruption.method.Method``), the pods
    to evict, and the nodes to launch (and see Ready) before any of them is evicted."""

    node: str
    reason: str
    empty: bool
    pods: tuple[str, ...]
    method: Method  # the kind of removal, of which ``reason`` is the detail
    replacement: tuple[Launch, ...] = ()
    gpus: int = 0  # the node's GPUs, which its removal takes out of the cluster


class Hold(enum.StrEnum):
    """What kind of "not now" keeps a managed node from being removed; its :class:`Block` says the rest."""

    # Another disruption, a drain or a replacement is under way on it, it is annotated do-not-disrupt, or a
    # method that does not wait for it to be unneeded holds it.
    DISRUPTING = "disrupting"
    PENDING_PODS = "pendingPods"  # pods waiting to be scheduled will run on it
    UNREADABLE = "unreadable"  # tidal cannot read all of its Node
    RESERVATION = "reservation"  # the reservation it runs in keeps it
    UTILISED = "utilised"  # its utilization is at or above the threshold
    PODS_STAY = "podsStay"  # its pods may not be evicted, fit nowhere else, or no cheaper node takes them
    RETRY_LATER = "retryLater"  # a replacement of it was given up a while ago
    UNNEEDED_TOO_SHORT = "unneededTooShort"  # unneeded for less than nodeUnneededDuration
    NEW_NODE = "newNode"  # younger than newNodeGracePeriod
    CLUSTER_LIMIT = "clusterLimit"  # a replacement would exceed a cluster limit while both run
    CLUSTER_FAULT = "clusterFault"  # too many nodes are unhealthy for new ones to help
    GANG = "gang"  # it holds part of a running gang that would be left behind
    BUDGET = "budget"  # a disruption budget allows no more now


@dataclass(frozen=True, slots=True)
class Block:
    """One reason a node stays: its kind, and the words reports print."""

    kind: Hold
    detail: str


@dataclass(frozen=True, slots=True)
class Blocked:
    """A managed node that stays, with every reason found for it, in the order they were found."""

    node: str
    blocks: tuple[Block, ...]

    @property
    def reason(self) -> str:
        """The reasons as reports print them."""
        return "; ".join(b.detail for b in self.blocks)

    @property
    def kinds(self) -> tuple[Hold, ...]:
        return tuple(b.kind for b in self.blocks)


@dataclass(frozen=True, slots=True)
class RemovalPlan:
    removals: tuple[Removal, ...] = ()
    blocked: tuple[Blocked, ...] = ()
    # Managed nodes that became unneeded in this snapshot, with the time they were first seen so.
    unneeded_since: Mapping[str, float] = field(default_factory=dict)
    # The next time a blocked node may become removable with nothing else changing (a lifetime ending, a
    # condition lasting long enough, a retry time passing), for whoever plans when to look again.
    next_check: float | None = None
