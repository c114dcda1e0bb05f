"""The simulated cloud's listing of one cluster's instances, oldest first then by id, kept up to date as
instances are launched, change state and are forgotten.

A cluster of thousands of nodes is listed several times a reconcile, and between two listings a few instances
change: sorting every record and walking all of them again each time cost more than the reconcile's use of the
listing. :class:`Listing` keeps the contract view of each instance in listing order and changes only the
entries of the instances that changed. It is kept for one state object (the in-memory one): a state read anew
(as a shared state file is, in every transaction) is listed from scratch.
"""

from __future__ import annotations

from operator import attrgetter

from autoscaler.core.model import LABEL_CLUSTER
from autoscaler.core.offering import Instance
from providers.simulated.state import TERMINATED, CloudState, InstanceRecord

__all__ = ["Listing"]

_LAUNCH_ORDER = attrgetter("created", "id")  # how instances are listed: oldest first, then by id


class Listing:
    """Each listed instance's view, by id, in listing order."""

    def __init__(self, cluster: str) -> None:
        self.cluster = cluster
        self._state: CloudState | None = None
        self._views: dict[str, Instance] = {}
        self._live: set[str] = set()  # the listed instances not terminated
        # Whether an instance was added out of listing order since the views were last put in order.
        self._unordered = False

    def of(self, state: CloudState) -> list[Instance]:
        """The instances of ``state`` tagged with this cluster, in listing order."""
        if state is not self._state:
            self._rebuild(state)
        elif self._unordered:
            # Instances launched at one moment are listed by id: a batch of them is put in order once, when
            # next listed, rather than each one moved past the others as it comes.
            self._views = {v.id: v for v in sorted(self._views.values(), key=_LAUNCH_ORDER)}
            self._unordered = False
        return list(self._views.values())

    def live_ids(self, state: CloudState) -> set[str]:
        """The ids of the instances of ``state`` tagged with this cluster and not terminated (a copy)."""
        if state is not self._state:
            self._rebuild(state)
        return set(self._live)

    def _rebuild(self, state: CloudState) -> None:
        old = self._views
        views: dict[str, Instance] = {}
        for r in sorted(state.instances.values(), key=_LAUNCH_ORDER):
            if r.tags.get(LABEL_CLUSTER) != self.cluster:
                continue
            view = old.get(r.id)
            views[r.id] = view if view is not None and view.state == r.state else r.instance()
        self._views = views
        self._live = {i for i, view in views.items() if view.state != TERMINATED}
        self._unordered = False
        self._state = state

    def added(self, state: CloudState, record: InstanceRecord) -> None:
        """``record`` was just added to ``state``."""
        if state is not self._state or record.tags.get(LABEL_CLUSTER) != self.cluster:
            return
        views = self._views
        # A new instance is the newest; among those launched at the same moment it goes by its id.
        if views and not self._unordered:
            last = views[next(reversed(views))]
            self._unordered = (last.created, last.id) > (record.created, record.id)
        views[record.id] = record.instance()
        if record.state != TERMINATED:
            self._live.add(record.id)

    def changed(self, state: CloudState, record: InstanceRecord) -> None:
        """``record`` of ``state`` changed state."""
        if state is self._state and record.id in self._views:
            self._views[record.id] = record.instance()
            if record.state == TERMINATED:
                self._live.discard(record.id)
            else:
                self._live.add(record.id)

    def forgotten(self, state: CloudState, record: InstanceRecord) -> None:
        """``record`` was taken out of ``state``."""
        if state is self._state:
            self._views.pop(record.id, None)
            self._live.discard(record.id)
