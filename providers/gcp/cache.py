"""A value fetched from the cloud, kept for a while, refreshed in place, and kept when a refresh fails."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

import structlog

__all__ = ["Refreshing"]

T = TypeVar("T")
log = structlog.get_logger("tidal.providers.gcp")


class Refreshing(Generic[T]):
    """``get(now)`` returns the cached value, fetching it when older than ``interval``.

    A failed refresh keeps the last good value and tries again after ``retry_after`` seconds (not on every
    call: a cloud outage must not turn every reconcile into a slow timeout). With no good value yet, the
    failure propagates.
    """

    def __init__(self, what: str, fetch: Callable[[], T], *, interval: float, retry_after: float) -> None:
        self.what = what
        self._fetch = fetch
        self.interval = interval
        self.retry_after = retry_after
        self._value: T | None = None
        self._fetched_at: float | None = None
        self._next_try = 0.0
        self._lock = threading.Lock()
        self.last_error = ""

    def get(self, now: float) -> T:
        """The value, refreshed if due; raises only when there has never been a good value."""
        with self._lock:
            due = self._fetched_at is None or now - self._fetched_at >= self.interval
            if due and now >= self._next_try:
                try:
                    self._value = self._fetch()
                    self._fetched_at = now
                    self.last_error = ""
                except Exception as err:  # any failure: keep serving the last good value
                    self.last_error = f"{type(err).__name__}: {' '.join(str(err).split())[:200]}"
                    self._next_try = now + self.retry_after
                    if self._value is None:
                        raise
                    log.warning("gcp_refresh_failed_kept_last", what=self.what, error=self.last_error)
            if self._value is None:
                raise LookupError(f"{self.what} not fetched yet (last error: {self.last_error or 'none'})")
            return self._value

    @property
    def value(self) -> T | None:
        """The last good value, without fetching (None before the first)."""
        with self._lock:
            return self._value

    def invalidate(self) -> None:
        """Fetch again on the next ``get``."""
        with self._lock:
            self._fetched_at = None
            self._next_try = 0.0
