"""EventRecorder: one event per object, reason and message per window; a broken sink never escapes."""

from __future__ import annotations

from typing import Any

from autoscaler.core.model import Pod
from autoscaler.runtime.observability.events import EventRecorder


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


POD = Pod(namespace="ml", name="train-0", uid="uid-1")


def test_same_event_is_sent_once_within_the_window_and_again_after_it() -> None:
    sent: list[tuple[Any, ...]] = []
    clock = FakeClock()
    events = EventRecorder(lambda *args: sent.append(args), clock=clock, dedupe_window=600)

    assert events.pod(POD, "NotTriggerScaleUp", "queue-limit")
    clock.now += 599
    assert not events.pod(POD, "NotTriggerScaleUp", "queue-limit")
    assert events.pod(POD, "NotTriggerScaleUp", "fits-existing")  # a different message is news
    clock.now += 1
    assert events.pod(POD, "NotTriggerScaleUp", "queue-limit")

    assert [args[2] for args in sent] == ["queue-limit", "fits-existing", "queue-limit"]


def test_expired_entries_are_forgotten() -> None:
    clock = FakeClock()
    events = EventRecorder(lambda *args: None, clock=clock, dedupe_window=10)
    for i in range(50):
        events.node(f"node-{i}", "ScaleDown", "empty for 10m")

    clock.now += 10
    events.node("node-new", "ScaleDown", "empty for 10m")

    assert len(events) == 1


def test_failing_sink_does_not_raise_and_is_retried() -> None:
    calls = []

    def broken(*args: Any) -> None:
        calls.append(args)
        raise RuntimeError("apiserver down")

    events = EventRecorder(broken, clock=FakeClock())
    message = "launching g5.xlarge in us-east-1a (spot, $0.4123/h) for this pod"

    assert not events.pod(POD, "TriggeredScaleUp", message)
    assert not events.pod(POD, "TriggeredScaleUp", message)

    assert len(calls) == 2  # a failed send is not remembered as sent
    assert calls[0][1:] == (
        "TriggeredScaleUp",
        "launching g5.xlarge in us-east-1a (spot, $0.4123/h) for this pod",
        "Normal",
    )
