"""Reservations and Capacity Blocks in the simulated cloud: what each has free, and why a launch into one is
refused, as EC2 answers (a block takes nothing before it starts, nor from 30 minutes before its end, when EC2
starts terminating its instances)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from autoscaler.cloud import Attempt, Refusal
from autoscaler.core.model import ON_DEMAND, RESERVED
from autoscaler.core.offering import Offering, Reservation
from providers.simulated.settings import SimReservation
from providers.simulated.state import TERMINATED, CloudState

__all__ = ["BLOCK_RECLAIM", "reservation_refusal", "reserved_offerings"]

BLOCK_RECLAIM = 1800.0  # a Capacity Block's instances are terminated from this long before its end, as on EC2


def reserved_offerings(
    reservations: Iterable[SimReservation], by_key: Mapping[str, Offering], state: CloudState, now: float
) -> list[Offering]:
    """An offering per reservation until it ends, with what it has free (live instances in it deducted)."""
    out = []
    for r in reservations:
        if r.end is not None and now >= r.end:
            continue  # over: the cloud no longer lists it
        used = sum(
            1
            for rec in state.instances.values()
            if rec.state != TERMINATED
            and rec.offering.reservation is not None
            and rec.offering.reservation.id == r.id
        )
        out.append(_reserved_offering(r, by_key[f"{r.instance_type}/{r.zone}/{ON_DEMAND}"], used))
    return out


def _reserved_offering(r: SimReservation, base: Offering, used: int) -> Offering:
    """``base`` as reservation ``r``'s offering, with what it has free."""
    reservation = Reservation(
        r.id,
        r.kind,
        available=max(0, r.count - used),
        total=r.count,
        start=r.start,
        end=r.end,
        on_demand_price=base.price,
    )
    return dataclasses.replace(
        base, capacity_type=RESERVED, price=0.0, price_source="reservation", reservation=reservation
    )


def reservation_refusal(candidate: Offering, listed: Offering | None, now: float) -> Attempt | None:
    """Why the cloud refuses to launch ``candidate`` into its reservation (None: it takes it)."""
    r = listed.reservation if listed is not None else None
    if listed is None or r is None or listed.key != candidate.key:
        return Attempt(candidate, Refusal.INVALID, "no such reservation (or it has ended)")
    if r.start is not None and now < r.start:
        return Attempt(candidate, Refusal.INVALID, f"reservation {r.id} has not started")
    if r.block and r.end is not None and now >= r.end - BLOCK_RECLAIM:
        return Attempt(candidate, Refusal.INVALID, f"Capacity Block {r.id} is ending")
    if r.available < 1:
        return Attempt(candidate, Refusal.NO_CAPACITY, f"reservation {r.id} has no free instance")
    return None
