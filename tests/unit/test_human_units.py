"""What people read says durations as durations (``3d22h``, never ``338794s``) and counts GPUs both ways."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from autoscaler.cli.render import plan_to_table
from autoscaler.core.planning.planner import PlanInput, plan
from autoscaler.core.quantity import format_duration
from tests.builders import aws_offerings, node, snapshot

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from autoscaler.config.options import Config

NOW = 1_795_168_800.0  # 2026-11-20T10:00:00Z, when the test nodes were created


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (338794, "3d22h"),
        (86400, "1d"),
        (90061, "1d1h"),
        (7200, "2h"),
        (3660, "1h1m"),
        (300, "5m"),
        (90, "1m30s"),
        (59, "59s"),
        (0.4, "0s"),
        (-3, "0s"),
    ],
)
def test_a_duration_is_its_two_largest_whole_units(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def _idle_gpu_node(name: str, unneeded_since: str) -> dict[str, Any]:
    return node(
        name,
        instance_type="g5.12xlarge",
        cpu="48",
        memory="192Gi",
        gpu=4,
        managed=True,
        annotations={"tidal.dev/unneeded-since": unneeded_since},
    )


def test_a_node_unneeded_for_days_says_so_in_days_and_hours(make_config: Callable[..., Config]) -> None:
    snap = snapshot(_idle_gpu_node("gpu-a", "2026-11-20T10:00:00Z"))
    result = plan(PlanInput(snap, aws_offerings(), make_config(), NOW + 338794))
    assert [r.reason for r in result.removal.removals] == ["empty; unneeded for 3d22h"]


def test_a_node_not_yet_unneeded_long_enough_says_both_durations_in_minutes(
    make_config: Callable[..., Config],
) -> None:
    snap = snapshot(_idle_gpu_node("gpu-a", "2026-11-20T10:08:00Z"))
    config = make_config(scaleDown={"unneededWithoutDemand": "5m"})  # one wait for every empty node
    result = plan(PlanInput(snap, aws_offerings(), config, NOW + 600))
    assert [b.reason for b in result.removal.blocked] == ["unneeded for 2m of 5m"]


def test_gpus_after_the_plan_count_the_nodes_it_removes(make_config: Callable[..., Config]) -> None:
    snap = snapshot(
        _idle_gpu_node("gpu-a", "2026-11-20T10:00:00Z"),
        _idle_gpu_node("gpu-b", "2026-11-20T10:00:00Z"),
    )
    config = make_config()
    result = plan(PlanInput(snap, aws_offerings(), config, NOW + 7200))
    assert len(result.removal.removals) == 2
    assert (result.launch.gpus_before, result.gpus_after) == (8, 0)
    first_lines = plan_to_table(result, config).splitlines()[:2]
    assert first_lines[1] == (
        "launch 0 nodes for $0.0000/h, remove 2; GPUs 8 -> 0 (+0 launched, -8 removed; clusterGPULimit none)"
    )
