"""The status ConfigMap's ``nodesKept``: why managed nodes stay, for the first 50 not kept for being used."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from autoscaler.core.planning.decisions import Block, Blocked, Hold
from autoscaler.core.planning.planner import PlanInput, plan
from autoscaler.runtime.status import status_summary
from tests.builders import aws_offerings, snapshot

if TYPE_CHECKING:
    from collections.abc import Callable

    from autoscaler.config.options import Config

NOW = 1_795_168_800.0
USED = Block(Hold.UTILISED, "utilization 0.9 is at or above the threshold")
YOUNG = Block(Hold.NEW_NODE, "younger than newNodeGracePeriod")


def test_nodes_kept_for_being_used_are_left_out_and_only_the_first_50_others_listed(
    make_config: Callable[..., Config],
) -> None:
    cfg = make_config()
    decided = plan(PlanInput(snapshot(), aws_offerings(), cfg, NOW))
    blocked = tuple(
        Blocked(f"ip-10-0-{i // 250}-{i % 250}", (USED,) if i % 3 == 0 else (YOUNG,)) for i in range(3000)
    )
    decided = replace(decided, removal=replace(decided.removal, blocked=blocked))

    kept = status_summary(decided, {}, cfg, NOW, [])["nodesKept"]

    expected = [b.node for b in blocked if b.blocks == (YOUNG,)][:50]
    assert list(kept) == expected
    assert set(kept.values()) == {YOUNG.detail}


def test_a_node_kept_for_being_used_and_for_another_reason_is_listed_with_both(
    make_config: Callable[..., Config],
) -> None:
    cfg = make_config()
    decided = plan(PlanInput(snapshot(), aws_offerings(), cfg, NOW))
    both = Blocked("ip-10-0-0-7", (USED, YOUNG))
    decided = replace(
        decided, removal=replace(decided.removal, blocked=(Blocked("ip-10-0-0-6", (USED,)), both))
    )

    kept = status_summary(decided, {}, cfg, NOW, [])["nodesKept"]

    assert kept == {"ip-10-0-0-7": both.reason}
