"""EventQueue: a reconcile enqueues its events and goes on; one thread sends them, in order."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from autoscaler.core.model import Pod
from autoscaler.runtime.observability.event_queue import EventQueue
from autoscaler.runtime.observability.events import EventRecorder

POD = Pod(namespace="ml", name="train-0", uid="uid-1")


def test_a_started_queue_returns_before_the_api_server_answers() -> None:
    answering = threading.Event()
    sent: list[str] = []

    def slow_sink(pod: Pod, reason: str, message: str, event_type: str) -> None:
        answering.wait(5)
        sent.append(message)

    queue = EventQueue()
    queue.start()
    events = EventRecorder(queue.wrap(slow_sink))
    try:
        assert events.pod(POD, "TriggeredScaleUp", "pod triggered scale-up: m6i.4xlarge")
        assert sent == []  # the recorder did not wait for the request
        answering.set()
        assert queue.flush()
        assert sent == ["pod triggered scale-up: m6i.4xlarge"]
    finally:
        queue.stop()


def test_events_are_sent_in_the_order_they_were_recorded() -> None:
    sent: list[str] = []
    queue = EventQueue()
    queue.start()
    events = EventRecorder(queue.wrap(lambda pod, reason, message, kind: sent.append(pod.name)))
    pods = [Pod(namespace="ml", name=f"train-{i}", uid=f"uid-{i}") for i in range(50)]
    try:
        for pod in pods:
            events.pod(pod, "TriggeredScaleUp", "m6i.4xlarge")
        assert queue.flush()
    finally:
        queue.stop()
    assert sent == [p.name for p in pods]


def test_a_queue_not_started_sends_in_line() -> None:
    sent: list[tuple[Any, ...]] = []
    events = EventRecorder(EventQueue().wrap(lambda *args: sent.append(args)))

    assert events.pod(POD, "NotTriggerScaleUp", "queue over its limit")

    assert [args[2] for args in sent] == ["queue over its limit"]


def test_a_full_queue_refuses_the_event_so_the_next_reconcile_records_it_again() -> None:
    blocked = threading.Event()
    sent: list[str] = []
    queue = EventQueue(capacity=1)
    queue.start()

    def blocking_sink(pod: Pod, reason: str, message: str, event_type: str) -> None:
        blocked.wait(5)
        sent.append(message)

    events = EventRecorder(queue.wrap(blocking_sink))
    try:
        assert events.pod(POD, "TriggeredScaleUp", "first")  # taken by the sending thread, which blocks
        _wait_until(lambda: len(queue) == 0)
        assert events.pod(POD, "TriggeredScaleUp", "second")  # waits in the queue's one place
        assert not events.pod(POD, "TriggeredScaleUp", "third")  # refused: not remembered as sent
        blocked.set()
        assert queue.flush()
        assert events.pod(POD, "TriggeredScaleUp", "third")
        assert queue.flush()
    finally:
        blocked.set()
        queue.stop()
    assert sent == ["first", "second", "third"]


def test_a_failing_sink_does_not_stop_the_events_after_it() -> None:
    sent: list[str] = []

    def sink(pod: Pod, reason: str, message: str, event_type: str) -> None:
        if message == "bad":
            raise RuntimeError("HTTP 500")
        sent.append(message)

    queue = EventQueue()
    queue.start()
    events = EventRecorder(queue.wrap(sink))
    try:
        events.pod(POD, "TriggeredScaleUp", "bad")
        events.pod(POD, "TriggeredScaleUp", "good")
        assert queue.flush()
    finally:
        queue.stop()
    assert sent == ["good"]


def test_stop_sends_what_is_queued() -> None:
    sent: list[str] = []
    queue = EventQueue()
    queue.start()
    events = EventRecorder(queue.wrap(lambda pod, reason, message, kind: sent.append(message)))
    for i in range(20):
        events.pod(Pod(namespace="ml", name=f"p-{i}", uid=f"u-{i}"), "TriggeredScaleUp", f"m-{i}")

    queue.stop()

    assert sent == [f"m-{i}" for i in range(20)]


def _wait_until(done: Any, timeout: float = 5.0) -> None:
    finished = threading.Event()
    for _ in range(int(timeout / 0.01)):
        if done():
            return
        finished.wait(0.01)
    pytest.fail("condition not reached")
