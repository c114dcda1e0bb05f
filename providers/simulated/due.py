"""When the simulated cloud next has something to do for its instances, so that an ``advance`` with nothing due
need not look at every one of them.

``advance`` runs at every call of the provider contract. With thousands of instances, each of its passes over
them (pending -> running, the kubelets' writes, terminated instances forgotten) costs more than the call it
precedes, and almost always finds nothing. After a whole pass, :class:`DueTimes` holds when each instance next
has something due (the earliest of them is ``until``); a pass then looks only at the instances due by its time
and at those launched or ended since (``touched``), which may have work at any time. Anything it cannot vouch
for (another state object, as a shared state file reads anew in every transaction; a kubelet write that
failed) makes the next pass a whole one.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from providers.simulated.reservations import BLOCK_RECLAIM
from providers.simulated.state import PENDING, RUNNING, TERMINATED, CloudState, InstanceRecord

__all__ = ["MARGIN", "DueTimes", "next_due"]

# Seconds before a computed moment at which a whole pass is made anyway: the passes compare times in their own
# arithmetic (``now - terminated_at >= retention``), which may round the other way than a sum does.
MARGIN = 1e-3
_NEVER = float("inf") - MARGIN  # what an instance with nothing more to do has due


def next_due(record: InstanceRecord, now: float, retention: float) -> float:
    """The earliest moment at or after which ``advance`` may have something to do for ``record``."""
    # (The earliest of the moments below, kept as it goes: this runs for every instance in a whole pass.)
    due = float("inf")
    state = record.state
    r = record.offering.reservation
    if state != TERMINATED and r is not None and r.block and r.end is not None:
        due = r.end - BLOCK_RECLAIM
    if state == PENDING:
        due = min(due, record.running_at)  # its Node is registered only once it runs
    elif state == RUNNING:
        if record.registered_at is None:
            due = min(due, record.register_at)
        elif record.offering.gpu_count and not record.gpus_reported:
            due = min(due, record.registered_at + record.gpu_ready_delay)
    elif record.registered_at is not None and not record.node_down:
        due = min(due, now)  # its Node is to go NotReady
    if record.terminated_at is not None:
        due = min(due, record.terminated_at + retention)
    return due - MARGIN


class DueTimes:
    """What one state object's instances have due: when each one next has anything to do (as last worked out),
    and the ``touched`` ones (launched or ended since), which may have something due at any time."""

    def __init__(self) -> None:
        self.state: CloudState | None = None
        self.touched: dict[str, InstanceRecord] = {}
        self._order: dict[str, int] = {}  # the order instances were added to the state (its dict's order)
        self._due: dict[str, float] = {}  # each instance's next due moment, by id
        self._heap: list[tuple[float, int, str]] = []  # (due, order, id), entries since replaced left in

    @property
    def until(self) -> float:
        """The earliest moment an instance not touched has anything due."""
        heap, due = self._heap, self._due
        while heap and due.get(heap[0][2]) != heap[0][0]:
            heapq.heappop(heap)
        return heap[0][0] if heap else float("inf")

    def knows(self, state: CloudState) -> bool:
        """Whether what each instance of ``state`` has due is known (a pass need not look at every one)."""
        return state is self.state

    def added(self, record: InstanceRecord) -> None:
        """``record`` was just added to the state."""
        self._order[record.id] = len(self._order)
        self.touched[record.id] = record

    def touch(self, record: InstanceRecord) -> None:
        """``record`` changed outside a pass (it ended)."""
        self.touched[record.id] = record

    def take_due(self, state: CloudState, now: float) -> list[InstanceRecord]:
        """The instances of ``state`` with anything due by ``now`` and the touched ones, in the order a whole
        pass meets them: all a whole pass would find anything to do for. Each is forgotten here until the
        pass includes it again (:meth:`include`)."""
        found = dict(self.touched)
        heap, due = self._heap, self._due
        while heap and heap[0][0] <= now:
            when, _, iid = heapq.heappop(heap)
            if due.get(iid) == when:
                del due[iid]
                record = state.instances.get(iid)
                if record is not None:
                    found[iid] = record
        self.touched = {}
        order = self._order
        return sorted(found.values(), key=lambda r: order.get(r.id, -1))

    def settle(self, state: CloudState, now: float, retention: float) -> None:
        """After a whole pass over ``state``: when each instance next has anything due, and nothing touched."""
        records = state.instances.values()
        self.state = state
        self._order = {r.id: i for i, r in enumerate(records)}
        self._due = {r.id: next_due(r, now, retention) for r in records}
        self._heap = [(when, self._order[iid], iid) for iid, when in self._due.items() if when != _NEVER]
        heapq.heapify(self._heap)
        self.touched = {}

    def include(
        self, state: CloudState, records: Iterable[InstanceRecord], now: float, retention: float
    ) -> None:
        """Records of ``state`` looked at in a pass over some of them: what they have due next counts too
        (those the pass took out of the state, nothing)."""
        for r in records:
            if state.instances.get(r.id) is not r:
                self._due.pop(r.id, None)
                continue
            when = self._due[r.id] = next_due(r, now, retention)
            if when != _NEVER:
                heapq.heappush(self._heap, (when, self._order.get(r.id, -1), r.id))

    def forget(self) -> None:
        """Nothing is vouched for: the next pass is a whole one."""
        self.state = None
        self._due = {}
        self._heap = []
