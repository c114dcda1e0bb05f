"""The batch window closes on idleness or at its maximum, every arrival wakes the loop while it is open, and a
scan runs without triggers."""

import threading

from autoscaler.runtime.batching import Batcher, Wake


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


def test_an_arrival_wakes_the_loop_at_once_and_the_window_stays_open() -> None:
    clock = FakeClock()
    batcher = Batcher(1.0, 10.0, clock=clock)
    batcher.notify()

    assert batcher.wait(10.0) == Wake.ARRIVAL
    assert batcher.is_open()
    assert batcher.ready_at() == 1.0


def test_after_waking_for_an_arrival_the_loop_next_wakes_when_the_window_closes() -> None:
    clock = FakeClock()
    batcher = Batcher(1.0, 10.0, clock=clock)
    batcher.notify()
    assert batcher.wait(10.0) == Wake.ARRIVAL
    clock.now = 1.0

    assert batcher.wait(10.0) == Wake.BATCH
    assert not batcher.is_open()


def test_a_steady_stream_wakes_the_loop_for_each_pod_until_the_window_closes_at_the_maximum() -> None:
    clock = FakeClock()
    batcher = Batcher(1.0, 10.0, clock=clock)
    wakes = []
    for i in range(40):
        clock.now = i * 0.3
        batcher.notify()
        wakes.append(batcher.wait(10.0))

    # Pods 0.3s apart keep the window open; it closes at 10s, with the pod that arrived at 10.2s in it.
    assert wakes[:34] == [Wake.ARRIVAL] * 34
    assert wakes[34] == Wake.BATCH
    assert wakes[35] == Wake.ARRIVAL


def test_a_window_that_closed_with_arrivals_unseen_wakes_the_loop_once_for_the_batch() -> None:
    clock = FakeClock()
    batcher = Batcher(1.0, 10.0, clock=clock)
    batcher.notify()
    clock.now = 0.5
    batcher.notify()
    clock.now = 1.5

    assert batcher.wait(10.0) == Wake.BATCH
    assert not batcher.is_open()
