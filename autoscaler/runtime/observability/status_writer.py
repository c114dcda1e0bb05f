"""The status ConfigMap written in the background: only its newest content matters.

A reconcile's status (what it planned, the warnings, the nodes kept) changes with every reconcile while pods
arrive, and writing it took a round trip or two (a replace, a create the first time) inside the reconcile.
The reconcile now hands the content over and goes on; one thread writes it. A content handed over while an
older one still waits replaces it, so a slow API server is written at most once per write it can take,
always with the newest status. Until started, the writer writes in line, as a single reconcile run by hand
(``tidal run --once``, tests) expects.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping

import structlog

__all__ = ["StatusWriter"]

log = structlog.get_logger("tidal.controller")

Write = Callable[[str, str, Mapping[str, str]], None]


class StatusWriter:
    """Latest-wins writer of one ConfigMap per (namespace, name)."""

    def __init__(self, write: Write) -> None:
        self._write = write
        self._cond = threading.Condition()
        self._waiting: dict[tuple[str, str], Mapping[str, str]] = {}
        self._busy = False
        self._thread: threading.Thread | None = None
        self._stopping = False

    def submit(self, namespace: str, name: str, data: Mapping[str, str]) -> None:
        """Write ``data`` to ``namespace/name``: in line until started (errors raised to the caller), then
        by the writer's thread (errors logged as ``status_write_failed``)."""
        with self._cond:
            if self._thread is not None:
                self._waiting[(namespace, name)] = data
                self._cond.notify_all()
                return
        self._write(namespace, name, data)

    def start(self) -> None:
        """Start the writing thread (once)."""
        with self._cond:
            if self._thread is not None:
                return
            self._stopping = False
            self._thread = threading.Thread(target=self._run, name="tidal-status", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        """Write what waits, for at most ``timeout`` seconds, then stop the thread."""
        with self._cond:
            thread = self._thread
            self._stopping = True
            self._cond.notify_all()
        if thread is not None:
            thread.join(timeout)
        with self._cond:
            self._thread = None

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until nothing waits to be written; False when ``timeout`` passed first."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._waiting and not self._busy, timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._waiting or self._stopping)
                if not self._waiting:
                    return
                (namespace, name), data = self._waiting.popitem()
                self._busy = True
            try:
                self._write(namespace, name, data)
            except Exception as err:  # status is informational; the next content is written all the same
                log.warning("status_write_failed", error=str(err))
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()
