"""Scale-up's last step: each node the plan opened becomes a launch of the cheapest instance type it may still
be, with the fallbacks a launch tries when that one has no capacity."""

from __future__ import annotations

from collections.abc import Mapping

from autoscaler.core.offering import Offering
from autoscaler.core.placement.bins import Bin, Option
from autoscaler.core.placement.engine import Engine
from autoscaler.core.planning import newnodes, reserved
from autoscaler.core.planning.decisions import Launch, LaunchMode
from autoscaler.core.planning.newnodes import Budget
from autoscaler.core.planning.offerings import OfferingIndex, price_order
from autoscaler.core.planning.why import LaunchWhy, launch_why

__all__ = ["launches"]


def launches(
    engine: Engine,
    index: OfferingIndex,
    budget_left: Budget,
    mode_reasons: Mapping[str, str],
    bin_queues: Mapping[str, str],
) -> list[Launch]:
    """Each new node with pods as a launch: the cheapest instance type it may still be, with fallbacks (within
    what the budget of the queue it was opened for leaves, which they are charged against). ``mode_reasons``
    says by pod why its mode was chosen, ``bin_queues`` by node the queue with a budget it was opened for."""
    planned = []
    cache: dict[tuple[object, ...], tuple[tuple[Offering, ...], LaunchWhy]] = {}
    # Nodes opened alike keep the very same options: their cheapest is looked for once (by identity, while
    # every node, and so every option, is held).
    cheapest: dict[tuple[object, ...], Offering] = {}
    modes: dict[str, LaunchMode] = {}
    shapes: dict[tuple[object, ...], list[tuple[Option, list[Offering]]]] = {}
    last: tuple[Bin, str, Offering, tuple[tuple[Offering, ...], LaunchWhy]] | None = None
    for b in engine.opened():
        if not b.pods:
            continue
        pods = tuple(sorted(b.pods))
        reason = mode_reasons.get(pods[0], "")
        # A node opened for a queue with a budget falls back only within what the budget leaves, and
        # what its dearest fallback may add is kept from the nodes after it.
        queue = bin_queues.get(b.name, "")
        left = budget_left.queues.get(queue)
        if left is None and last is not None and last[1] == reason and _alike(b, last[0]):
            # Opened alike with the node before it (a batch of one shape): the same launch but for its pods.
            offering, found = last[2], last[3]
        else:
            classes = sorted(b.classes, key=repr) if len(b.classes) > 1 else list(b.classes)
            shape = (classes[0].capacity_types, *map(id, b.options))
            known = cheapest.get(shape)
            if known is None:
                known = cheapest[shape] = newnodes.cheapest(b, classes)
            offering = known
            settled = tuple(sorted(b.settled.items()))
            budget = (queue, offering.price + max(0.0, left)) if left is not None else None
            key = (tuple(classes), b.mode, b.used, offering, settled, b.gpus, b.devices, reason, budget)
            made = cache.get(key)
            if made is None:
                fb = newnodes.fallbacks(b, offering, index, classes, budget, shapes)
                why = launch_why(b, offering, classes, index, reason, fb)
                made = cache[key] = (reserved.without_reserved(fb.offerings), why)
            found = made
            last = (b, reason, offering, found) if left is None else None
        if left is not None and found[0]:
            budget_left.queues[queue] = left - max(0.0, max(o.price for o in found[0]) - offering.price)
        mode = modes.get(b.mode)
        if mode is None:
            mode = modes[b.mode] = LaunchMode(b.mode)
        planned.append(Launch(offering, pods, mode, found[0], b.gang, found[1]))
    # Most launches share their offering with others: its place in price order is worked out once.
    orders: dict[Offering, tuple[float, str, str, str]] = {}

    def order(la: Launch) -> tuple[object, ...]:
        o = la.offering
        found = orders.get(o)
        if found is None:
            found = orders[o] = price_order(o)
        return (la.gang, o.gpu_count == 0, found, la.pods)

    planned.sort(key=order)
    return planned


def _alike(b: Bin, other: Bin) -> bool:
    """Whether ``b`` holds the same kind of pods on the same options as ``other`` (its classes, use and
    devices by identity, as nodes opened in one batch share them): every part of a launch's choice but its
    pods is then the same."""
    return (
        b.classes is other.classes
        and b.used is other.used
        and b.devices is other.devices
        and b.mode == other.mode
        and b.gpus == other.gpus
        and not b.settled
        and not other.settled
        # Options alike, in order: mostly the very same objects, which list equality passes at once.
        and b.options == other.options
    )
