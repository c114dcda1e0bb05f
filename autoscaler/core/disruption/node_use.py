"""Each node's workload and utilization as scale-down measures it, kept from one plan to the next.

Scale-down measures every managed node at every plan: the pods that would be lost with it, those that keep it
in use, the share of it they request, its mode's threshold. In a cluster of thousands of nodes almost every
node is, from one plan to the next, the same Node object with the same pod objects on it (Nodes and pods are
immutable values: one that changed is another object), and so measures the same. :class:`NodeUse` keeps each
node's measure with what it was taken from and takes it again only for a node that changed, or for every
node when the config did. A caller that plans again and again holds one and hands it to
:func:`autoscaler.core.planning.scaledown.scale_down`, as it hands the planner its ``NodeRooms``: what it
keeps is what the plan would work out again, so the plan stays a function of its input.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from operator import is_

from autoscaler.config.values import Config
from autoscaler.core.disruption import empty, underutilised
from autoscaler.core.disruption.protection import without_reservations
from autoscaler.core.disruption.protection import workload as workload_of
from autoscaler.core.model import Node, Pod
from autoscaler.core.planning.decisions import Block, Blocked, Hold

__all__ = ["Measure", "NodeUse", "measure"]


@dataclass(frozen=True, slots=True)
class Measure:
    """One node's measure for scale-down."""

    node: Node
    pods: tuple[Pod, ...]  # the node's pods it was taken from
    workload: list[Pod]  # the pods lost with the node (never changed once measured)
    kept: list[Pod]  # those of them that keep the node in use
    utilization: float
    threshold: float
    # Why the node stays when it is busy enough (its pods keep it, at or above its threshold), else None.
    utilised: Blocked | None


def measure(node: Node, pods: Sequence[Pod], config: Config, *, move_shares: bool) -> Measure:
    """``node``'s measure with ``pods`` on it. ``move_shares``: KAI reservation pods go with the pods sharing
    their GPUs, and so are not its workload."""
    # A pod tidal cannot fully read counts as workload whatever it says it is: its node is never empty.
    workload = workload_of(pods)
    if move_shares:
        workload = without_reservations(workload)
    kept = empty.kept(workload)
    util = underutilised.utilization(node, kept)
    threshold = underutilised.threshold(node, config)
    utilised = None
    if kept and util >= threshold:
        detail = f"utilization {util:.2f} is at or above {threshold:.2f} ({underutilised.mode(node)})"
        utilised = Blocked(node.name, (Block(Hold.UTILISED, detail),))
    return Measure(node, tuple(pods), workload, kept, util, threshold, utilised)


class NodeUse:
    """Each node's measure, remembered from the last plan while it holds."""

    def __init__(self) -> None:
        self._basis: tuple[Config, bool] | None = None
        self._last: dict[str, Measure] = {}
        self._next: dict[str, Measure] = {}
        self.measured = 0  # nodes measured (not reused) over its life

    def of(self, node: Node, pods: Sequence[Pod], config: Config, *, move_shares: bool) -> Measure:
        """What ``measure(node, pods, config, move_shares=...)`` gives."""
        if self._basis is None or self._basis[0] is not config or self._basis[1] != move_shares:
            self._basis = (config, move_shares)
            self._last, self._next = {}, {}
        seen = self._last.get(node.name)
        if (
            seen is None
            or seen.node is not node
            or len(seen.pods) != len(pods)
            or not all(map(is_, seen.pods, pods))
        ):
            seen = measure(node, pods, config, move_shares=move_shares)
            self.measured += 1
        self._next[node.name] = seen
        return seen

    def done(self) -> None:
        """The plan measured every node it would: nodes it did not measure are forgotten."""
        self._last, self._next = self._next, {}
