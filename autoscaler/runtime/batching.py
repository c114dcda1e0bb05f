"""The batch window: react to a burst of unschedulable pods once, soon, and with all of them.

The first unschedulable pod opens a window. It closes when no new pod arrived for ``batchIdleDuration`` or
``batchMaxDuration`` after it opened, whichever comes first; with no trigger, a reconcile still runs every
``scanInterval``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


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
        self._stopped = False

    def notify(self) -> None:
        """A pod became unschedulable (or changed its pending message)."""
        with self._cond:
            now = self.clock()
            if self._first is None:
                self._first = now
            self._last = now
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

    def wait(self, scan_interval: float) -> str:
        """Block until a batch is ready ("batch"), the scan interval passed ("scan"), or stop ("stop")."""
        deadline = self.clock() + scan_interval
        with self._cond:
            while True:
                if self._stopped:
                    return "stop"
                now = self.clock()
                ready = self.ready_at()
                if ready is not None and now >= ready:
                    self._first = self._last = None
                    return "batch"
                if now >= deadline:
                    return "scan"
                until = deadline if ready is None else min(ready, deadline)
                self._cond.wait(timeout=max(0.0, min(until - now, 1.0)))
