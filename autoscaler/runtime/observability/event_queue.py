"""Kubernetes events sent in the background, so a reconcile never waits for them.

A burst of pending pods earns each pod a ``TriggeredScaleUp`` event: one API request per pod, which sent in
line would hold the next reconcile (and the nodes it launches) back by as many round trips. Events are
advisory, so they go through a bounded queue that one thread empties in order; the reconcile only enqueues.
A full queue refuses the event (the recorder then logs it and tries again at the next reconcile) rather than
grow without bound while the API server is slow. Until the queue is started, events are sent in line, as
a single reconcile run by hand (``tidal run --once``, tests) expects.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

import structlog

__all__ = ["EventQueue", "EventsBacklogged"]

log = structlog.get_logger("tidal.events")

_STOP = object()


class EventsBacklogged(RuntimeError):
    """The queue is full: the API server is not keeping up with the events."""


class EventQueue:
    """A bounded FIFO of sink calls and the one thread that makes them."""

    def __init__(self, capacity: int = 10_000) -> None:
        self.capacity = capacity
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=capacity)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def wrap(self, sink: Callable[..., None]) -> Callable[..., None]:
        """A sink with ``sink``'s signature that enqueues the call once the queue is started."""

        def enqueue(*args: Any) -> None:
            if self._thread is None:
                sink(*args)
                return
            try:
                self._queue.put_nowait((sink, args))
            except queue.Full:
                raise EventsBacklogged(f"{self.capacity} events are waiting to be sent") from None

        return enqueue

    def start(self) -> None:
        """Start the sending thread (once)."""
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._run, name="tidal-events", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        """Send what is queued, for at most ``timeout`` seconds, then stop the thread."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is None:
            return
        self._queue.put(_STOP)
        thread.join(timeout)
        left = self._queue.qsize()
        if thread.is_alive() or left:
            log.warning("events_not_sent_at_stop", queued=left)

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every queued event was handed to its sink; False when ``timeout`` passed first."""
        done = threading.Event()
        try:
            self._queue.put((lambda: done.set(), ()), timeout=timeout)
        except queue.Full:
            return False
        return done.wait(timeout) if self._thread is not None else self._drain_inline(done)

    def __len__(self) -> int:
        """Events waiting to be sent."""
        return self._queue.qsize()

    def _drain_inline(self, done: threading.Event) -> bool:
        # Not started (or stopped): whatever is queued is sent here, in the caller's thread.
        while not done.is_set():
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return done.is_set()
            if item is not _STOP:
                self._send(*item)
        return True

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            self._send(*item)

    @staticmethod
    def _send(sink: Callable[..., None], args: tuple[Any, ...]) -> None:
        try:
            sink(*args)
        except Exception as err:  # an event is a courtesy: losing one must never stop the others
            log.warning("event not sent", error=repr(err))
