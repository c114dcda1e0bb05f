"""What scale-down (and the KAI queues' costs) read of one node and its pods, kept with the node's room from
one plan to the next.

At every plan scale-down looks at every managed node: which of its pods are workload, which of them keep it
in use, how much of it they use, when they were bound (whether they are all young still), what new nodes
for them alone would be, what keeps it when it is busy, and when its annotation says it became unneeded. All
of it depends only on the Node object, the pod objects on it and the offerings' index (offerings and config);
what depends on the time as well (whether its pods are still young, how long it has been unneeded) is judged
again at every plan from what is kept here. :class:`~autoscaler.core.planning.rooms.NodeRooms` keeps each node's room while
the node and its pods stay the very same objects and the index the same; it keeps a :class:`NodeFacts` beside
each room, empty at first and filled by the first plan that reads it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from autoscaler.core.model import Pod
from autoscaler.core.offering import Offering
from autoscaler.core.planning.decisions import Blocked, PlannedReplacement

__all__ = ["NodeFacts", "Workload"]


@dataclass(slots=True)
class Workload:
    """A node's workload as scale-down counts it (with or without the KAI reservation pods that go with the
    pods sharing their GPUs), and what follows from it."""

    pods: list[Pod]
    kept: list[Pod]  # those that keep the node in use: the workload but KAI background pods
    utilization: float
    threshold: float
    # When the first of ``kept`` was bound (PodScheduled True), +inf without any, None when one of them is not
    # known to be bound: they are all young at ``now`` within ``w`` when ``now - bound_since <= w``.
    bound_since: float | None
    # Whether the node is busy: some pod keeps it in use, at or above its threshold. Such a node stays, but
    # while its pods are all young (then it may be replaced): its verdict changes with the time only then.
    busy: bool
    # What new nodes for ``kept`` alone would be, planned without limits, with the key of that plan
    # (see :func:`autoscaler.core.disruption.replace.replacement`); None until asked for.
    unlimited: tuple[PlannedReplacement | str, tuple[object, ...]] | None = None
    # What keeps the node, busy enough, when it is: the same every plan while its pods are.
    utilised: Blocked | None = None
    # What keeps the node while it has not been unneeded for long enough, as the last plan said it.
    waiting: Blocked | None = None
    # What a removal of the node names: its GPUs and the keys of ``pods`` (None until a removal is made).
    removed: tuple[int, tuple[str, ...]] | None = None


@dataclass(slots=True)
class NodeFacts:
    """Scale-down's facts about one node, by whether reservation pods move with the pods sharing them, and
    what the KAI queues' costs read of it."""

    by_shares: dict[bool, Workload] = field(default_factory=dict)
    # The node's offering (None when unknown) and the pods a queue's share of its price is counted from.
    priced: tuple[Offering | None, list[Pod]] | None = None
    # When the node was first seen unneeded, as its annotation says (None: no readable annotation); read
    # once, held in a one-item tuple (None until read).
    marked: tuple[float | None] | None = None
