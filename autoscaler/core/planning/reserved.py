"""Reserved capacity in a plan: what each reservation still takes, and why one takes nothing.

Reservations arrive as offerings (capacity type ``reserved``, price 0: they are paid for whether used or not),
so the planner prefers them by price alone. What is particular to them is decided here, pure and with the time
passed in:

- a reservation's free count is a hard cap: the plan never puts more new nodes into it than it has free;
- a Capacity Block takes nothing before it starts, nor from ``reservations.drainBeforeBlockEnd`` before it
  ends (its nodes are drained then); pods that only it would hold wait, with its start in their reason,
  unless ``reservations.beforeBlockStart`` is on-demand;
- a node planned into one reservation stays in it: it may not become another reservation's node, nor fall
  back to one (neither was counted for it), and a node planned as spot or on-demand never becomes reserved;
- scale-down keeps a node whose reservation lasts (removing it saves nothing) unless
  ``reservations.reservedNodes`` is release.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from autoscaler.config.values import KEEP, Config
from autoscaler.core.fit import Constraints
from autoscaler.core.model import (
    LABEL_RESERVATION_END,
    LABEL_RESERVATION_ID,
    LABEL_RESERVATION_TYPE,
    ON_DEMAND,
    Node,
)
from autoscaler.core.offering import Offering, Reservation, ReservationKind
from autoscaler.core.placement.bins import Option
from autoscaler.core.placement.reasons import Filter, Rejection
from autoscaler.core.planning.memo import PlanMemo

__all__ = [
    "BLOCK_NOT_STARTED",
    "Ending",
    "InFlight",
    "ReservedRoom",
    "ending_blocks",
    "keeps",
    "meanwhile",
    "same_capacity",
    "without_reserved",
]

# Rejection keys: why a reservation takes no new node.
BLOCK_NOT_STARTED = "block-not-started"
BLOCK_ENDING = "block-ending"
FULL = "reservation-full"
_PREFERENCE = (BLOCK_NOT_STARTED, FULL, BLOCK_ENDING)


def when(ts: float) -> str:
    """Epoch seconds as an RFC 3339 UTC time, as reasons name times."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def reservations(offerings: Iterable[Offering]) -> dict[str, Reservation]:
    """The reservations behind reserved offerings, by id (the first offering of each says its state)."""
    found: dict[str, Reservation] = {}
    for o in offerings:
        if o.reservation is not None:
            found.setdefault(o.reservation.id, o.reservation)
    return found


@dataclass(slots=True)
class ReservedRoom:
    """How many more new nodes each reservation takes in this plan, and why one takes none at all."""

    free: dict[str, int]
    closed: dict[str, Rejection]

    @classmethod
    def of(cls, offerings: Iterable[Offering], config: Config, now: float | None) -> ReservedRoom:
        """Each reservation's free count, or none for a Capacity Block outside its window (with ``now``
        unknown, a block takes nothing: its window cannot be checked)."""
        free: dict[str, int] = {}
        closed: dict[str, Rejection] = {}
        lead = config.reservations.drain_before_block_end
        for rid, r in reservations(offerings).items():
            free[rid] = max(0, r.available)
            if not r.block:
                continue
            if now is None or (r.start is not None and now < r.start):
                free[rid] = 0
                start = f"starts at {when(r.start)}" if r.start is not None else "has not started"
                closed[rid] = Rejection(
                    Filter.RESERVATION,
                    f"waits for Capacity Block {rid}, which {start}",
                    BLOCK_NOT_STARTED,
                )
            elif r.end is not None and now >= r.end - lead:
                free[rid] = 0
                closed[rid] = Rejection(
                    Filter.RESERVATION,
                    f"Capacity Block {rid} ends at {when(r.end)}: no new node goes into it within "
                    f"reservations.drainBeforeBlockEnd of its end",
                    BLOCK_ENDING,
                )
        return cls(free, closed)

    def left(self, o: Offering) -> int:
        """How many more nodes of ``o`` its reservation takes (unbounded for an offering of no reservation)."""
        if o.reservation is None:
            return 1 << 30
        return self.free.get(o.reservation.id, 0)

    def take(self, o: Offering, sign: int = 1) -> None:
        if o.reservation is not None:
            rid = o.reservation.id
            self.free[rid] = self.free.get(rid, 0) - sign

    def rejection(self, held: Sequence[Offering]) -> Rejection:
        """Why pods that only these reserved offerings would hold wait: a block not yet started first (it
        says when capacity comes), then a reservation already full."""
        found: list[Rejection] = []
        for o in held:
            r = o.reservation
            if r is None:
                continue
            closed = self.closed.get(r.id)
            if closed is not None:
                found.append(closed)
            else:
                found.append(
                    Rejection(
                        Filter.RESERVATION,
                        f"reservation {r.id} ({r.total or r.available} x {o.instance_type} in {o.zone or 'its zone'}) "
                        "has no free instance left",
                        FULL,
                    )
                )
        if not found:
            return Rejection(Filter.RESERVATION, "no reservation has a free instance left", FULL)
        return min(found, key=lambda rej: (_PREFERENCE.index(rej.key), rej.message))


def rank(o: Offering, per_node: int) -> float:
    """Among offerings of equal price (reservations are all free), the on-demand value of the reserved
    capacity one pod uses up: a 1-GPU pod takes a free 1-GPU node before a free 8-GPU one."""
    return o.reservation.on_demand_price / per_node if o.reservation is not None else 0.0


def same_capacity(options: Sequence[Option], chosen: Offering) -> list[Option]:
    """The options a node opened as ``chosen`` may still become: in the same reservation when it is a
    reserved node, in none when it is not (its reservation count was charged, or none was)."""
    rid = chosen.reservation.id if chosen.reservation is not None else None
    return [
        opt for opt in options if (opt.cheapest.reservation.id if opt.cheapest.reservation else None) == rid
    ]


def without_reserved(alternatives: Iterable[Offering]) -> tuple[Offering, ...]:
    """Fallbacks never go into a reservation: none was counted for this node."""
    return tuple(o for o in alternatives if o.reservation is None)


def meanwhile(c: Constraints, why: Rejection, config: Config) -> Constraints | None:
    """For pods that wait for a Capacity Block not yet started, the constraints that let them buy
    on-demand capacity meanwhile, when ``reservations.beforeBlockStart`` says so (else None)."""
    if (
        why.key != BLOCK_NOT_STARTED
        or config.reservations.before_block_start != ON_DEMAND
        or ON_DEMAND in c.capacity_types
    ):
        return None
    return replace(c, capacity_types=(*c.capacity_types, ON_DEMAND))


class InFlight:
    """Offerings with each reservation's free count less the nodes launched into it since the provider
    counted (offerings are read every few minutes; launches go out every reconcile). The very same list while
    nothing was launched into a reservation since, and the same derived list while that does not change, so
    the planner's work keyed on the list is kept."""

    def __init__(self) -> None:
        self._ids: tuple[Sequence[Offering], frozenset[str]] | None = None
        self._view: tuple[Sequence[Offering], tuple[tuple[str, int], ...], list[Offering]] | None = None

    def reserves(self, offerings: Sequence[Offering]) -> bool:
        """Whether any of ``offerings`` is a reservation's: without one, :meth:`apply` gives them back as they
        are, whatever was launched (and the caller need not count launches into reservations)."""
        return bool(self._reservation_ids(offerings))

    def _reservation_ids(self, offerings: Sequence[Offering]) -> frozenset[str]:
        if self._ids is None or self._ids[0] is not offerings:
            self._ids = (offerings, frozenset(reservations(offerings)))
        return self._ids[1]

    def apply(self, offerings: Sequence[Offering], launched: Mapping[str, int]) -> Sequence[Offering]:
        ids = self._reservation_ids(offerings)
        spent = tuple(sorted((rid, n) for rid, n in launched.items() if n and rid in ids))
        if not spent:
            return offerings
        if self._view is not None and self._view[0] is offerings and self._view[1] == spent:
            return self._view[2]
        taken = dict(spent)
        view = [
            replace(
                o, reservation=replace(o.reservation, available=max(0, o.reservation.available - taken[rid]))
            )
            if o.reservation is not None and (rid := o.reservation.id) in taken
            else o
            for o in offerings
        ]
        self._view = (offerings, spent, view)
        return view


# --- nodes in reservations --------------------------------------------------------------------------------


def live(memo: PlanMemo, offerings: Iterable[Offering]) -> dict[str, Reservation]:
    """The reservations the provider lists now, kept in the offering index's memo (every node is asked each
    pass)."""
    found = memo.reservations
    if found is None:
        found = memo.reservations = reservations(offerings)
    return found


def keeps(node: Node, listed: Mapping[str, Reservation], config: Config, now: float) -> str:
    """Why scale-down keeps ``node`` whatever its use: it runs in a reservation that lasts, which is paid for
    whether the node runs or not (empty string when it does not, or ``reservedNodes`` is release)."""
    rid = node.labels.get(LABEL_RESERVATION_ID)
    if not rid or config.reservations.reserved_nodes != KEEP:
        return ""  # asked of every node: an unreserved one is told by one label read
    r = listed.get(rid)
    if r is None:
        return ""  # not reserved, or its reservation is gone: it costs what any node costs now
    if r.block and r.end is not None and now >= r.end - config.reservations.drain_before_block_end:
        return ""  # its block is ending: it is drained for that
    return (
        f"runs in reservation {rid}, paid for whether used or not: removing it saves nothing "
        "(reservations.reservedNodes: release removes such nodes)"
    )


@dataclass(frozen=True, slots=True)
class Ending:
    """A node on a Capacity Block that ends soon: drain it now."""

    node: str
    reservation: str
    end: float

    @property
    def reason(self) -> str:
        return f"Capacity Block {self.reservation} ends at {when(self.end)}"


def block_end(node: Node, listed: Mapping[str, Reservation]) -> tuple[str, float] | None:
    """The Capacity Block a node runs in and when it ends: the provider's word while it lists the block
    (an extended block ends later), else the end the node was labelled with at launch."""
    rid = node.labels.get(LABEL_RESERVATION_ID, "")
    r = listed.get(rid)
    if r is not None:
        return (rid, r.end) if r.block and r.end is not None else None
    if node.labels.get(LABEL_RESERVATION_TYPE) != ReservationKind.CAPACITY_BLOCK.value:
        return None
    end = node.labels.get(LABEL_RESERVATION_END, "")
    return (rid, float(end)) if end.isdigit() else None


def ending_blocks(
    nodes: Iterable[Node], offerings: Iterable[Offering], config: Config, now: float
) -> list[Ending]:
    """Managed nodes whose Capacity Block ends within ``reservations.drainBeforeBlockEnd``, by name."""
    listed = reservations(offerings)
    lead = config.reservations.drain_before_block_end
    # Only a node labelled a Capacity Block's, or in a block the provider lists, can be on one: one label
    # read tells the others apart, which most nodes of a cluster without blocks are.
    blocks = {rid for rid, r in listed.items() if r.block and r.end is not None}
    block_type = ReservationKind.CAPACITY_BLOCK.value
    out = []
    for node in nodes:
        if not node.managed or node.deleting:
            continue
        labels = node.labels
        if labels.get(LABEL_RESERVATION_TYPE) != block_type and (
            not blocks or labels.get(LABEL_RESERVATION_ID, "") not in blocks
        ):
            continue
        found = block_end(node, listed)
        if found is not None and now >= found[1] - lead:
            out.append(Ending(node.name, found[0], found[1]))
    return sorted(out, key=lambda e: e.node)  # the few found, not every node, put in order
