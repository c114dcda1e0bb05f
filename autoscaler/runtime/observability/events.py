"""Kubernetes events on pods and nodes, so ``kubectl describe`` says what tidal did and why.

A reconcile runs every few seconds and would otherwise repeat "NotTriggerScaleUp" on every pending pod each
time; the recorder sends an identical event once per window. Events are advisory: a failing API call is
logged and dropped, never allowed to break the reconcile that produced it. The reasons (``TriggeredScaleUp``,
``NotTriggerScaleUp`` — cluster-autoscaler's too, so existing alerts carry over — ``ScaleDown``...) and
messages are written where the decision is made.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import structlog

from autoscaler.core.model import Pod

__all__ = ["NORMAL", "EventRecorder"]

log = structlog.get_logger("tidal.events")

NORMAL = "Normal"

EventSink = Callable[..., None]


class EventRecorder:
    """Sends pod and node events through ``ClusterActions``-style sinks, once per identical event per window.

    ``sink(pod, reason, message, event_type)`` receives pod events; ``node_sink(node_name, reason, message,
    event_type)`` receives node events (``sink`` too when ``node_sink`` is not given).
    """

    def __init__(
        self,
        sink: EventSink,
        *,
        node_sink: EventSink | None = None,
        clock: Callable[[], float] = time.time,
        dedupe_window: float = 600,
        max_entries: int = 10_000,
    ) -> None:
        """``max_entries`` caps memory even within a window (a flood of distinct events); oldest go first."""
        self._pod_sink = sink
        self._node_sink = sink if node_sink is None else node_sink
        self._clock = clock
        self.dedupe_window = dedupe_window
        self._max_entries = max_entries
        # key -> time sent, oldest first; re-sending moves a key to the end, so expiry pops from the front.
        self._sent: OrderedDict[tuple[str, str, str, str], float] = OrderedDict()
        self._lock = threading.Lock()

    def pod(self, pod: Pod, reason: str, message: str, event_type: str = NORMAL) -> bool:
        """Record an event on ``pod``; False when it was a duplicate within the window or the sink failed."""
        try:
            # The uid tells a recreated pod (same name, new uid) apart, so it gets its own events.
            identity = pod.uid or pod.key
        except Exception as err:
            log.warning("event not sent", reason=reason, error=repr(err))
            return False
        return self._record("Pod", identity, self._pod_sink, pod, reason, message, event_type)

    def node(self, node_name: str, reason: str, message: str, event_type: str = NORMAL) -> bool:
        """Record an event on the node named ``node_name``; False when a duplicate or the sink failed."""
        return self._record("Node", str(node_name), self._node_sink, node_name, reason, message, event_type)

    def __len__(self) -> int:
        """How many recent events are remembered for de-duplication."""
        with self._lock:
            return len(self._sent)

    def _record(
        self,
        kind: str,
        identity: str,
        sink: EventSink,
        target: Any,
        reason: str,
        message: str,
        event_type: str,
    ) -> bool:
        key = (kind, identity, str(reason), str(message))
        try:
            now = self._clock()
            with self._lock:
                self._expire(now)
                sent = self._sent.get(key)
                if sent is not None and now - sent < self.dedupe_window:
                    return False
        except Exception as err:
            log.warning("event not sent", kind=kind, object=identity, reason=reason, error=repr(err))
            return False
        try:
            sink(target, reason, message, event_type)
        except Exception as err:
            # Not remembered as sent, so the next reconcile tries again.
            log.warning("event not sent", kind=kind, object=identity, reason=reason, error=repr(err))
            return False
        with self._lock:
            self._sent[key] = now
            self._sent.move_to_end(key)
            while len(self._sent) > self._max_entries:
                self._sent.popitem(last=False)
        return True

    def _expire(self, now: float) -> None:
        while self._sent:
            oldest = next(iter(self._sent.values()))
            if now - oldest < self.dedupe_window:
                break
            self._sent.popitem(last=False)
