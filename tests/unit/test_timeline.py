"""The simulation's timeline says what happened: per-queue GPUs against quota and limit, launches, removals,
interruptions and outages marked, spot apart from on-demand, axes scaled to the data, and reasons in words."""

from __future__ import annotations

import dataclasses
from functools import cache
from typing import TYPE_CHECKING

import pytest

from autoscaler.sim.run import simulate
from autoscaler.sim.scenario import load_scenario
from autoscaler.sim.timeline_plot import scale

if TYPE_CHECKING:
    from typing import Any

    from autoscaler.sim.record import Record

pytest.importorskip("matplotlib")
import matplotlib.pyplot as plt

from autoscaler.sim.timeline_plot import figure


@cache
def record(name: str) -> Record:
    return simulate(load_scenario(name), bound=False).record


def labels(ax: Any) -> list[str]:
    names: list[str] = ax.get_legend_handles_labels()[1]
    return names


def drawn(rec: Record) -> Any:
    fig = figure(rec)
    axes = fig.get_axes()
    plt.close(fig)
    return axes


def test_a_limit_far_above_the_data_is_a_note_not_a_line_that_flattens_the_curve() -> None:
    day = record("kai-day")  # at most 16 GPUs
    far = dataclasses.replace(day, samples=[dataclasses.replace(s, gpu_limit=512) for s in day.samples])
    gpus = drawn(far)[0]
    assert gpus.get_ylim()[1] < 20
    assert not [name for name in labels(gpus) if name.startswith("clusterGPULimit")]
    assert [t.get_text() for t in gpus.texts] == ["clusterGPULimit 512 (off scale)"]


def test_a_limit_the_data_reaches_is_drawn_as_a_line() -> None:
    gpus = drawn(record("kai-day"))[0]
    assert "clusterGPULimit 16" in labels(gpus)
    assert 16 < gpus.get_ylim()[1] < 20


def test_each_queues_gpus_are_drawn_against_its_quota_and_limit() -> None:
    queues = drawn(record("kai-day"))[1]
    assert {"research running", "research quota 4", "research limit 8"} <= set(labels(queues))
    assert {"production running", "production quota 8", "production limit 12"} <= set(labels(queues))


def test_spot_and_on_demand_gpus_are_told_apart_and_launches_and_removals_are_marked() -> None:
    assert {"spot GPUs", "on-demand GPUs", "launch", "removal"} <= set(labels(drawn(record("kai-day"))[0]))


def test_spot_interruptions_and_capacity_outages_are_marked() -> None:
    assert {"spot interruption", "capacity outage"} <= set(labels(drawn(record("spot-storm"))[0]))


def test_pending_pods_are_counted_by_what_holds_them() -> None:
    kinds = {kind for sample in record("kai-day").samples for kind in sample.pending}
    assert "queue research at its GPU limit" in kinds
    assert "clusterGPULimit 16 reached" in kinds
    assert "scheduling" not in kinds


def test_an_axis_scales_to_its_data_and_the_lines_near_it() -> None:
    assert scale([20], {"clusterGPULimit": 512}).noted == (("clusterGPULimit", 512.0),)
    near = scale([20], {"clusterGPULimit": 24})
    assert near.drawn == (("clusterGPULimit", 24.0),) and near.top == pytest.approx(24 * 1.15)
    assert scale([], {"limit": None}).top == 1.0
