"""A simulation runs with Python's cycle collector set to collect rarely, and leaves it as it found it."""

from __future__ import annotations

import gc

import pytest

from autoscaler.sim.run import GC_THRESHOLDS, few_collections


def test_the_collector_collects_rarely_while_a_run_lasts_and_is_put_back_after() -> None:
    before = gc.get_threshold()
    with few_collections():
        assert gc.get_threshold() == GC_THRESHOLDS
    assert gc.get_threshold() == before


def test_a_run_that_fails_still_puts_the_collector_back() -> None:
    before = gc.get_threshold()
    with pytest.raises(RuntimeError), few_collections():
        raise RuntimeError("the run failed")
    assert gc.get_threshold() == before
