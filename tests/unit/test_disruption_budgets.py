"""Disruption budgets: how many nodes may be disrupted at once, per method, in time windows (cron, UTC)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pytest

from autoscaler.config.options import ConfigError, config_from_mapping
from autoscaler.core.disruption.budgets import Budget, allowed, parse_cron
from autoscaler.core.planning.decisions import Hold
from autoscaler.core.planning.planner import PlanInput, plan
from tests.builders import aws_offerings, node, snapshot

if TYPE_CHECKING:
    from collections.abc import Callable

    from autoscaler.config.options import Config

NOW = 1_795_172_400.0  # Friday 2026-11-20T11:00:00Z
LONG_AGO = {"tidal.dev/unneeded-since": "2026-11-20T09:00:00Z"}


def at(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def empty_nodes(n: int) -> list[dict[str, Any]]:
    return [node(f"cpu-{i}", managed=True, annotations=LONG_AGO) for i in range(n)]


def removed(
    make_config: Callable[..., Config], nodes: list[dict[str, Any]], **disruption: Any
) -> tuple[list[str], dict[str, str]]:
    result = plan(PlanInput(snapshot(*nodes), aws_offerings(), make_config(disruption=disruption), NOW))
    return [r.node for r in result.removal.removals], {b.node: b.reason for b in result.removal.blocked}


def test_a_budget_of_one_removes_one_empty_node_per_plan(make_config: Callable[..., Config]) -> None:
    gone, kept = removed(make_config, empty_nodes(3), budgets=[{"nodes": 1}])
    assert gone == ["cpu-0"]
    assert kept["cpu-1"] == "empty: disruption budget 1 allows no more now (1 of 3 nodes being disrupted)"


def test_nodes_already_being_disrupted_count_against_the_budget(make_config: Callable[..., Config]) -> None:
    nodes = empty_nodes(3)
    nodes[0]["spec"].update(
        unschedulable=True, taints=[{"key": "tidal.dev/disrupted", "effect": "NoSchedule"}]
    )
    cfg = make_config(disruption={"budgets": [{"nodes": 1}]})
    result = plan(PlanInput(snapshot(*nodes), aws_offerings(), cfg, NOW, draining={"cpu-0"}))
    kept = {b.node: b.reason for b in result.removal.blocked}
    assert result.removal.removals == ()
    assert kept["cpu-0"] == "being drained"
    assert "(1 of 3 nodes being disrupted)" in kept["cpu-1"]


def test_a_blocked_node_says_in_kind_which_budget_or_drain_keeps_it(
    make_config: Callable[..., Config],
) -> None:
    nodes = empty_nodes(3)
    nodes[0]["spec"].update(
        unschedulable=True, taints=[{"key": "tidal.dev/disrupted", "effect": "NoSchedule"}]
    )
    cfg = make_config(disruption={"budgets": [{"nodes": 1}]})
    result = plan(PlanInput(snapshot(*nodes), aws_offerings(), cfg, NOW, draining={"cpu-0"}))
    kinds = {b.node: b.kinds for b in result.removal.blocked}
    assert kinds == {"cpu-0": (Hold.DISRUPTING,), "cpu-1": (Hold.BUDGET,), "cpu-2": (Hold.BUDGET,)}


def test_a_node_a_drain_left_cordoned_is_decided_again(make_config: Callable[..., Config]) -> None:
    nodes = empty_nodes(2)
    nodes[0]["spec"].update(
        unschedulable=True, taints=[{"key": "tidal.dev/disrupted", "effect": "NoSchedule"}]
    )
    gone, _ = removed(make_config, nodes, budgets=[{"nodes": 1}])
    assert gone == ["cpu-0"]  # no drain runs for it any more (a restart, a failed uncordon): finish it


def test_a_percentage_is_of_tidal_s_nodes_rounded_up(make_config: Callable[..., Config]) -> None:
    gone, _ = removed(make_config, empty_nodes(11), budgets=[{"nodes": "10%"}])
    assert len(gone) == 2  # 10% of 11 is 1.1


def test_a_budget_bounds_only_the_methods_it_names(make_config: Callable[..., Config]) -> None:
    gone, _ = removed(make_config, empty_nodes(3), budgets=[{"nodes": 0, "reasons": ["drifted"]}])
    assert len(gone) == 3


def test_the_most_restrictive_budget_that_holds_wins(make_config: Callable[..., Config]) -> None:
    budgets = [{"nodes": 2}, {"nodes": "0", "schedule": "0 9 * * mon-fri", "duration": "8h"}]
    gone, kept = removed(make_config, empty_nodes(3), budgets=budgets)
    assert gone == []  # Friday 11:00 is inside the business-hours window
    assert "disruption budget 0 from '0 9 * * mon-fri'" in kept["cpu-0"]


def test_a_window_that_does_not_hold_bounds_nothing(make_config: Callable[..., Config]) -> None:
    budgets = [{"nodes": "0", "schedule": "0 22 * * *", "duration": "2h"}]
    gone, _ = removed(make_config, empty_nodes(2), budgets=budgets)
    assert len(gone) == 2


def test_no_budget_means_no_bound() -> None:
    assert allowed("empty", (), 10, 9, NOW) == (None, None)


def test_spot_interruptions_are_never_held_back() -> None:
    assert allowed("interrupted", (Budget(count=0),), 10, 0, NOW) == (None, None)


@pytest.mark.parametrize(
    ("schedule", "when", "duration", "holds"),
    [
        ("0 9 * * mon-fri", "2026-11-20T16:59:00", 8 * 3600, True),  # Friday, last minute of the window
        ("0 9 * * mon-fri", "2026-11-20T17:00:00", 8 * 3600, False),
        ("0 9 * * mon-fri", "2026-11-21T10:00:00", 8 * 3600, False),  # Saturday
        ("@daily", "2026-11-21T00:30:00", 3600, True),
        ("*/15 * * * *", "2026-11-21T00:31:00", 60, False),
        ("*/15 * * * *", "2026-11-21T00:30:30", 60, True),
        ("0 0 1 jan,jul *", "2026-07-01T05:00:00", 6 * 3600, True),
        ("0 0 * * 7", "2026-11-22T01:00:00", 2 * 3600, True),  # 7 is Sunday too
        ("0 0 13 * fri", "2026-11-20T01:00:00", 2 * 3600, True),  # day of month OR day of week, as cron
    ],
)
def test_a_schedule_holds_for_its_duration_from_each_time_it_names(
    schedule: str, when: str, duration: int, holds: bool
) -> None:
    assert parse_cron(schedule).fired_within(at(when), duration) is holds


@pytest.mark.parametrize(
    ("budgets", "message"),
    [
        ([{"nodes": "ten"}], "disruption.budgets[0].nodes: 'ten' is not a number of nodes or a percentage"),
        ([{"nodes": "150%"}], "disruption.budgets[0].nodes: '150%' is more than 100%"),
        ([{"nodes": 1, "reasons": ["Drifted"]}], "disruption.budgets[0].reasons[0]: 'Drifted' is not one of"),
        ([{"nodes": 1, "schedule": "@daily"}], "disruption.budgets[0].schedule: schedule and duration go"),
        (
            [{"nodes": 1, "schedule": "0 25 * * *", "duration": "1h"}],
            "disruption.budgets[0].schedule: '0 25 * * *': hour: '25' is outside 0-23",
        ),
        ([{"node": 1}], "disruption.budgets[0].node: unknown key (did you mean 'nodes'?)"),
        ({"nodes": 1}, "disruption.budgets: {'nodes': 1} is not a list of budgets"),
    ],
)
def test_a_bad_budget_is_one_line_naming_the_field_and_value(
    budgets: list[dict[str, Any]] | dict[str, int], message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        config_from_mapping({"disruption": {"budgets": budgets}})
    assert any(e.startswith(message) for e in caught.value.errors), caught.value.errors


def test_a_bad_unhealthy_condition_is_one_line_naming_the_field_and_value() -> None:
    with pytest.raises(ConfigError) as caught:
        config_from_mapping(
            {"disruption": {"unhealthyConditions": [{"type": "Ready", "status": False, "duration": "30m"}]}}
        )
    assert caught.value.errors == [
        "disruption.unhealthyConditions[0].status: false is not one of 'True', 'False', 'Unknown' (quote it in YAML)"
    ]
