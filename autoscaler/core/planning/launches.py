"""Scale-up's last step: each node the plan opened becomes a launch of the cheapest instance type it may still
be, with the fallbacks a launch tries when that one has no capacity."""

from __future__ import annotations

from collections.abc import Mapping

from autoscaler.core.offering import Offering
from autoscaler.core.placement.bins import Option
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
    for b in engine.bins:
        if not b.new or not b.pods:
            continue
        classes = sorted(b.classes, key=repr) if len(b.classes) > 1 else list(b.classes)
        shape = (classes[0].capacity_types, *map(id, b.options))
        offering = cheapest.get(shape)
        if offering is None:
            offering = cheapest[shape] = newnodes.cheapest(b, classes)
        pods = tuple(sorted(b.pods))
        reason = mode_reasons.get(pods[0], "")
        settled = tuple(sorted(b.settled.items()))
        # A node opened for a queue with a budget falls back only within what the budget leaves, and
        # what its dearest fallback may add is kept from the nodes after it.
        queue = bin_queues.get(b.name, "")
        left = budget_left.queues.get(queue)
        budget = (queue, offering.price + max(0.0, left)) if left is not None else None
        key = (tuple(classes), b.mode, b.used, offering, settled, b.gpus, b.devices, reason, budget)
        found = cache.get(key)
        if found is None:
            fb = newnodes.fallbacks(b, offering, index, classes, budget, shapes)
            why = launch_why(b, offering, classes, index, reason, fb)
            found = cache[key] = (reserved.without_reserved(fb.offerings), why)
        if left is not None and found[0]:
            budget_left.queues[queue] = left - max(0.0, max(o.price for o in found[0]) - offering.price)
        mode = modes.get(b.mode)
        if mode is None:
            mode = modes[b.mode] = LaunchMode(b.mode)
        planned.append(Launch(offering, pods, mode, found[0], b.gang, found[1]))
    planned.sort(key=lambda la: (la.gang, la.offering.gpu_count == 0, price_order(la.offering), la.pods))
    return planned
