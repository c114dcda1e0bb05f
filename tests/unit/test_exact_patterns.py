"""The exact plan by node patterns: every maximal way to fill one node of each type, checked whole, and how
many nodes of each to buy; exact in one program for batches of GPU shares the program by counts cannot split
within its work budget."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

import pytest

from autoscaler.core.demand import select
from autoscaler.core.planning import exact, exact_patterns
from autoscaler.core.planning.classes import pod_mode
from autoscaler.core.planning.exact_model import fitting
from autoscaler.core.planning.exact_solve import solve
from autoscaler.core.planning.offerings import OfferingIndex
from tests.builders import pod, snapshot
from tests.unit.test_exact_plan import GPU_TOLERATION, KAI_NO_GPU, ZONES, catalog, launched, quarter, run

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from autoscaler.config.options import Config


def shares(name: str, n: int, *, cpu: str, memory: str, **annotations: str) -> list[dict[str, Any]]:
    """``n`` replicas of a KAI GPU-share Deployment (``annotations`` as KAI reads them)."""
    return [
        pod(
            f"{name}-{i}",
            cpu=cpu,
            memory=memory,
            scheduler="kai-scheduler",
            message=KAI_NO_GPU,
            annotations=dict(annotations),
            labels={"app": name},
            tolerations=[GPU_TOLERATION],
        )
        for i in range(n)
    ]


def inference_fleet() -> list[dict[str, Any]]:
    """32 pods of three services: 12 model servers taking 8000 MiB of a GPU, 6 embedders taking 4000 MiB
    of a T4 in sm-sharing mode with 3 cpu each, and 14 rerankers taking half a GPU in sm-sharing mode."""
    return (
        shares("server", 12, cpu="500m", memory="2Gi", **{"gpu-memory": "8000"})
        + shares(
            "embed",
            6,
            cpu="3",
            memory="12Gi",
            **{
                "gpu-memory": "4000",
                "kai.scheduler/gpu-compute-sharing-mode": "sm-sharing",
                "tidal.dev/instance-gpu-skus": "T4",
            },
        )
        + shares(
            "rerank",
            14,
            cpu="1",
            memory="2Gi",
            **{"gpu-fraction": "0.5", "kai.scheduler/gpu-compute-sharing-mode": "sm-sharing"},
        )
    )


def mixed_fractions() -> list[dict[str, Any]]:
    """Shares of 0.5, 0.4, 0.3 and 0.25 of a GPU in both compute modes: some fillings of a multi-GPU node
    pack only when the biggest share does not go first onto the first device with room."""
    return (
        shares("a", 3, cpu="1", memory="4Gi", **{"gpu-fraction": "0.5"})
        + shares("b", 3, cpu="1", memory="4Gi", **{"gpu-fraction": "0.4"})
        + shares("c", 4, cpu="500m", memory="2Gi", **{"gpu-fraction": "0.3"})
        + shares("d", 4, cpu="500m", memory="2Gi", **{"gpu-fraction": "0.25"})
        + shares(
            "e",
            3,
            cpu="1",
            memory="2Gi",
            **{"gpu-fraction": "0.3", "kai.scheduler/gpu-compute-sharing-mode": "sm-sharing"},
        )
    )


def problem_of(make_config: Callable[..., Config], objs: list[dict[str, Any]], **cfg: Any) -> exact.Problem:
    """The exact plan's problem for ``objs`` on new nodes of the us-east-1 catalog."""
    config = make_config(zones=list(ZONES), **cfg)
    snap = snapshot(*objs)
    index = OfferingIndex(catalog(), config, snap.daemonsets)
    demand = select(snap, config, gpu_memory_mib=index.smallest_gpu_memory())
    items = [
        (p, demand.constraints[p.key], pod_mode(p, demand.constraints[p.key], index)) for p in demand.counted
    ]
    return exact.problem(items, index)


def by_type(
    p: exact.Problem, found: list[exact_patterns.Pattern], instance_type: str
) -> set[tuple[Any, ...]]:
    return {(f.counts, f.devices) for f in found if p.types[f.type].offering.instance_type == instance_type}


def test_a_quarter_gpu_pattern_is_as_many_pods_as_the_node_holds(make_config: Callable[..., Config]) -> None:
    # A g4dn.xlarge leaves room for three pods of 1 cpu and 4Gi; a g4dn.2xlarge for four quarters of its T4.
    p = problem_of(make_config, [quarter(f"infer-{i}") for i in range(8)])
    found = exact_patterns.patterns(p)
    assert found is not None
    assert by_type(p, found, "g4dn.xlarge") == {(((0, 3),), (((0, 3),),))}
    assert by_type(p, found, "g4dn.2xlarge") == {(((0, 4),), (((0, 4),),))}


def test_every_pattern_packs_and_leaves_no_room_for_one_more_pod(make_config: Callable[..., Config]) -> None:
    p = problem_of(make_config, mixed_fractions())
    found = exact_patterns.patterns(p)
    assert found
    for f in found:
        t = p.types[f.type]
        fits = fitting(p, t)
        node = exact.Solution((exact.Bought(f.type, f.counts, f.devices),), t.price)
        assert _sound(p, node), (t.offering.key, f)
        counts = dict(f.counts)
        for g in fits:
            if counts.get(g, 0) < fits[g]:
                more = {**counts, g: counts.get(g, 0) + 1}
                assert not _holds(p, f.type, more), (t.offering.key, f, g)


def _holds(p: exact.Problem, t_index: int, counts: dict[int, int]) -> bool:
    """Whether one node of the type holds ``counts``, by the exhaustive packer."""
    t = p.types[t_index]
    items = [(g, s, n) for g, n in counts.items() if n and (s := p.groups[g].share) is not None]
    devices = exact.pack(items, exact.device_shape(t.offering)) if items else ()
    if devices is None:
        return False
    node = exact.Solution((exact.Bought(t_index, tuple(sorted(counts.items())), devices),), t.price)
    return _sound(p, node)


def _sound(p: exact.Problem, node: exact.Solution) -> bool:
    """Whether one node is sound: verify then finds at most the batch's other pods unplaced."""
    fault = exact.verify(p, node)
    return fault == "" or fault.startswith("pods placed per group")


def test_the_pattern_program_finds_the_proven_optimum(make_config: Callable[..., Config]) -> None:
    p = problem_of(make_config, mixed_fractions())
    by_patterns = exact_patterns.solve(p)
    proven = solve(p)
    assert by_patterns is not None and by_patterns.solution is not None
    assert by_patterns.status == "optimal" and proven.status == "optimal" and proven.solution is not None
    assert by_patterns.solution.cost == pytest.approx(proven.solution.cost)
    assert exact.verify(p, by_patterns.solution) == ""


def test_pods_a_pattern_has_room_for_beyond_the_batch_are_given_back(
    make_config: Callable[..., Config],
) -> None:
    # Five quarters: two g4dn.xlarge, whose pattern holds three each; the second gives one place back, on its
    # GPU too.
    p = problem_of(make_config, [quarter(f"infer-{i}") for i in range(5)])
    outcome = exact_patterns.solve(p)
    assert outcome is not None and outcome.solution is not None
    assert exact.verify(p, outcome.solution) == ""
    assert [p.types[b.type].offering.instance_type for b in outcome.solution.nodes] == ["g4dn.xlarge"] * 2
    assert sorted((b.counts, b.devices) for b in outcome.solution.nodes) == [
        (((0, 2),), (((0, 2),),)),
        (((0, 3),), (((0, 3),),)),
    ]
    assert outcome.solution.cost == pytest.approx(2 * 0.526)


def test_no_pattern_plan_is_cheaper_than_the_bound_it_is_given(make_config: Callable[..., Config]) -> None:
    p = problem_of(make_config, [quarter(f"infer-{i}") for i in range(8)])
    outcome = exact_patterns.solve(p, cost_bound=1.5)
    assert outcome is not None and outcome.status == "infeasible"


def test_no_pattern_is_listed_for_a_node_dearer_alone_than_the_plan_to_beat(
    make_config: Callable[..., Config],
) -> None:
    p = problem_of(make_config, [quarter(f"infer-{i}") for i in range(8)])
    everything = exact_patterns.patterns(p)
    within = exact_patterns.patterns(p, cost_bound=1.6)
    assert everything is not None and within is not None
    assert any(p.types[f.type].price > 1.6 for f in everything)
    assert within == [f for f in everything if p.types[f.type].price <= 1.6]


def test_a_batch_no_node_within_the_bound_can_take_has_no_plan(make_config: Callable[..., Config]) -> None:
    p = problem_of(make_config, [quarter(f"infer-{i}") for i in range(8)])
    outcome = exact_patterns.solve(p, cost_bound=0.1)
    assert outcome is not None and outcome.status == "infeasible" and outcome.solution is None


def test_a_batch_with_more_patterns_than_the_budget_is_left_to_the_program_by_counts(
    make_config: Callable[..., Config],
) -> None:
    p = problem_of(make_config, mixed_fractions())
    assert exact_patterns.patterns(p, max_patterns=5) is None
    assert exact_patterns.patterns(p, max_steps=50) is None
    assert exact_patterns.solve(p, max_steps=50) is None


def test_the_pattern_budget_is_counted_in_steps_so_a_batch_gets_the_same_patterns_every_time(
    make_config: Callable[..., Config],
) -> None:
    p = problem_of(make_config, mixed_fractions())
    assert exact_patterns.patterns(p) == exact_patterns.patterns(p)


def test_a_fleet_of_gpu_shares_the_heuristic_packs_node_by_node_gets_the_cheapest_nodes(
    make_config: Callable[..., Config],
) -> None:
    # The heuristic buys 13 g4dn.xlarge and 3 g4dn.2xlarge ($9.094/h); the optimum needs one g4dn.xlarge less.
    heuristic = run(make_config, *inference_fleet(), exactPlanMaxPods=0, capacityTypes=["on-demand"])
    assert heuristic.launch.cost_per_hour == pytest.approx(9.094)
    result = run(make_config, *inference_fleet(), capacityTypes=["on-demand"])
    assert result.launch.cost_per_hour == pytest.approx(8.568)
    assert launched(result) == Counter({"g4dn.xlarge": 12, "g4dn.2xlarge": 3})
    assert sorted(p for la in result.launch.launches for p in la.pods) == sorted(
        p for la in heuristic.launch.launches for p in la.pods
    )
    # The program by counts, run to the end, proves nothing is cheaper.
    proven = solve(
        problem_of(make_config, inference_fleet(), capacityTypes=["on-demand"]), cost_bound=8.568 - 1e-6
    )
    assert proven.status == "infeasible"


def test_a_share_spread_over_several_gpus_is_left_to_the_program_by_counts(
    make_config: Callable[..., Config],
) -> None:
    objs = shares(
        "shard", 4, cpu="2", memory="8Gi", **{"gpu-fraction": "0.5", "gpu-fraction-num-devices": "2"}
    )
    p = problem_of(make_config, objs)
    assert any(g.share is not None and g.share.devices == 2 for g in p.groups)
    assert exact_patterns.patterns(p) is None
    assert exact_patterns.solve(p) is None
