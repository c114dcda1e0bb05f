"""When the simulated cloud next has something to do for its instances, so that an ``advance`` with nothing due
need not look at every one of them.

``advance`` runs at every call of the provider contract. With thousands of instances, each of its passes over
them (pending -> running, the kubelets' writes, terminated instances forgotten) costs more than the call it
precedes, and almost always finds nothing. After a whole pass, :class:`DueTimes` holds the earliest moment any
instance has something due (``until``); until then, only the instances launched or ended since (``touched``)
can have work, and only they are looked at. Anything it cannot vouch for (another state object, as a shared
state file reads anew in every transaction; a kubelet write that failed) makes the next pass a whole one.
"""

from __future__ import annotations

from collections.abc import Iterable

from providers.simulated.reservations import BLOCK_RECLAIM
from providers.simulated.state import PENDING, RUNNING, TERMINATED, CloudState, InstanceRecord

__all__ = ["MARGIN", "DueTimes", "next_due"]

# Seconds before a computed moment at which a whole pass is made anyway: the passes compare times in their own
# arithmetic (``now - terminated_at >= retention``), which may round the other way than a sum does.
MARGIN = 1e-3


def next_due(record: InstanceRecord, now: float, retention: float) -> float:
    """The earliest moment at or after which ``advance`` may have something to do for ``record``."""
    times = [float("inf")]
    r = record.offering.reservation
    if record.state != TERMINATED and r is not None and r.block and r.end is not None:
        times.append(r.end - BLOCK_RECLAIM)
    if record.state == PENDING:
        times.append(record.running_at)  # its Node is registered only once it runs
    elif record.state == RUNNING:
        if record.registered_at is None:
            times.append(record.register_at)
        elif record.offering.gpu_count and not record.gpus_reported:
            times.append(record.registered_at + record.gpu_ready_delay)
    elif record.registered_at is not None and not record.node_down:
        times.append(now)  # its Node is to go NotReady
    if record.terminated_at is not None:
        times.append(record.terminated_at + retention)
    return min(times) - MARGIN


class DueTimes:
    """What one state object's instances have due: nothing before ``until`` but for the ``touched`` ones."""

    def __init__(self) -> None:
        self.state: CloudState | None = None
        self.until = float("-inf")
        self.touched: dict[str, InstanceRecord] = {}
        self._order: dict[str, int] = {}  # the order instances were added to the state (its dict's order)

    def vouches(self, state: CloudState, now: float) -> bool:
        """Whether only the touched instances of ``state`` can have anything due at ``now``."""
        return state is self.state and now < self.until

    def added(self, record: InstanceRecord) -> None:
        """``record`` was just added to the state."""
        self._order[record.id] = len(self._order)
        self.touched[record.id] = record

    def touch(self, record: InstanceRecord) -> None:
        """``record`` changed outside a pass (it ended)."""
        self.touched[record.id] = record

    def take_touched(self) -> list[InstanceRecord]:
        """The touched instances, in the order a whole pass meets them; forgotten here."""
        order = self._order
        out = sorted(self.touched.values(), key=lambda r: order.get(r.id, -1))
        self.touched = {}
        return out

    def settle(self, state: CloudState, now: float, retention: float) -> None:
        """After a whole pass over ``state``: the next moment anything is due, and nothing touched."""
        records = state.instances.values()
        self.state = state
        self.until = min((next_due(r, now, retention) for r in records), default=float("inf"))
        self._order = {r.id: i for i, r in enumerate(records)}
        self.touched = {}

    def include(self, records: Iterable[InstanceRecord], now: float, retention: float) -> None:
        """Records looked at in a pass over the touched ones: what they have due next counts too."""
        for r in records:
            self.until = min(self.until, next_due(r, now, retention))

    def forget(self) -> None:
        """Nothing is vouched for: the next pass is a whole one."""
        self.state = None
        self.until = float("-inf")
