"""The batch window: react to a burst of unschedulable pods once, soon, and with all of them.

The first unschedulable pod opens a window. It closes when no new pod arrived for ``batchIdleDuration`` or
``batchMaxDuration`` after it opened, whichever comes first; with no trigger, a reconcile still runs every
``scanInterval``.

The window holds back only what waiting can make cheaper. Every arrival wakes the loop at once for a
reconcile made with the window open, which launches what no later pod could share
(:mod:`autoscaler.core.planning.window`) and leaves the rest to the reconcile that closes the window; a
steady stream of pods that each fill a node is served as it arrives instead of waiting up to
``batchMaxDuration``.
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable


class Wake(enum.StrEnum):
    """Why the loop woke up."""

    BATCH = "batch"  # the window closed: reconcile with everything it gathered
    ARRIVAL = "arrival"  # pods arrived and the window is still open: reconcile with it open
    SCAN = "scan"  # the scan interval passed
    STOP = "stop"


class Batcher:
    """Thread-safe trigger collector with an injectable monotonic clock (tests use a fake one)."""

    def __init__(
        self,
        idle: float,
        maximum: float,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.idle = idle
        self.maximum = maximum
        self.clock = clock
        self._cond = threading.Condition()
        self._first: float | None = None
        self._last: float | None = None
        self._arrived = False  # a trigger came since the loop last woke for one
        self._stopped = False

    def notify(self) -> None:
        """A pod became unschedulable (or changed its pending message)."""
        with self._cond:
            now = self.clock()
            if self._first is None:
                self._first = now
            self._last = now
            self._arrived = True
            self._cond.notify_all()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()

    def ready_at(self) -> float | None:
        """When the open window closes, or None when no window is open."""
        if self._first is None or self._last is None:
            return None
        return min(self._last + self.idle, self._first + self.maximum)

    def is_open(self) -> bool:
        """A window is open: pods arrived that its closing reconcile has not yet planned."""
        with self._cond:
            return self._first is not None

    def wait(self, scan_interval: float) -> Wake:
        """Block until the window closed (BATCH), pods arrived while it stays open (ARRIVAL), the scan
        interval passed (SCAN), or stop (STOP)."""
        deadline = self.clock() + scan_interval
        with self._cond:
            while True:
                if self._stopped:
                    return Wake.STOP
                now = self.clock()
                ready = self.ready_at()
                if ready is not None and now >= ready:
                    self._first = self._last = None
                    self._arrived = False
                    return Wake.BATCH
                if self._arrived:
                    self._arrived = False
                    return Wake.ARRIVAL
                if now >= deadline:
                    return Wake.SCAN
                until = deadline if ready is None else min(ready, deadline)
                self._cond.wait(timeout=max(0.0, min(until - now, 1.0)))
