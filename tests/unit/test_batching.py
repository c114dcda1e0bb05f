"""The batch window closes on idleness or at its maximum, and a scan runs without triggers."""

import threading

from autoscaler.runtime.batching import Batcher


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.read = threading.Event()

    def __call__(self) -> float:
        self.read.set()
        return self.now


def test_without_triggers_the_window_stays_closed() -> None:
    batcher = Batcher(1.0, 10.0, clock=FakeClock())
    assert batcher.ready_at() is None


def test_a_single_trigger_closes_after_the_idle_duration() -> None:
    clock = FakeClock()
    batcher = Batcher(1.0, 10.0, clock=clock)
    batcher.notify()
    assert batcher.ready_at() == 1.0


def test_a_steady_stream_of_triggers_closes_at_the_maximum() -> None:
    clock = FakeClock()
    batcher = Batcher(1.0, 10.0, clock=clock)
    for t in range(25):
        clock.now = t * 0.5
        batcher.notify()
    assert batcher.ready_at() == 10.0


def test_wait_returns_batch_once_the_window_closed() -> None:
    clock = FakeClock()
    batcher = Batcher(1.0, 10.0, clock=clock)
    batcher.notify()
    clock.now = 1.5
    assert batcher.wait(10.0) == "batch"
    assert batcher.ready_at() is None


def test_wait_returns_scan_after_the_scan_interval() -> None:
    clock = FakeClock()
    batcher = Batcher(1.0, 10.0, clock=clock)
    result = []
    t = threading.Thread(target=lambda: result.append(batcher.wait(5.0)), daemon=True)
    t.start()
    assert clock.read.wait(timeout=5)  # the waiter's deadline is fixed at 5.0
    # Holding the waiter's lock, the waiter is either about to read the clock or asleep on the condition,
    # whose timed sleep a fake clock cannot end: move time on, then wake it.
    with batcher._cond:
        clock.now = 6.0
        batcher._cond.notify_all()
    t.join(timeout=5)
    assert result == ["scan"]


def test_stop_wakes_a_waiter() -> None:
    batcher = Batcher(1.0, 10.0)
    result = []
    t = threading.Thread(target=lambda: result.append(batcher.wait(60.0)))
    t.start()
    batcher.stop()
    t.join(timeout=3)
    assert result == ["stop"]
